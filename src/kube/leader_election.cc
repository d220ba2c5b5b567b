#include "kube/leader_election.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/json_reader.h"
#include "base/json_writer.h"
#include "kube/duration.h"
#include "kube/timestamp.h"

namespace toposched::kube {

namespace ondemand = simdjson::ondemand;

Status ValidateLeaderElection(const LeaderElectionConfig& c) {
  if (c.lease_name.empty()) return Error{"--leader-elect-resource-name must not be empty"};
  if (c.lease_namespace.empty())
    return Error{"--leader-elect-resource-namespace must not be empty"};
  if (c.identity.empty()) return Error{"leader election needs an identity"};
  if (c.retry_period.count() <= 0 || c.renew_deadline.count() <= 0 ||
      c.lease_duration.count() <= 0) {
    return Error{
        "--leader-elect-lease-duration, --leader-elect-renew-deadline and "
        "--leader-elect-retry-period must be positive"};
  }
  if (c.lease_duration <= c.renew_deadline) {
    return Error{fmt::format(
        "--leader-elect-lease-duration ({}) must be longer than --leader-elect-renew-deadline "
        "({}): a leader must have stopped before another may take over",
        FormatDuration(c.lease_duration), FormatDuration(c.renew_deadline))};
  }
  if (c.renew_deadline * 10 <= c.retry_period * 12) {
    return Error{fmt::format(
        "--leader-elect-renew-deadline ({}) must be longer than 1.2 x --leader-elect-retry-period "
        "({}), or a leader cannot retry a renewal before its deadline",
        FormatDuration(c.renew_deadline), FormatDuration(c.retry_period))};
  }
  if (c.lease_duration - c.renew_deadline < kMinFenceMargin) {
    return Error{fmt::format(
        "--leader-elect-lease-duration ({}) must exceed --leader-elect-renew-deadline ({}) by at "
        "least {}: the difference is the margin between the leader's last write and a standby's "
        "takeover, and covers clock-rate differences and the write's travel time "
        "(docs/extender.md, \"Leadership and fencing\")",
        FormatDuration(c.lease_duration), FormatDuration(c.renew_deadline),
        FormatDuration(kMinFenceMargin))};
  }
  if (c.renew_deadline - c.retry_period * 12 / 10 < c.min_write_budget) {
    return Error{fmt::format(
        "--leader-elect-renew-deadline ({}) minus 1.2 x --leader-elect-retry-period ({}) must "
        "leave at least {} for a write, or a leader renewing on time could not bind",
        FormatDuration(c.renew_deadline), FormatDuration(c.retry_period),
        FormatDuration(c.min_write_budget))};
  }
  return OkStatus();
}

Result<LeaseRecord> DecodeLease(std::string_view text) {
  const simdjson::padded_string padded(text);
  LeaseRecord record;
  const json::Path root("lease");
  Status status = json::DecodeDocument(padded, [&](ondemand::value& value) -> Status {
    ondemand::object object;
    bool present = false;
    if (Status s = json::OpenObject(value, root, object, present); !s.ok()) return s;
    if (!present) return json::ErrorAt(root, "expected an object, got null");
    return json::ForEachField(
        object, root,
        [&](std::string_view key, ondemand::value field, const json::Path& path) -> Status {
          ondemand::object inner;
          bool has = false;
          if (key == "metadata") {
            if (Status s = json::OpenObject(field, path, inner, has); !s.ok() || !has) return s;
            return json::ForEachField(
                inner, path,
                [&](std::string_view k, ondemand::value v, const json::Path& p) -> Status {
                  if (k == "resourceVersion")
                    return json::ReadString(v, p, record.resource_version);
                  return OkStatus();
                });
          }
          if (key == "spec") {
            if (Status s = json::OpenObject(field, path, inner, has); !s.ok() || !has) return s;
            return json::ForEachField(
                inner, path,
                [&](std::string_view k, ondemand::value v, const json::Path& p) -> Status {
                  if (k == "holderIdentity") return json::ReadString(v, p, record.holder);
                  if (k == "leaseDurationSeconds") {
                    return json::ReadInt64(v, p, record.lease_duration_seconds);
                  }
                  if (k == "acquireTime") return json::ReadString(v, p, record.acquire_time);
                  if (k == "renewTime") return json::ReadString(v, p, record.renew_time);
                  if (k == "leaseTransitions") return json::ReadInt64(v, p, record.transitions);
                  return OkStatus();
                });
          }
          return OkStatus();
        });
  });
  if (!status.ok()) return Error{status.error()};
  return record;
}

std::string FormatMicroTime(int64_t unix_ns) {
  std::string text = FormatRfc3339(unix_ns / 1000000000);
  text.pop_back();  // the "Z", after the fraction
  return fmt::format("{}.{:06d}Z", text, (unix_ns % 1000000000) / 1000);
}

std::string EncodeLease(std::string_view ns, std::string_view name, const LeaseRecord& r) {
  JsonTree metadata = {{"name", name}, {"namespace", ns}};
  if (!r.resource_version.empty()) metadata["resourceVersion"] = r.resource_version;
  JsonTree spec = {{"holderIdentity", r.holder},
                   {"leaseDurationSeconds", r.lease_duration_seconds}};
  if (!r.acquire_time.empty()) spec["acquireTime"] = r.acquire_time;
  if (!r.renew_time.empty()) spec["renewTime"] = r.renew_time;
  spec["leaseTransitions"] = r.transitions;
  return WriteJson({{"apiVersion", "coordination.k8s.io/v1"},
                    {"kind", "Lease"},
                    {"metadata", std::move(metadata)},
                    {"spec", std::move(spec)}});
}

LeaderElector::LeaderElector(ApiClient& client, LeaderElectionConfig config, NanoClock steady_ns,
                             NanoClock wall_ns, Callbacks callbacks)
    : client_(client),
      config_(std::move(config)),
      steady_ns_(std::move(steady_ns)),
      wall_ns_(std::move(wall_ns)),
      callbacks_(std::move(callbacks)) {}

LeaderElector::~LeaderElector() {
  {
    MutexLock lock(wait_mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

int64_t LeaderElector::DurationOf(const LeaseRecord& record) const {
  return (record.lease_duration_seconds > 0
              ? std::chrono::nanoseconds(std::chrono::seconds(record.lease_duration_seconds))
              : config_.lease_duration)
      .count();
}

std::string LeaderElector::LeasePath() const {
  return "/apis/coordination.k8s.io/v1/namespaces/" + EscapeUrlComponent(config_.lease_namespace) +
         "/leases/" + EscapeUrlComponent(config_.lease_name);
}

bool LeaderElector::IsLeader() const {
  MutexLock lock(mu_);
  return leader_ && steady_ns_() - renewed_at_ns_ < config_.renew_deadline.count();
}

Result<std::chrono::milliseconds> LeaderElector::WriteBudget() const {
  MutexLock lock(mu_);
  if (!leader_) return Error{"this extender does not hold the leader lease"};
  const int64_t since = steady_ns_() - renewed_at_ns_;
  const auto left = std::chrono::nanoseconds(config_.renew_deadline.count() - since);
  if (left < config_.min_write_budget) {
    return Error{fmt::format(
        "the leader lease was last renewed {} ago: {} left before the renew deadline, less than "
        "the {} a write is given",
        FormatDuration(std::chrono::nanoseconds(since)),
        FormatDuration(std::max(left, std::chrono::nanoseconds(0))),
        FormatDuration(config_.min_write_budget))};
  }
  // Rounded down: the write is cut no later than the deadline.
  return std::chrono::duration_cast<std::chrono::milliseconds>(left);
}

std::string LeaderElector::ObservedHolder() const {
  MutexLock lock(mu_);
  return observed_.holder;
}

void LeaderElector::Observe(const LeaseRecord& record, int64_t now_ns) {
  MutexLock lock(mu_);
  absent_since_ns_ = 0;
  if (record.holder != observed_.holder || record.renew_time != observed_.renew_time ||
      record.resource_version != observed_.resource_version || observed_at_ns_ == 0) {
    observed_ = record;
    observed_at_ns_ = now_ns;
  }
}

bool LeaderElector::Finish(bool renewed, int64_t started_ns, bool other_holds) {
  bool started = false;
  bool stopped = false;
  {
    MutexLock lock(mu_);
    if (renewed) {
      started = !leader_;  // published below, after the callback
      renewed_at_ns_ = started_ns;
    } else if (leader_ &&
               (other_holds || steady_ns_() - renewed_at_ns_ >= config_.renew_deadline.count())) {
      leader_ = false;
      stopped = true;
    }
  }
  if (started) {
    ++transitions_;
    spdlog::info("leader election: became the leader of lease {}/{} as {}", config_.lease_namespace,
                 config_.lease_name, config_.identity);
    if (callbacks_.started_leading) callbacks_.started_leading();
    MutexLock lock(mu_);
    leader_ = true;
  }
  if (stopped) {
    ++transitions_;
    spdlog::warn("leader election: lost lease {}/{} ({}); standing by", config_.lease_namespace,
                 config_.lease_name,
                 other_holds ? "another process holds it"
                             : "not renewed within " + FormatDuration(config_.renew_deadline));
    if (callbacks_.stopped_leading) callbacks_.stopped_leading();
  }
  return IsLeader();
}

bool LeaderElector::Step() {
  const int64_t started = steady_ns_();
  const std::string path = LeasePath();
  auto got = client_.Get(path);
  // What the read shows was so when it returned: the holder may have renewed at any moment up to
  // then, so a standby's clock for the record starts here, not when the read left.
  const int64_t read_at = steady_ns_();
  if (!got.ok() || (got->status != 200 && got->status != 404)) {
    spdlog::warn(
        "leader election: cannot read lease {}/{}: {}", config_.lease_namespace, config_.lease_name,
        got.ok() ? fmt::format("HTTP {}: {}", got->status, StatusMessage(got->body)) : got.error());
    return Finish(false, started, false);
  }

  LeaseRecord mine;
  mine.holder = config_.identity;
  mine.lease_duration_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count();
  mine.renew_time = FormatMicroTime(wall_ns_());

  Result<HttpResponse> written = Error{""};
  if (got->status == 404) {
    // A Lease deleted (by hand, or a namespace being recreated) while another process held it is
    // not free at once: that holder may lead until its renew deadline. Wait a lease duration
    // from when it was first seen gone, as if the last record had stayed unchanged.
    int64_t wait_ns = 0;
    bool first_seen_gone = false;
    std::string last_holder;
    {
      MutexLock lock(mu_);
      first_seen_gone = absent_since_ns_ == 0;
      if (first_seen_gone) absent_since_ns_ = read_at;
      last_holder = observed_.holder;
      if (!last_holder.empty() && last_holder != config_.identity) {
        wait_ns = DurationOf(observed_) - (read_at - absent_since_ns_);
      }
    }
    if (wait_ns > 0) {
      if (first_seen_gone) {
        spdlog::warn(
            "leader election: lease {}/{} is gone while {} held it; it may still lead, so the "
            "lease is created in {} at the earliest",
            config_.lease_namespace, config_.lease_name, last_holder,
            FormatDuration(std::chrono::nanoseconds(wait_ns)));
      }
      return Finish(false, started, false);
    }
    mine.acquire_time = mine.renew_time;
    written = client_.Post("/apis/coordination.k8s.io/v1/namespaces/" +
                               EscapeUrlComponent(config_.lease_namespace) + "/leases",
                           EncodeLease(config_.lease_namespace, config_.lease_name, mine));
  } else {
    auto old = DecodeLease(got->body);
    if (!old.ok()) {
      spdlog::warn("leader election: lease {}/{} does not decode: {}", config_.lease_namespace,
                   config_.lease_name, old.error());
      return Finish(false, started, false);
    }
    Observe(*old, read_at);
    int64_t observed_at = 0;
    {
      MutexLock lock(mu_);
      observed_at = observed_at_ns_;
    }
    if (!old->holder.empty() && old->holder != config_.identity &&
        read_at - observed_at < DurationOf(*old)) {
      return Finish(false, started, true);  // held by another, and not expired on our clock
    }
    if (old->holder == config_.identity) {
      mine.acquire_time = old->acquire_time;
      mine.transitions = old->transitions;
    } else {
      mine.acquire_time = mine.renew_time;
      mine.transitions = old->transitions + 1;
    }
    mine.resource_version = old->resource_version;
    written = client_.Put(path, EncodeLease(config_.lease_namespace, config_.lease_name, mine));
  }
  if (!written.ok() || (written->status != 200 && written->status != 201)) {
    // 409: someone else wrote it first; the next round reads who.
    spdlog::log(written.ok() && written->status == 409 ? spdlog::level::debug : spdlog::level::warn,
                "leader election: cannot write lease {}/{}: {}", config_.lease_namespace,
                config_.lease_name,
                written.ok()
                    ? fmt::format("HTTP {}: {}", written->status, StatusMessage(written->body))
                    : written.error());
    return Finish(false, started, false);
  }
  if (auto stored = DecodeLease(written->body); stored.ok()) Observe(*stored, steady_ns_());
  return Finish(true, started, false);
}

Status LeaderElector::Release() {
  LeaseRecord record;
  {
    MutexLock lock(mu_);
    if (!leader_) return OkStatus();
    record = observed_;
  }
  record.holder.clear();
  record.lease_duration_seconds = 1;
  record.renew_time = FormatMicroTime(wall_ns_());
  auto written =
      client_.Put(LeasePath(), EncodeLease(config_.lease_namespace, config_.lease_name, record));
  bool was = false;
  {
    MutexLock lock(mu_);
    was = leader_;
    leader_ = false;
  }
  if (was) {
    ++transitions_;
    if (callbacks_.stopped_leading) callbacks_.stopped_leading();
  }
  if (!written.ok()) return Error{written.error()};
  if (written->status != 200) {
    return Error{fmt::format("releasing lease {}/{}: HTTP {}: {}", config_.lease_namespace,
                             config_.lease_name, written->status, StatusMessage(written->body))};
  }
  spdlog::info("leader election: released lease {}/{}", config_.lease_namespace,
               config_.lease_name);
  return OkStatus();
}

void LeaderElector::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    const auto stopped = [this]() TS_REQUIRES(wait_mu_) { return stop_; };
    while (true) {
      {
        MutexLock lock(wait_mu_);
        if (stop_) return;
      }
      Step();
      MutexLock lock(wait_mu_);
      if (wake_.WaitFor(wait_mu_, config_.retry_period, stopped)) return;
    }
  });
}

void LeaderElector::Stop() {
  {
    MutexLock lock(wait_mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  if (Status s = Release(); !s.ok()) spdlog::warn("leader election: {}", s.error());
}

}  // namespace toposched::kube
