#include "extender/fleet_history.h"

#include <algorithm>
#include <cmath>

#include "base/json_writer.h"

namespace toposched::extender {
namespace {

using Json = JsonTree;

double Finite(double x) { return std::isfinite(x) ? x : 0.0; }

Json SampleJson(const FleetSample& s) {
  Json by_kind = Json::object();
  for (size_t k = 0; k < kWhyKinds.size(); ++k) {
    by_kind[std::string(kWhyKinds[k])] = s.pending_by_kind[k];
  }
  Json classes = Json::array();
  for (const ClassSample& c : s.classes) {
    classes.push_back({{"request", c.request},
                       {"share", Finite(c.share)},
                       {"free_sets", c.free_sets},
                       {"cost_per_set", Finite(c.cost_per_set)}});
  }
  Json types = Json::array();
  for (const TypeSample& t : s.types) {
    Json free_sets = Json::object();
    for (size_t i = 0; i < t.free_sets.size() && i < s.classes.size(); ++i) {
      if (t.free_sets[i]) free_sets[s.classes[i].request] = *t.free_sets[i];
    }
    types.push_back({{"instance_type", t.instance_type},
                     {"nodes", t.nodes},
                     {"devices", t.devices},
                     {"allocated_devices", Finite(t.allocated_devices)},
                     {"fragmentation", Finite(t.fragmentation)},
                     {"free_sets", std::move(free_sets)}});
  }
  return {{"time", s.time},
          {"nodes", s.nodes},
          {"not_managed_nodes", s.not_managed_nodes},
          {"devices", s.devices},
          {"allocated_share", Finite(s.allocated_share)},
          {"fragmentation", Finite(s.fragmentation)},
          {"pending_pods", s.pending_pods},
          {"pending_by_kind", std::move(by_kind)},
          {"pending_unclassified", s.pending_unclassified},
          {"classes", std::move(classes)},
          {"types", std::move(types)}};
}

}  // namespace

size_t FleetHistory::CapacityFor(std::chrono::seconds span, std::chrono::milliseconds interval) {
  const auto every = std::max<int64_t>(1, interval.count());
  return static_cast<size_t>(std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(span).count() / every));
}

FleetHistory::FleetHistory(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

void FleetHistory::Add(FleetSample sample) {
  MutexLock lock(mu_);
  samples_.push_back(std::move(sample));
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<FleetSample> FleetHistory::Snapshot() const {
  MutexLock lock(mu_);
  return {samples_.begin(), samples_.end()};
}

std::optional<FleetSample> FleetHistory::Latest() const {
  MutexLock lock(mu_);
  if (samples_.empty()) return std::nullopt;
  return samples_.back();
}

std::string HistoryJson(std::span<const FleetSample> samples, std::chrono::milliseconds interval,
                        size_t capacity) {
  Json kinds = Json::array();
  for (std::string_view k : kWhyKinds) kinds.push_back(std::string(k));
  Json out = {{"apiVersion", "toposched.io/v1"},
              {"kind", "FleetHistory"},
              {"interval_seconds", static_cast<double>(interval.count()) / 1000.0},
              {"capacity", capacity},
              {"kinds", std::move(kinds)}};
  Json list = Json::array();
  for (const FleetSample& s : samples) list.push_back(SampleJson(s));
  out["samples"] = std::move(list);
  return WriteJson(out) + "\n";
}

FleetSampler::FleetSampler(FleetHistory& history, std::chrono::milliseconds interval,
                           SampleFn sample)
    : history_(history),
      interval_(interval),
      sample_(std::move(sample)),
      thread_([this] { Loop(); }) {}

FleetSampler::~FleetSampler() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void FleetSampler::Loop() {
  // A steady cadence: the next sample is due an interval after the last was due, not after it
  // ended (a slow sample is not made up for: the next one waits at least until now).
  // Until the first sample is taken (the first sync), it is tried again within a second, so the
  // history and the gauges start at readiness, not up to an interval later.
  auto due = std::chrono::steady_clock::now();
  bool sampled = false;
  while (true) {
    if (auto sample = sample_()) {
      history_.Add(std::move(*sample));
      sampled = true;
    }
    const std::chrono::milliseconds next =
        sampled ? interval_ : std::min(interval_, std::chrono::milliseconds(1000));
    due = std::max(due + next, std::chrono::steady_clock::now());
    MutexLock lock(mu_);
    if (wake_.WaitUntil(mu_, due, [this]() TS_REQUIRES(mu_) { return stop_; })) return;
  }
}

}  // namespace toposched::extender
