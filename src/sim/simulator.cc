#include "sim/simulator.h"

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "base/text.h"
#include "sim/bind.h"
#include "topology/pools.h"
#include "tracker/tracker.h"

namespace toposched::sim {
namespace {

using topology::NodeShape;
using topology::NodeUsage;
using topology::Policy;
using topology::Request;
using topology::RequestLabel;
using topology::Unit;

constexpr int64_t kNsPerSecond = 1'000'000'000;
// How often (in steps) the progress callback is told.
constexpr int64_t kProgressEvery = 512;
// Nodes drawn in the report's device maps: at most this many of each type, and in all.
constexpr int kMapNodesPerType = 2;
constexpr int kMapNodesTotal = 8;

// One GPU task to replay, with the pod the scheduler sees for it.
struct Job {
  int task = 0;  // index in the trace
  Request request;
  int64_t creation_ns = 0;
  int64_t deletion_ns = 0;
  tracker::PodSpec pod;
};

// The simulator's cached view of one node, refreshed from the tracker after every change there.
struct NodeView {
  std::string name;
  NodeShape shape;
  int64_t allocated_units = 0;  // used cores x (units_per_device / cores_per_device)
  int free_devices = 0;         // devices with no core in use
  int largest_free_set = 0;     // the largest device count a legal free set still has
  NodeUsage usage;
  std::vector<int> core_owner;  // kept only for the report
};

struct FleetNode {
  std::string name;
  NodeShape shape;
  std::string pool;  // a shared pool's name, or empty
};

// The largest N for which a request of N devices would be granted on this node now, asking the
// allocator itself (legality differs by rule, so the answer is not monotone in N).
int LargestFreeSet(const NodeShape& shape, const NodeUsage& usage, Policy policy, int free) {
  for (int n = std::min(free, shape.devices); n >= 1; --n) {
    const Request request{Unit::kDevice, n};
    // Skips counts the rules never allow, without formatting a refusal for each.
    if (policy != Policy::kCountOnly && !topology::CheckRequestShape(shape, request).empty()) {
      continue;
    }
    if (topology::Allocate(shape, usage, request, policy).ok()) return n;
  }
  return 0;
}

// One policy's fleet: a tracker with every node, and the scheduler's node choice on top of it.
class PolicyRun {
 public:
  PolicyRun(const topology::Catalog& catalog, Policy policy, const std::vector<FleetNode>& fleet,
            const topology::PoolSet* pools, size_t jobs, bool keep_owners)
      : tracker_(catalog, policy, pools), policy_(policy), keep_owners_(keep_owners) {
    names_.reserve(fleet.size());
    nodes_.reserve(fleet.size());
    std::map<std::string, size_t> first_head;
    for (const auto& node : fleet) {
      // The fleet's types were checked before, so an error here is a bug; the run reports it
      // (setup()) instead of simulating a fleet without the node.
      if (auto s =
              tracker_.UpsertNode({node.name, node.shape.type->name, node.shape.lnc, node.pool});
          !s.ok() && setup_.ok()) {
        setup_ = Error{fmt::format("simulated node {}: {}", node.name, s.error())};
      }
      names_.push_back(node.name);
      NodeView view;
      view.name = node.name;
      view.shape = node.shape;
      if (keep_owners_) view.core_owner.assign(static_cast<size_t>(node.shape.cores), -1);
      // A shared pool's devices are counted once, on its first head node.
      size_t counted = nodes_.size();
      if (!node.pool.empty()) {
        counted = first_head.emplace(node.pool, nodes_.size()).first->second;
      }
      counted_on_.push_back(counted);
      nodes_.push_back(std::move(view));
      if (counted == counted_on_.size() - 1) total_devices_ += node.shape.devices;
      units_per_device_ = std::lcm(units_per_device_, int64_t{node.shape.cores_per_device});
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (counted_on_[i] == i) Refresh(i);
    }
    placed_on_.assign(jobs, -1);
    unresolvable_.assign(nodes_.size(), false);
  }

  // Places the job or says why not. Errors only if the tracker contradicts itself.
  // `retry`: the pod was tried before (queue mode), so it is not counted into the demand again.
  Result<std::optional<RejectReason>> Place(size_t job_index, const Job& job, int64_t now_ns,
                                            bool retry = false) {
    const int node = ChooseNode(job.pod, retry);
    if (node < 0) return std::optional<RejectReason>(Classify(job.request));
    TOPOSCHED_ASSIGN_OR_RETURN(
        auto reserved, BindPod(tracker_, job.pod, names_[static_cast<size_t>(node)], now_ns));
    placed_on_[job_index] = node;
    if (keep_owners_) SetOwner(counted_on_[static_cast<size_t>(node)], reserved, job.task);
    Refresh(counted_on_[static_cast<size_t>(node)]);
    return std::optional<RejectReason>();
  }

  // The pod left: give its ids back. Pods that were never placed have nothing to give.
  void Remove(size_t job_index, const Job& job) {
    const int node = placed_on_[job_index];
    if (node < 0) return;
    if (keep_owners_) {
      if (auto hold = tracker_.Find(job.pod.uid)) {
        SetOwner(counted_on_[static_cast<size_t>(node)], hold->allocation, -1);
      }
    }
    tracker_.Forget(job.pod.uid);
    placed_on_[job_index] = -1;
    Refresh(counted_on_[static_cast<size_t>(node)]);
  }

  // True when some node whose type could ever grant `request` has that many free units, counted
  // without topology: a pod waiting now waits for a legal set, not for room.
  bool FitsIgnoringTopology(const Request& request) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeView& node = nodes_[counted_on_[i]];
      if (!topology::CanEverGrant(node.shape, request)) continue;
      if (topology::Allocate(node.shape, node.usage, request, Policy::kCountOnly).ok()) return true;
    }
    return false;
  }

  // Device-equivalents: a core counts as 1/cores_per_device of its device.
  double allocated_devices() const {
    return static_cast<double>(allocated_units_) / static_cast<double>(units_per_device_);
  }
  double unallocated_share() const {
    return total_devices_ == 0 ? 0.0 : 1.0 - allocated_devices() / total_devices_;
  }
  double allocated_share() const { return 1.0 - unallocated_share(); }
  // 1 - (sum of each node's largest legal free set) / (free devices); nullopt when none is free.
  std::optional<double> fragmentation() const {
    if (free_devices_ == 0) return std::nullopt;
    return 1.0 - static_cast<double>(largest_sets_) / free_devices_;
  }

  // The current owners of the nodes the report draws.
  std::vector<DeviceMap> DeviceMaps() const {
    std::vector<DeviceMap> maps;
    std::map<std::string, int, std::less<>> per_type;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeView& node = nodes_[i];
      if (counted_on_[i] != i) continue;  // a pool is drawn once, on its first head
      if (static_cast<int>(maps.size()) >= kMapNodesTotal) break;
      if (per_type[node.shape.type->name]++ >= kMapNodesPerType) continue;
      maps.push_back({node.name, node.shape.type->name, node.shape.devices,
                      node.shape.cores_per_device, node.core_owner, node.shape.type});
    }
    return maps;
  }
  // Whether every node of the fleet was accepted by the tracker (the first refusal otherwise).
  Status setup() const { return setup_; }

 private:
  // The scheduler's part: which node, as the tracker ranks them for the policy (the extender's
  // prioritize serves the same ranking). Every arrival is counted into the expected demand first,
  // placed or not, as the extender counts each pod once when it is first filtered.
  int ChooseNode(const tracker::PodSpec& pod, bool retry) {
    const tracker::Ranking ranking =
        retry ? tracker_.Rank(pod, names_) : sim::ChooseNode(tracker_, pod, names_);
    for (size_t i = 0; i < ranking.fits.size(); ++i)
      unresolvable_[i] = ranking.fits[i].unresolvable;
    return ranking.best;
  }

  // REQUIRES: no node fits, and unresolvable_ was filled in by ChooseNode for every node.
  RejectReason Classify(const Request& request) const {
    bool any_resolvable = false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (unresolvable_[i]) continue;
      any_resolvable = true;
      // Enough free units, counted without topology, means topology is what said no.
      const NodeView& node = nodes_[counted_on_[i]];
      if (topology::Allocate(node.shape, node.usage, request, Policy::kCountOnly).ok()) {
        return RejectReason::kNoLegalSet;
      }
    }
    return any_resolvable ? RejectReason::kNoRoom : RejectReason::kNeverLegal;
  }

  void Refresh(size_t i) {
    NodeView& node = nodes_[i];
    allocated_units_ -= node.allocated_units;
    free_devices_ -= node.free_devices;
    largest_sets_ -= node.largest_free_set;
    if (auto snapshot = tracker_.Snapshot(node.name)) node.usage = snapshot->usage;
    node.allocated_units =
        node.usage.used_core_count() * (units_per_device_ / node.shape.cores_per_device);
    node.free_devices = std::popcount(node.shape.AllDevices() & ~node.usage.busy_devices());
    node.largest_free_set = LargestFreeSet(node.shape, node.usage, policy_, node.free_devices);
    allocated_units_ += node.allocated_units;
    free_devices_ += node.free_devices;
    largest_sets_ += node.largest_free_set;
  }

  void SetOwner(size_t node_index, const tracker::PodAllocation& allocation, int owner) {
    NodeView& node = nodes_[node_index];
    const int cpd = node.shape.cores_per_device;
    for (const auto& container : allocation.containers) {
      for (int id : container.placement.ids) {
        const bool device = container.placement.unit == Unit::kDevice;
        const int first = device ? id * cpd : id;
        const int last = device ? first + cpd : id + 1;
        for (int c = first; c < last; ++c) node.core_owner[static_cast<size_t>(c)] = owner;
      }
    }
  }

  tracker::Tracker tracker_;
  Status setup_ = OkStatus();
  const Policy policy_;
  const bool keep_owners_;
  std::vector<std::string> names_;
  std::vector<NodeView> nodes_;
  // Per node: the view whose usage and totals stand for its devices (itself, or its pool's
  // first head).
  std::vector<size_t> counted_on_;
  std::vector<int> placed_on_;      // per job: node index, -1 when not placed
  std::vector<bool> unresolvable_;  // per node, for the last ChooseNode that found none
  int total_devices_ = 0;
  // Fleet totals, kept in step with nodes_ by Refresh. Allocation is counted in integer units
  // (1/units_per_device_ of a device, a multiple of every node's core size) so sums never drift.
  int64_t units_per_device_ = 1;
  int64_t allocated_units_ = 0;
  int free_devices_ = 0;
  int largest_sets_ = 0;
};

// Reports progress every kProgressEvery steps and at the end.
class Progress {
 public:
  Progress(const Options& options, int64_t total) : options_(options), total_(total) {}
  void Step(Policy policy) {
    ++done_;
    if (options_.progress && (done_ % kProgressEvery == 0 || done_ == total_)) {
      options_.progress(topology::PolicyName(policy), done_, total_);
    }
  }

 private:
  const Options& options_;
  const int64_t total_;
  int64_t done_ = 0;
};

void CountRejection(PolicyResult& out, const Job& job, RejectReason reason) {
  ++out.rejected;
  ++out.rejected_by_reason[static_cast<int>(reason)];
  ++out.rejected_by_request[RequestLabel(job.request)];
}

void RecordEnd(PolicyResult& out, const PolicyRun& run) {
  out.devices_allocated_at_end = run.allocated_devices();
  out.unallocated_share_at_end = run.unallocated_share();
  out.fragmentation_at_end = run.fragmentation().value_or(0.0);
}

// A replay in time samples the allocated share after each event; the highest so far is the
// peak, when the device maps are recorded. Returns the share.
double NotePeak(PolicyResult& out, const PolicyRun& run, double at_s, bool record) {
  const double share = run.allocated_share();
  if (share > out.peak_allocated_share) {
    out.peak_allocated_share = share;
    out.peak_at_s = at_s;
    if (record) out.device_maps = run.DeviceMaps();
  }
  return share;
}

// The end of a replay in time: the device maps were recorded at the peak.
void RecordTimedEnd(PolicyResult& out, const PolicyRun& run, bool record) {
  if (record) {
    out.device_maps_moment = fmt::format("at peak allocation ({:.1f}%, day {:.2f} of the replay)",
                                         100.0 * out.peak_allocated_share, out.peak_at_s / 86400.0);
  }
  RecordEnd(out, run);
}

// Departures come before arrivals at the same instant (the freed ids are usable at once), except
// that a pod living zero seconds leaves after it arrives.
enum EventPhase { kDeparture = 0, kArrival = 1, kInstantDeparture = 2 };

struct Event {
  int64_t t = 0;
  int phase = kArrival;
  uint64_t tiebreak = 0;  // from the seed: reorders pods arriving in the same instant
  size_t job = 0;
};

std::vector<Event> BuildEvents(const std::vector<Job>& jobs, uint64_t seed) {
  std::vector<Event> events;
  events.reserve(jobs.size() * 2);
  std::mt19937_64 rng(seed);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    events.push_back({job.creation_ns, kArrival, seed == 0 ? 0 : rng(), j});
    const int leave = job.deletion_ns == job.creation_ns ? kInstantDeparture : kDeparture;
    events.push_back({job.deletion_ns, leave, 0, j});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.t, a.phase, a.tiebreak, a.job) < std::tie(b.t, b.phase, b.tiebreak, b.job);
  });
  return events;
}

Result<PolicyResult> RunDynamic(const topology::Catalog& catalog, Policy policy,
                                const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                                const std::vector<Job>& jobs, const std::vector<Event>& events,
                                const Options& options, Progress& progress) {
  PolicyResult out;
  out.policy = policy;
  const bool record = options.record_report_data;
  PolicyRun run(catalog, policy, fleet, pools, jobs.size(), record);
  TOPOSCHED_RETURN_IF_ERROR(run.setup());
  const int64_t start = events.empty() ? 0 : events.front().t;
  int64_t now = start;
  double device_seconds = 0;
  double unallocated_seconds = 0;  // share x seconds
  double fragmentation_seconds = 0;
  double seconds_with_free = 0;
  double refused_share_sum = 0;
  int refused = 0;
  for (const Event& event : events) {
    if (event.t > now) {
      const double dt = static_cast<double>(event.t - now) / kNsPerSecond;
      device_seconds += run.allocated_devices() * dt;
      unallocated_seconds += run.unallocated_share() * dt;
      if (const std::optional<double> f = run.fragmentation()) {
        fragmentation_seconds += *f * dt;
        seconds_with_free += dt;
      }
      now = event.t;
    }
    const Job& job = jobs[event.job];
    if (event.phase == kArrival) {
      TOPOSCHED_ASSIGN_OR_RETURN(auto outcome, run.Place(event.job, job, now));
      if (const std::optional<RejectReason> reason = outcome) {
        CountRejection(out, job, *reason);
        if (*reason != RejectReason::kNeverLegal) {
          refused_share_sum += run.unallocated_share();
          ++refused;
        }
      } else {
        ++out.placed;
      }
    } else {
      run.Remove(event.job, job);
    }
    const double x = static_cast<double>(now - start) / kNsPerSecond;
    const double share = NotePeak(out, run, x, record);
    if (record) out.timeline.push_back({x, share, out.rejected});
    progress.Step(policy);
  }
  const double span = static_cast<double>(now - start) / kNsPerSecond;
  out.device_hours = device_seconds / 3600.0;
  out.avg_unallocated_share = span > 0 ? unallocated_seconds / span : run.unallocated_share();
  out.avg_fragmentation = seconds_with_free > 0 ? fragmentation_seconds / seconds_with_free : 0.0;
  out.unallocated_when_refused = refused > 0 ? refused_share_sum / refused : 0.0;
  RecordTimedEnd(out, run, record);
  return out;
}

// Queue mode: kube-scheduler's Pending queue. An arriving pod is tried at once; one that does
// not fit waits. When a pod leaves, the waiting pods are tried again in the queue's order
// (priority, then arrival: the trace has no priority, so arrival), each placed if it fits now, so
// a big pod that still does not fit never blocks smaller ones behind it (kube-scheduler retries
// each Pending pod on its own after a cluster event; it has no head-of-line blocking). A pod runs
// for its trace lifetime from when it starts. Requests no node of the fleet could ever grant are
// refused on arrival (kube-scheduler would keep them Pending forever) and counted as rejected.
Result<PolicyResult> RunQueue(const topology::Catalog& catalog, Policy policy,
                              const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                              const std::vector<Job>& jobs, const std::vector<Event>& events,
                              const Options& options, Progress& progress) {
  PolicyResult out;
  out.policy = policy;
  const bool record = options.record_report_data;
  PolicyRun run(catalog, policy, fleet, pools, jobs.size(), record);
  TOPOSCHED_RETURN_IF_ERROR(run.setup());

  // Arrivals in the dynamic replay's order (its events, departures dropped: a departure here
  // depends on when the pod started).
  std::vector<size_t> arrivals;
  for (const Event& e : events) {
    if (e.phase == kArrival) arrivals.push_back(e.job);
  }
  using Departure = std::pair<int64_t, size_t>;  // (time, job), earliest first
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<size_t> waiting;  // jobs, in queue order
  std::vector<double> waits_s;
  const int64_t start = arrivals.empty() ? 0 : jobs[arrivals.front()].creation_ns;
  int64_t now = start;
  double device_seconds = 0, allocated_seconds = 0, wait_seconds = 0, fragmented_seconds = 0;

  auto advance = [&](int64_t t) {
    if (t <= now) return;
    const double dt = static_cast<double>(t - now) / kNsPerSecond;
    device_seconds += run.allocated_devices() * dt;
    allocated_seconds += run.allocated_share() * dt;
    if (!waiting.empty()) {
      wait_seconds += static_cast<double>(waiting.size()) * dt;
      // One look per request class: every waiting pod of a class waits for the same reason.
      std::map<std::pair<int, int>, bool> fragmented;
      for (size_t j : waiting) {
        const Request& r = jobs[j].request;
        const auto key = std::make_pair(static_cast<int>(r.unit), r.count);
        auto it = fragmented.find(key);
        if (it == fragmented.end()) it = fragmented.emplace(key, run.FitsIgnoringTopology(r)).first;
        if (it->second) fragmented_seconds += dt;
      }
    }
    now = t;
  };
  auto started = [&](size_t j) {
    const Job& job = jobs[j];
    const double wait = static_cast<double>(now - job.creation_ns) / kNsPerSecond;
    waits_s.push_back(wait);
    if (wait > 0) ++out.waited;
    ++out.placed;
    departures.emplace(now + (job.deletion_ns - job.creation_ns), j);
  };
  auto sample = [&]() {
    const double x = static_cast<double>(now - start) / kNsPerSecond;
    const double share = NotePeak(out, run, x, record);
    if (record) {
      out.timeline.push_back({x, share, out.rejected, static_cast<int>(waiting.size())});
    }
  };
  // After a departure: every waiting pod is tried once, in queue order. Within one pass, a
  // request that did not fit is not tried again for later pods of the same class (nothing was
  // freed in between: placing others only takes room).
  auto retry_waiting = [&]() -> Status {
    std::vector<size_t> still;
    std::vector<std::pair<int, int>> failed;
    for (size_t j : waiting) {
      const Request& r = jobs[j].request;
      const auto key = std::make_pair(static_cast<int>(r.unit), r.count);
      if (std::find(failed.begin(), failed.end(), key) != failed.end()) {
        still.push_back(j);
        continue;
      }
      TOPOSCHED_ASSIGN_OR_RETURN(auto outcome, run.Place(j, jobs[j], now, /*retry=*/true));
      if (outcome) {
        failed.push_back(key);
        still.push_back(j);
      } else {
        started(j);
      }
    }
    waiting = std::move(still);
    return OkStatus();
  };

  size_t next = 0;
  while (next < arrivals.size() || !departures.empty()) {
    const bool depart =
        !departures.empty() &&
        (next == arrivals.size() || departures.top().first <= jobs[arrivals[next]].creation_ns);
    if (depart) {
      const auto [t, j] = departures.top();
      departures.pop();
      advance(t);
      run.Remove(j, jobs[j]);
      // Departures at the same instant all free their ids before anyone is retried.
      if (departures.empty() || departures.top().first != t) {
        TOPOSCHED_RETURN_IF_ERROR(retry_waiting());
      }
    } else {
      const size_t j = arrivals[next++];
      advance(jobs[j].creation_ns);
      TOPOSCHED_ASSIGN_OR_RETURN(auto outcome, run.Place(j, jobs[j], now));
      if (!outcome) {
        started(j);
      } else if (*outcome == RejectReason::kNeverLegal) {
        CountRejection(out, jobs[j], *outcome);
      } else {
        waiting.push_back(j);
      }
    }
    sample();
    progress.Step(policy);
  }
  out.still_waiting = static_cast<int>(waiting.size());
  out.makespan_s = static_cast<double>(now - start) / kNsPerSecond;
  out.device_hours = device_seconds / 3600.0;
  out.avg_allocated_share = out.makespan_s > 0 ? allocated_seconds / out.makespan_s : 0.0;
  out.avg_unallocated_share = 1.0 - out.avg_allocated_share;
  out.fragmented_wait_share = wait_seconds > 0 ? fragmented_seconds / wait_seconds : 0.0;
  if (!waits_s.empty()) {
    out.mean_wait_s =
        std::accumulate(waits_s.begin(), waits_s.end(), 0.0) / static_cast<double>(waits_s.size());
    std::vector<double> sorted = waits_s;
    const size_t k = (sorted.size() * 95 + 99) / 100 - 1;  // nearest rank
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
    out.p95_wait_s = sorted[k];
  }
  RecordTimedEnd(out, run, record);
  return out;
}

// Tasks in order (shuffled for a nonzero seed), none leaving, until the fleet refuses; then on
// to the end, counting.
Result<PolicyResult> RunFill(const topology::Catalog& catalog, Policy policy,
                             const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                             const std::vector<Job>& jobs, const std::vector<size_t>& order,
                             const Options& options, Progress& progress) {
  PolicyResult out;
  out.policy = policy;
  const bool record = options.record_report_data;
  PolicyRun run(catalog, policy, fleet, pools, jobs.size(), record);
  TOPOSCHED_RETURN_IF_ERROR(run.setup());
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t j = order[k];
    const Job& job = jobs[j];
    TOPOSCHED_ASSIGN_OR_RETURN(auto outcome, run.Place(j, job, /*now_ns=*/0));
    if (const std::optional<RejectReason> reason = outcome) {
      CountRejection(out, job, *reason);
      if (*reason != RejectReason::kNeverLegal && !out.failed) {
        out.failed = true;
        out.first_failure_task = job.task;
        out.first_failure_request = RequestLabel(job.request);
        out.placed_before_first_failure = out.placed;
        out.devices_allocated_at_first_failure = run.allocated_devices();
        out.unallocated_share_at_first_failure = run.unallocated_share();
        out.fragmentation_at_first_failure = run.fragmentation().value_or(0.0);
        if (record) {
          out.device_maps = run.DeviceMaps();
          out.device_maps_moment =
              fmt::format("when the first pod failed ({}, task {} in the order tried)",
                          jobs[j].pod.name, k + 1);
        }
      }
    } else {
      ++out.placed;
    }
    const double share = run.allocated_share();
    out.peak_allocated_share = std::max(out.peak_allocated_share, share);
    if (record) out.timeline.push_back({static_cast<double>(k + 1), share, out.rejected});
    progress.Step(policy);
    if (out.failed && options.stop_at_first_failure) break;
  }
  if (!out.failed) {
    // Nothing failed: the fill never reached the fleet's limit; report the end instead.
    out.placed_before_first_failure = out.placed;
    out.devices_allocated_at_first_failure = run.allocated_devices();
    out.unallocated_share_at_first_failure = run.unallocated_share();
    out.fragmentation_at_first_failure = run.fragmentation().value_or(0.0);
    if (record) {
      out.device_maps = run.DeviceMaps();
      out.device_maps_moment = "at the end (no pod failed)";
    }
  }
  RecordEnd(out, run);
  return out;
}

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kDynamic:
      return "dynamic";
    case Mode::kFill:
      return "fill";
    case Mode::kQueue:
      return "queue";
  }
  return "";
}

std::string_view DefaultFleet(Mode mode) {
  return mode == Mode::kFill ? kDefaultFillFleet : kDefaultDynamicFleet;
}

std::string_view RejectReasonKey(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNoRoom:
      return "no_room";
    case RejectReason::kNoLegalSet:
      return "no_legal_set";
    case RejectReason::kNeverLegal:
      return "never_legal";
  }
  return "?";
}

std::string_view RejectReasonLabel(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNoRoom:
      return "no room on eligible nodes";
    case RejectReason::kNoLegalSet:
      return "no legal set free";
    case RejectReason::kNeverLegal:
      return "count never legal";
  }
  return "?";
}

Result<std::vector<FleetGroup>> ParseFleet(std::string_view spec,
                                           const topology::Catalog& catalog) {
  std::vector<FleetGroup> fleet;
  constexpr int kMaxNodesPerGroup = 100'000;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view entry = TrimSpace(spec.substr(pos, comma - pos));
    pos = comma + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      return Error{fmt::format("fleet entry '{}' must be TYPE=COUNT, e.g. trn1.32xlarge=4", entry)};
    }
    const std::string_view type = TrimSpace(entry.substr(0, eq));
    std::string_view count_text = TrimSpace(entry.substr(eq + 1));
    int heads = 0;
    if (const size_t slash = count_text.find('/'); slash != std::string_view::npos) {
      const std::string_view heads_text = TrimSpace(count_text.substr(slash + 1));
      count_text = TrimSpace(count_text.substr(0, slash));
      const std::optional<int64_t> parsed_heads = ParseDecimal(heads_text, 1, 64);
      if (!parsed_heads) {
        return Error{fmt::format(
            "fleet entry '{}': POOLS/HEADS needs a head count from 1 to 64, e.g. ipu-pod16=2/4",
            entry)};
      }
      heads = static_cast<int>(*parsed_heads);
    }
    if (type.empty()) return Error{fmt::format("fleet entry '{}' names no instance type", entry)};
    if (catalog.Find(type) == nullptr) return Error{topology::Catalog::UnknownTypeMessage(type)};
    const std::optional<int64_t> parsed_count = ParseDecimal(count_text, 1, kMaxNodesPerGroup);
    if (!parsed_count) {
      return Error{fmt::format("fleet entry '{}': the count must be a number from 1 to {}", entry,
                               kMaxNodesPerGroup)};
    }
    const int count = static_cast<int>(*parsed_count);
    if (heads > 0) {
      const topology::InstanceType* kind = catalog.Find(type);
      if (kind->rule != topology::LegalSetRule::kAligned ||
          !std::has_single_bit(static_cast<unsigned>(kind->devices))) {
        return Error{fmt::format(
            "fleet entry '{}': {} cannot be a shared pool (needs rule aligned and a power-of-two "
            "device count, like ipu-pod16)",
            entry, type)};
      }
    }
    fleet.push_back({std::string(type), count, heads});
  }
  if (fleet.empty()) {
    return Error{"the fleet is empty: give TYPE=COUNT pairs, e.g. trn1.32xlarge=4,inf2.48xlarge=2"};
  }
  return fleet;
}

std::string FormatFleet(const std::vector<FleetGroup>& fleet) {
  std::string out;
  for (const auto& group : fleet) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}={}", group.instance_type, group.count);
    if (group.heads > 0) out += fmt::format("/{}", group.heads);
  }
  return out;
}

// Fisher-Yates with the generator's raw output, so the order depends only on the seed (the
// standard distributions may differ between library implementations).
std::vector<size_t> FillOrder(size_t jobs, uint64_t seed) {
  std::vector<size_t> order(jobs);
  for (size_t i = 0; i < jobs; ++i) order[i] = i;
  if (seed == 0) return order;
  std::mt19937_64 rng(seed);
  for (size_t i = jobs; i > 1; --i) {
    const size_t pick = static_cast<size_t>(rng() % i);
    std::swap(order[i - 1], order[pick]);
  }
  return order;
}

Result<SimResult> Simulate(const topology::Catalog& catalog, const Trace& trace,
                           const Options& options) {
  if (options.policies.empty()) return Error{"no policy to simulate"};
  if (options.fleet.empty()) return Error{"the fleet is empty"};
  const bool timed = options.mode != Mode::kFill;
  if (timed && !trace.has_time_columns) {
    return Error{
        "this trace has no creation_time and deletion_time columns, so there is nothing to "
        "replay in time; use fill mode (--mode fill), which adds its tasks in order until the "
        "fleet is full"};
  }

  SimResult result;
  result.mode = options.mode;
  result.seed = options.seed;
  result.fleet = options.fleet;
  std::vector<FleetNode> fleet;
  std::string pools_yaml = "pools:\n";
  std::map<std::string, int, std::less<>> per_type;
  for (const auto& group : options.fleet) {
    const topology::InstanceType* type = catalog.Find(group.instance_type);
    if (type == nullptr) return Error{topology::Catalog::UnknownTypeMessage(group.instance_type)};
    if (group.count < 1) {
      return Error{fmt::format("fleet: {} needs a count of at least 1", group.instance_type)};
    }
    TOPOSCHED_ASSIGN_OR_RETURN(auto shape, NodeShape::Make(*type));
    if (shape.devices < 1 || shape.cores_per_device < 1) {
      return Error{fmt::format("{} has no devices or cores to place pods on", type->name)};
    }
    for (int k = 0; k < group.count; ++k) {
      const int index = per_type[type->name]++;
      if (group.heads == 0) {
        fleet.push_back({fmt::format("{}-{}", type->name, index), shape, ""});
      } else {
        const std::string pool = fmt::format("{}-pool{}", type->name, index);
        pools_yaml += fmt::format("  - {{name: {}, kind: {}}}\n", pool, type->name);
        for (int h = 0; h < group.heads; ++h) {
          fleet.push_back({fmt::format("{}-head{}", pool, h), shape, pool});
        }
      }
      result.total_devices += shape.devices;
    }
  }
  result.nodes = static_cast<int>(fleet.size());
  topology::PoolSet pools;
  if (pools_yaml != "pools:\n") {
    TOPOSCHED_ASSIGN_OR_RETURN(auto parsed, topology::PoolSet::Parse(pools_yaml, "fleet", catalog));
    pools = std::move(parsed);
  }

  result.rows = static_cast<int>(trace.tasks.size()) + trace.bad_rows;
  result.bad_rows = trace.bad_rows;
  result.warnings = trace.warnings;
  result.task_names.reserve(trace.tasks.size());
  std::vector<Job> jobs;
  jobs.reserve(trace.tasks.size());
  for (size_t i = 0; i < trace.tasks.size(); ++i) {
    const Task& task = trace.tasks[i];
    result.task_names.push_back(task.name);
    const std::optional<Request> request = NeuronRequest(task);
    if (!request) {
      ++result.cpu_only_skipped;
      continue;
    }
    if (timed && !task.has_times) {
      ++result.bad_rows;
      if (static_cast<int>(result.warnings.size()) < kMaxWarnings) {
        result.warnings.push_back(fmt::format("{}:{}: skipped in {} mode: {}", trace.source_name,
                                              task.line, ModeName(options.mode),
                                              task.time_problem));
      }
      continue;
    }
    Job job;
    job.task = static_cast<int>(i);
    job.request = *request;
    job.creation_ns = task.creation_ns;
    job.deletion_ns = task.deletion_ns;
    job.pod.uid = fmt::format("task-{}", i);
    job.pod.name = task.name;
    job.pod.containers.push_back({"main", *request, false});
    (request->unit == Unit::kDevice ? result.device_requests : result.core_requests)++;
    jobs.push_back(std::move(job));
  }
  result.gpu_tasks = static_cast<int>(jobs.size());

  std::vector<Event> events;
  std::vector<size_t> order;
  int64_t steps = 0;
  if (timed) {
    events = BuildEvents(jobs, options.seed);
    if (!events.empty()) {
      result.span_s = static_cast<double>(events.back().t - events.front().t) / kNsPerSecond;
    }
    steps = static_cast<int64_t>(events.size());
  } else {
    order = FillOrder(jobs.size(), options.seed);
    steps = static_cast<int64_t>(order.size());
  }
  Progress progress(options, steps * static_cast<int64_t>(options.policies.size()));
  for (Policy policy : options.policies) {
    Result<PolicyResult> run =
        options.mode == Mode::kDynamic
            ? RunDynamic(catalog, policy, fleet, &pools, jobs, events, options, progress)
        : options.mode == Mode::kQueue
            ? RunQueue(catalog, policy, fleet, &pools, jobs, events, options, progress)
            : RunFill(catalog, policy, fleet, &pools, jobs, order, options, progress);
    if (!run.ok()) return Error{run.error()};
    result.policies.push_back(std::move(run).value());
  }
  return result;
}

}  // namespace toposched::sim
