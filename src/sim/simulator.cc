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
#include "sim/policy_run.h"
#include "topology/pools.h"
#include "topology/queue.h"
#include "tracker/tracker.h"

namespace toposched::sim {
namespace {

using internal::FleetNode;
using internal::Job;
using internal::PolicyRun;
using topology::NodeShape;
using topology::Policy;
using topology::Request;
using topology::RequestLabel;
using topology::Unit;

constexpr int64_t kNsPerSecond = 1'000'000'000;
double Mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// The nearest-rank percentile of a non-empty list (a copy is partly sorted).
double NearestRank(std::vector<double> values, int percent) {
  const size_t k = (values.size() * static_cast<size_t>(percent) + 99) / 100 - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

// How often (in steps) the progress callback is told.
constexpr int64_t kProgressEvery = 512;

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

// A pod on a device that just failed: counted, and with evict removed (the work it had done since
// `started_ns` is lost). Returns whether it was removed.
bool HitByFailure(PolicyResult& out, PolicyRun& run, const Options& options, size_t j,
                  const Job& job, int64_t started_ns, int64_t now) {
  ++out.pods_hit;
  if (!options.failures.evict) return false;
  out.lost_device_hours += run.HeldDevices(j, job) * static_cast<double>(now - started_ns) /
                           static_cast<double>(kNsPerSecond) / 3600.0;
  run.Remove(j, job);
  ++out.evicted;
  return true;
}

// Dynamic mode with failures: a pod evicted off a failed device is placed again at once if a node
// takes it (its controller makes it again), to run to its trace end; if none does, it is dropped.
Result<PolicyResult> RunDynamic(const topology::Catalog& catalog, Policy policy,
                                const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                                const std::vector<Job>& jobs, const std::vector<Event>& events,
                                const std::vector<DeviceOutage>& outages, const Options& options,
                                Progress& progress) {
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
  std::vector<int64_t> started_ns(jobs.size(), 0);
  auto advance = [&](int64_t t) {
    if (t <= now) return;
    const double dt = static_cast<double>(t - now) / kNsPerSecond;
    device_seconds += run.allocated_devices() * dt;
    unallocated_seconds += run.unallocated_share() * dt;
    if (const std::optional<double> f = run.fragmentation()) {
      fragmentation_seconds += *f * dt;
      seconds_with_free += dt;
    }
    now = t;
  };
  size_t next_outage = 0;
  for (const Event& event : events) {
    // Failures before this event (at the same instant, the pods' event goes first).
    for (; next_outage < outages.size() && outages[next_outage].t_ns < event.t; ++next_outage) {
      const DeviceOutage& o = outages[next_outage];
      advance(o.t_ns);
      TOPOSCHED_ASSIGN_OR_RETURN(auto hit, run.SetDeviceOut(o.node, o.device, o.fails));
      for (size_t j : hit) {
        if (!HitByFailure(out, run, options, j, jobs[j], started_ns[j], now)) continue;
        TOPOSCHED_ASSIGN_OR_RETURN(auto again, run.Place(j, jobs[j], now, /*retry=*/true));
        if (again) {
          ++out.dropped_after_eviction;
        } else {
          started_ns[j] = now;
        }
      }
    }
    advance(event.t);
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
        started_ns[event.job] = now;
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
// With failures and evict, a pod evicted off a failed device joins the back of the queue, and its
// wait then counts too; a device coming back is a cluster event (the waiting pods are retried).
Result<PolicyResult> RunQueue(const topology::Catalog& catalog, Policy policy,
                              const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                              const std::vector<Job>& jobs, const std::vector<Event>& events,
                              const std::vector<DeviceOutage>& outages, const Options& options,
                              Progress& progress) {
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
  // Per job: when it joined the queue (arrival, or eviction), its wait so far, when it started
  // and when it will end (-1: not running; a departure whose time differs is stale).
  std::vector<int64_t> queued_ns(jobs.size()), wait_ns(jobs.size(), 0), started_ns(jobs.size()),
      end_ns(jobs.size(), -1);
  std::vector<bool> ever_started(jobs.size(), false);
  std::vector<double> held_devices(jobs.size(), 0);  // when it last started
  for (size_t j = 0; j < jobs.size(); ++j) queued_ns[j] = jobs[j].creation_ns;
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
      std::map<RequestClassKey, bool> fragmented;
      for (size_t j : waiting) {
        const Request& r = jobs[j].request;
        const RequestClassKey key = ClassKeyOf(r);
        auto it = fragmented.find(key);
        if (it == fragmented.end()) it = fragmented.emplace(key, run.FitsIgnoringTopology(r)).first;
        if (it->second) fragmented_seconds += dt;
      }
    }
    now = t;
  };
  auto started = [&](size_t j) {
    const Job& job = jobs[j];
    wait_ns[j] += now - queued_ns[j];
    if (!ever_started[j]) ++out.placed;
    ever_started[j] = true;
    started_ns[j] = now;
    held_devices[j] = run.HeldDevices(j, job);
    end_ns[j] = now + (job.deletion_ns - job.creation_ns);
    departures.emplace(end_ns[j], j);
  };
  auto drop_stale = [&]() {
    while (!departures.empty() && end_ns[departures.top().second] != departures.top().first) {
      departures.pop();
    }
  };
  auto sample = [&]() {
    const double x = static_cast<double>(now - start) / kNsPerSecond;
    const double share = NotePeak(out, run, x, record);
    if (record) {
      out.timeline.push_back({x, share, out.rejected, static_cast<int>(waiting.size())});
    }
  };
  // With Options::hold_back_age_ns, ours lets smaller pods go first through the extender's own
  // rule (tracker::Tracker::HoldsBack): the pods waiting now per class, counted as they come and
  // go.
  const bool queue_aware = policy == Policy::kScarcity && options.hold_back_age_ns > 0;
  std::vector<RequestClassKey> class_keys;
  std::vector<topology::WaitingClass> classes;
  auto count_waiting = [&]() {
    class_keys.clear();
    classes.clear();
    for (size_t j : waiting) {
      const RequestClassKey key = ClassKeyOf(jobs[j].request);
      const auto it = std::find(class_keys.begin(), class_keys.end(), key);
      if (it != class_keys.end()) {
        ++classes[static_cast<size_t>(it - class_keys.begin())].pods;
        continue;
      }
      class_keys.push_back(key);
      classes.push_back({jobs[j].request, 1, false});
    }
  };
  auto class_of = [&](const RequestClassKey& key) {
    return static_cast<size_t>(std::find(class_keys.begin(), class_keys.end(), key) -
                               class_keys.begin());
  };
  auto holds_back = [&](size_t j) {
    if (!queue_aware) return false;
    return run
        .HoldsBack(jobs[j].request, wait_ns[j] + (now - queued_ns[j]), classes,
                   options.hold_back_age_ns)
        .held;
  };

  // After a departure: every waiting pod is tried once, in queue order. Within one pass, a
  // request that did not fit is not tried again for later pods of the same class (nothing was
  // freed in between: placing others only takes room).
  auto retry_waiting = [&]() -> Status {
    std::vector<size_t> still;
    std::vector<RequestClassKey> failed;
    if (queue_aware) count_waiting();
    for (size_t j : waiting) {
      const RequestClassKey key = ClassKeyOf(jobs[j].request);
      if (std::find(failed.begin(), failed.end(), key) != failed.end() || holds_back(j)) {
        still.push_back(j);
        continue;
      }
      TOPOSCHED_ASSIGN_OR_RETURN(auto outcome, run.Place(j, jobs[j], now, /*retry=*/true));
      if (outcome) {
        failed.push_back(key);
        still.push_back(j);
      } else {
        started(j);
        if (queue_aware) --classes[class_of(key)].pods;
      }
    }
    waiting = std::move(still);
    return OkStatus();
  };

  size_t next = 0;
  size_t next_outage = 0;
  constexpr int64_t kNever = INT64_MAX;
  // Outages go on while pods remain: one waiting only for a device to come back still waits.
  while (next < arrivals.size() || !departures.empty() ||
         (!waiting.empty() && next_outage < outages.size())) {
    const int64_t depart_t = departures.empty() ? kNever : departures.top().first;
    const int64_t arrive_t = next == arrivals.size() ? kNever : jobs[arrivals[next]].creation_ns;
    const int64_t outage_t = next_outage == outages.size() ? kNever : outages[next_outage].t_ns;
    if (outage_t < depart_t && outage_t < arrive_t) {
      // Pods' own events at the same instant go first.
      const DeviceOutage& o = outages[next_outage++];
      advance(o.t_ns);
      TOPOSCHED_ASSIGN_OR_RETURN(auto hit, run.SetDeviceOut(o.node, o.device, o.fails));
      bool freed = !o.fails;
      for (size_t j : hit) {
        if (!HitByFailure(out, run, options, j, jobs[j], started_ns[j], now)) continue;
        end_ns[j] = -1;
        queued_ns[j] = now;
        waiting.push_back(j);
        freed = true;
      }
      drop_stale();
      if (freed) TOPOSCHED_RETURN_IF_ERROR(retry_waiting());
    } else if (depart_t <= arrive_t) {
      const auto [t, j] = departures.top();
      departures.pop();
      end_ns[j] = -1;
      advance(t);
      run.Remove(j, jobs[j]);
      drop_stale();
      // Departures at the same instant all free their ids before anyone is retried.
      if (departures.empty() || departures.top().first != t) {
        TOPOSCHED_RETURN_IF_ERROR(retry_waiting());
      }
    } else {
      const size_t j = arrivals[next++];
      advance(jobs[j].creation_ns);
      std::optional<RejectReason> outcome;
      if (queue_aware) count_waiting();
      // A request no node could ever grant is refused as before, never held back.
      if (holds_back(j) && run.EverLegal(jobs[j].request)) {
        run.ObserveOnly(jobs[j].pod);
        outcome = RejectReason::kNoRoom;
      } else {
        TOPOSCHED_ASSIGN_OR_RETURN(outcome, run.Place(j, jobs[j], now));
      }
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
  // Waits over the pods that are running or done (a pod still waiting has no end to its wait).
  std::vector<bool> still(jobs.size(), false);
  for (size_t j : waiting) still[j] = true;
  std::vector<double> waits_s;
  std::map<RequestClassKey, std::vector<double>> waits_by_request;
  double weighted_wait_s = 0, weights = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!ever_started[j] || still[j]) continue;
    const double wait_s = static_cast<double>(wait_ns[j]) / kNsPerSecond;
    waits_s.push_back(wait_s);
    waits_by_request[ClassKeyOf(jobs[j].request)].push_back(wait_s);
    weighted_wait_s += wait_s * held_devices[j];
    weights += held_devices[j];
    if (wait_ns[j] > 0) ++out.waited;
  }
  out.makespan_s = static_cast<double>(now - start) / kNsPerSecond;
  out.device_hours = device_seconds / 3600.0;
  out.avg_allocated_share = out.makespan_s > 0 ? allocated_seconds / out.makespan_s : 0.0;
  out.avg_unallocated_share = 1.0 - out.avg_allocated_share;
  out.fragmented_wait_share = wait_seconds > 0 ? fragmented_seconds / wait_seconds : 0.0;
  if (!waits_s.empty()) {
    out.mean_wait_s = Mean(waits_s);
    out.p95_wait_s = NearestRank(waits_s, 95);
    out.max_wait_s = *std::max_element(waits_s.begin(), waits_s.end());
  }
  out.device_weighted_mean_wait_s = weights > 0 ? weighted_wait_s / weights : 0.0;
  for (auto& [key, waits] : waits_by_request) {
    PolicyResult::ClassWait c;
    c.request = {static_cast<Unit>(key.first), key.second};
    c.pods = static_cast<int>(waits.size());
    c.mean_s = Mean(waits);
    c.max_s = *std::max_element(waits.begin(), waits.end());
    c.p95_s = NearestRank(waits, 95);
    out.wait_by_request.push_back(c);
  }
  RecordTimedEnd(out, run, record);
  return out;
}

// Tasks in order (shuffled for a nonzero seed), none leaving, until the fleet refuses; then on
// to the end, counting. `out_at_start`: per node, the devices out of service throughout.
Result<PolicyResult> RunFill(const topology::Catalog& catalog, Policy policy,
                             const std::vector<FleetNode>& fleet, const topology::PoolSet* pools,
                             const std::vector<Job>& jobs, const std::vector<size_t>& order,
                             const std::vector<topology::DeviceMask>& out_at_start,
                             const Options& options, Progress& progress) {
  PolicyResult out;
  out.policy = policy;
  const bool record = options.record_report_data;
  PolicyRun run(catalog, policy, fleet, pools, jobs.size(), record);
  TOPOSCHED_RETURN_IF_ERROR(run.setup());
  for (size_t node = 0; node < out_at_start.size(); ++node) {
    if (out_at_start[node] != 0)
      TOPOSCHED_RETURN_IF_ERROR(run.SetOutOfService(node, out_at_start[node]));
  }
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

// Device-hours out of service from `outages` until `end_ns` (a device not back by then counts to
// the end).
double DeviceHoursOut(const std::vector<DeviceOutage>& outages, int64_t end_ns) {
  std::map<std::pair<size_t, int>, int64_t> failed_at;
  double ns = 0;
  for (const DeviceOutage& o : outages) {
    const auto key = std::make_pair(o.node, o.device);
    if (o.fails) {
      failed_at[key] = o.t_ns;
    } else if (auto it = failed_at.find(key); it != failed_at.end()) {
      ns += static_cast<double>(o.t_ns - it->second);
      failed_at.erase(it);
    }
  }
  for (const auto& [key, t] : failed_at) ns += static_cast<double>(end_ns - t);
  return ns / kNsPerSecond / 3600.0;
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
  // Failures: the same for every policy. A shared pool's heads do not fail (its health is not
  // reported per node).
  result.failures = options.failures;
  std::vector<DeviceOutage> outages;
  std::vector<topology::DeviceMask> out_at_start;
  if (options.failures.enabled()) {
    std::vector<int> devices_per_node;
    devices_per_node.reserve(fleet.size());
    for (const FleetNode& node : fleet) {
      devices_per_node.push_back(node.pool.empty() ? node.shape.devices : 0);
    }
    if (timed && !events.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN(outages,
                                 OutageSchedule(devices_per_node, events.front().t, events.back().t,
                                                options.failures, options.seed));
      result.device_hours_out = DeviceHoursOut(outages, events.back().t);
      for (const DeviceOutage& o : outages) result.device_failures += o.fails ? 1 : 0;
    } else if (!timed) {
      out_at_start = SteadyOutages(devices_per_node, options.failures, options.seed);
      for (topology::DeviceMask m : out_at_start) result.device_failures += std::popcount(m);
    }
  }
  const int runs = options.failures.enabled() ? 2 : 1;
  Progress progress(options, steps * static_cast<int64_t>(options.policies.size()) * runs);
  auto run_one = [&](Policy policy, const std::vector<DeviceOutage>& timeline,
                     const std::vector<topology::DeviceMask>& at_start) {
    return options.mode == Mode::kDynamic ? RunDynamic(catalog, policy, fleet, &pools, jobs, events,
                                                       timeline, options, progress)
           : options.mode == Mode::kQueue
               ? RunQueue(catalog, policy, fleet, &pools, jobs, events, timeline, options, progress)
               : RunFill(catalog, policy, fleet, &pools, jobs, order, at_start, options, progress);
  };
  for (Policy policy : options.policies) {
    Result<PolicyResult> run = run_one(policy, outages, out_at_start);
    if (!run.ok()) return Error{run.error()};
    result.policies.push_back(std::move(run).value());
    if (options.failures.enabled()) {
      Result<PolicyResult> healthy = run_one(policy, {}, {});
      if (!healthy.ok()) return Error{healthy.error()};
      result.without_failures.push_back(std::move(healthy).value());
    }
  }
  return result;
}

}  // namespace toposched::sim
