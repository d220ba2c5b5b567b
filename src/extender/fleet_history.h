// The fleet over the last hours (docs/observability.md, "GET /v1/history"): every
// --history-interval the extender takes a compact FleetSample of the tracker (allocated share,
// fragmentation, pending pods by reason, free legal sets and scarcity per request class and
// instance type) and keeps the newest ones in a bounded ring in memory. Readers (the JSON view,
// the fleet page) take a Snapshot(); the metrics are set from each sample (Metrics::SetFleet).
//
// Time is the extender's: the sampler is given a clock (unix seconds), the core reads none.
#ifndef TOPOSCHED_EXTENDER_FLEET_HISTORY_H_
#define TOPOSCHED_EXTENDER_FLEET_HISTORY_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "extender/fleet_reads.h"

namespace toposched::extender {

// One request class the scorer protects ("4 devices", "1 core"), across the fleet.
struct ClassSample {
  std::string request;      // topology::RequestLabel
  double share = 0;         // of the expected requests
  int64_t free_sets = 0;    // legal sets of it free now, fleet-wide
  double cost_per_set = 0;  // what taking one more costs in the scorer's terms (higher: scarcer)
};

// One instance type's nodes, added up.
struct TypeSample {
  std::string instance_type;
  int nodes = 0;
  int64_t devices = 0;
  double allocated_devices = 0;  // cores counted as their share of a device
  double fragmentation = 0;      // devices (topology::ExpectedFragmentation summed)
  // Index-aligned with FleetSample::classes: free legal sets of that class on these nodes, or
  // nullopt when this type can never serve it.
  std::vector<std::optional<int64_t>> free_sets;
};

struct FleetSample {
  int64_t time = 0;  // unix seconds, taken by the extender
  int nodes = 0;     // the tracker's, and those handed to the DRA driver (not_managed_nodes)
  int not_managed_nodes = 0;
  int64_t devices = 0;
  double allocated_share = 0;  // 0-1, as /v1/fleet's summary
  double fragmentation = 0;    // devices, summed over the nodes
  int pending_pods = 0;
  // Per kind (index-aligned with kWhyKinds): the pending pods whose closest kind it is.
  std::array<int, kWhyKinds.size()> pending_by_kind{};
  // Pending pods not classified in this sample (more distinct requests than a sample works out:
  // kMaxShapesPerSample); not in pending_by_kind.
  int pending_unclassified = 0;
  std::vector<ClassSample> classes;
  std::vector<TypeSample> types;  // by name
};

// Pending pods with identical requests share one classification; at most this many distinct
// requests are worked out per sample (each costs one filter over the fleet).
inline constexpr int kMaxShapesPerSample = 32;

// The newest samples, at most `capacity` (oldest dropped first). Thread-safe.
class FleetHistory {
 public:
  // Samples kept: enough for `span` at `interval` (at least 1).
  static size_t CapacityFor(std::chrono::seconds span, std::chrono::milliseconds interval);
  explicit FleetHistory(size_t capacity);

  void Add(FleetSample sample) TS_EXCLUDES(mu_);
  // A copy of every sample kept, oldest first.
  std::vector<FleetSample> Snapshot() const TS_EXCLUDES(mu_);
  std::optional<FleetSample> Latest() const TS_EXCLUDES(mu_);
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<FleetSample> samples_ TS_GUARDED_BY(mu_);
};

// The history as JSON (apiVersion toposched.io/v1, kind FleetHistory; docs/observability.md).
std::string HistoryJson(std::span<const FleetSample> samples, std::chrono::milliseconds interval,
                        size_t capacity);

// Calls `sample` at once and then every `interval` on a thread of its own, adding what it
// returns (nullopt: nothing this time, e.g. before the first sync; tried again within a second
// until a first sample is taken) to `history`. Stops, without waiting out an interval, when
// destroyed.
class FleetSampler {
 public:
  using SampleFn = std::function<std::optional<FleetSample>()>;
  FleetSampler(FleetHistory& history, std::chrono::milliseconds interval, SampleFn sample);
  ~FleetSampler();
  FleetSampler(const FleetSampler&) = delete;
  FleetSampler& operator=(const FleetSampler&) = delete;

 private:
  void Loop();

  FleetHistory& history_;
  const std::chrono::milliseconds interval_;
  const SampleFn sample_;
  Mutex mu_;
  CondVar wake_;
  bool stop_ TS_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is initialised
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_FLEET_HISTORY_H_
