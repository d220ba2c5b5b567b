#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "provision/service.h"

namespace toposched::provision {

Provisioner::Provisioner(PartitionService& service, ProvisionOptions options, NanoClock clock,
                         Sleep sleep)
    : service_(service), options_(options), clock_(std::move(clock)), sleep_(std::move(sleep)) {}

Status Provisioner::CreateAndWait(const Partition& want, bool* left_behind) {
  if (left_behind != nullptr) *left_behind = false;
  const int64_t deadline =
      clock_() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.create_timeout).count();
  std::string failure;
  bool made = true;
  if (auto created = service_.Create(want); !created.ok()) {
    // The answer may be lost while the create was done (a timeout, a 5xx): read the truth back
    // before undoing anything. A partition being made or made as asked is ours; anything else
    // (absent, unreadable) is undone below, and its devices stay held until it is seen gone.
    auto got = service_.Get(want.name);
    made = got.ok() && got->has_value() &&
           ((*got)->state == PartitionState::kCreating || (*got)->state == PartitionState::kActive);
    if (made) {
      spdlog::warn("partition {}: the create was answered '{}' but the partition exists; using it",
                   want.name, created.error());
    } else {
      failure = fmt::format("creating partition {}: {}", want.name, created.error());
    }
  }
  if (made) {
    while (true) {
      auto got = service_.Get(want.name);
      if (!got.ok()) {
        // A garbled or failed status call is not a verdict; keep asking until the deadline.
        spdlog::debug("partition {}: status: {}", want.name, got.error());
      } else if (!got->has_value()) {
        failure = fmt::format("partition {} vanished while being created", want.name);
        break;
      } else if ((*got)->state == PartitionState::kActive) {
        if ((*got)->ipus != want.ipus || (*got)->pool != want.pool) {
          failure =
              fmt::format("partition {} is active but on other ipus than asked for", want.name);
          break;
        }
        return OkStatus();
      } else if ((*got)->state == PartitionState::kFailed) {
        failure = fmt::format("partition {} failed: {}", want.name,
                              (*got)->message.empty() ? "no reason given" : (*got)->message);
        break;
      } else if ((*got)->state == PartitionState::kRemoving) {
        failure = fmt::format("partition {} is being removed by someone else", want.name);
        break;
      }
      if (clock_() >= deadline) {
        failure = fmt::format("partition {} was not active after {} ms{}", want.name,
                              options_.create_timeout.count(),
                              got.ok() ? "" : fmt::format(" (last status call: {})", got.error()));
        break;
      }
      sleep_(options_.poll_interval);
    }
  }
  // The create may have landed even when its answer was lost: remove whatever exists.
  auto removed = RemoveAndWait(want.name, options_.remove_timeout);
  if (!removed.ok()) {
    if (left_behind != nullptr) *left_behind = true;
    return Error{
        fmt::format("{}; and removing it is not confirmed yet: {}", failure, removed.error())};
  }
  return Error{std::move(failure)};
}

Status Provisioner::RemoveAndWait(const std::string& name, std::chrono::milliseconds budget) {
  const int64_t deadline =
      clock_() + std::chrono::duration_cast<std::chrono::nanoseconds>(budget).count();
  std::string last;
  bool asked = false;
  while (true) {
    if (!asked) {
      if (auto s = service_.Remove(name); s.ok()) {
        asked = true;
      } else {
        last = s.error();
      }
    }
    if (asked) {
      auto got = service_.Get(name);
      if (got.ok() && !got->has_value()) return OkStatus();
      if (!got.ok()) {
        last = got.error();
      } else {
        last = fmt::format("still {}", StateName((*got)->state));
        // A failed or active partition the service kept: ask again.
        if ((*got)->state != PartitionState::kRemoving) asked = false;
      }
    }
    if (clock_() >= deadline) {
      return Error{fmt::format("partition {} not confirmed gone after {} ms: {}", name,
                               budget.count(), last)};
    }
    sleep_(options_.poll_interval);
  }
}

}  // namespace toposched::provision
