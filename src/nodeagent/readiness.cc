#include "nodeagent/readiness.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

namespace toposched::nodeagent {

std::vector<AllocatableDiff> CompareAllocatable(
    const std::map<std::string, std::set<std::string>>& advertised,
    const std::map<std::string, std::set<std::string>>& kubelet) {
  const std::set<std::string> none;
  std::vector<AllocatableDiff> out;
  for (const auto& [resource, ours] : advertised) {
    const auto held = kubelet.find(resource);
    const std::set<std::string>& theirs = held == kubelet.end() ? none : held->second;
    AllocatableDiff diff;
    diff.resource = resource;
    diff.advertised = ours.size();
    std::set_difference(ours.begin(), ours.end(), theirs.begin(), theirs.end(),
                        std::back_inserter(diff.missing));
    std::set_difference(theirs.begin(), theirs.end(), ours.begin(), ours.end(),
                        std::back_inserter(diff.extra));
    out.push_back(std::move(diff));
  }
  return out;
}

std::string DescribeMismatch(const std::vector<AllocatableDiff>& diffs) {
  std::vector<std::string> parts;
  for (const AllocatableDiff& diff : diffs) {
    if (diff.matches()) continue;
    std::vector<std::string> sides;
    if (!diff.missing.empty()) {
      sides.push_back(fmt::format("kubelet lacks {} of the {} advertised healthy ({})",
                                  diff.missing.size(), diff.advertised,
                                  fmt::join(diff.missing, ",")));
    }
    if (!diff.extra.empty()) {
      sides.push_back(fmt::format("kubelet holds {} not advertised healthy ({})", diff.extra.size(),
                                  fmt::join(diff.extra, ",")));
    }
    parts.push_back(fmt::format("{}: {}", diff.resource, fmt::join(sides, "; ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

Readiness::Readiness() : registry_(std::make_shared<prometheus::Registry>()) {
  ready_gauge_ = &prometheus::BuildGauge()
                      .Name("toposched_device_plugin_ready")
                      .Help(
                          "1 when every resource is registered and kubelet holds the advertised "
                          "devices (or cannot say: no GetAllocatableResources)")
                      .Register(*registry_)
                      .Add({});
  mismatch_ = &prometheus::BuildGauge()
                   .Name("toposched_device_plugin_allocatable_mismatch_ids")
                   .Help(
                       "At the last GetAllocatableResources: ids advertised healthy that kubelet "
                       "lacks (side=missing) or holds without them being advertised healthy "
                       "(side=extra), by resource")
                   .Register(*registry_);
  checks_ = &prometheus::BuildCounter()
                 .Name("toposched_device_plugin_allocatable_checks_total")
                 .Help(
                     "Comparisons of kubelet's allocatable devices with the advertised ones, by "
                     "result (match, mismatch, not_offered, error)")
                 .Register(*registry_);
}

Readiness::~Readiness() = default;

void Readiness::Set(bool ready, const std::string& reason) {
  {
    MutexLock lock(mutex_);
    if (ready_ == ready && reason_ == reason) return;
    ready_ = ready;
    reason_ = reason;
  }
  ready_gauge_->Set(ready ? 1 : 0);
  spdlog::info("{}: {}", ready ? "ready" : "not ready", reason);
}

bool Readiness::ready() const {
  MutexLock lock(mutex_);
  return ready_;
}

std::string Readiness::reason() const {
  MutexLock lock(mutex_);
  return reason_;
}

std::pair<bool, std::string> Readiness::State() const {
  MutexLock lock(mutex_);
  return {ready_, reason_};
}

void Readiness::Record(Check check, const std::vector<AllocatableDiff>& diffs) {
  static constexpr const char* kNames[] = {"match", "mismatch", "not_offered", "error"};
  checks_->Add({{"result", kNames[static_cast<int>(check)]}}).Increment();
  for (const AllocatableDiff& diff : diffs) {
    mismatch_->Add({{"resource", diff.resource}, {"side", "missing"}})
        .Set(static_cast<double>(diff.missing.size()));
    mismatch_->Add({{"resource", diff.resource}, {"side", "extra"}})
        .Set(static_cast<double>(diff.extra.size()));
  }
}

std::string Readiness::Metrics() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace toposched::nodeagent
