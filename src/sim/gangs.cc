#include "sim/gangs.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "sim/bind.h"
#include "tracker/tracker.h"

namespace toposched::sim {
namespace {

using topology::Request;
using topology::Unit;

constexpr double kNsPerSecond = 1e9;
constexpr double kNsPerHour = 3600e9;
constexpr std::string_view kUltraServerType = "trn2u.48xlarge";
constexpr std::string_view kPlainType = "trn2.48xlarge";

// The fleet: UltraServer nodes first ("us<k>-n<i>", groups us<k> and us<k>-a / us<k>-b), then
// the plain nodes.
struct Fleet {
  std::vector<tracker::NodeInfo> nodes;
  std::vector<std::string> names;
  // Per node: its UltraServer (-1 for a plain node) and its half (2k or 2k+1).
  std::vector<int> four;
  std::vector<int> two;
  int devices = 0;
};

Result<Fleet> BuildFleet(const topology::Catalog& catalog, const GangSimOptions& options) {
  const topology::InstanceType* us_type = catalog.Find(kUltraServerType);
  const topology::InstanceType* plain_type = catalog.Find(kPlainType);
  if (us_type == nullptr) return Error{topology::Catalog::UnknownTypeMessage(kUltraServerType)};
  if (plain_type == nullptr && options.plain_nodes > 0) {
    return Error{topology::Catalog::UnknownTypeMessage(kPlainType)};
  }
  Fleet fleet;
  for (int k = 0; k < options.ultraservers; ++k) {
    const std::string us = fmt::format("us{}", k);
    for (int i = 0; i < 4; ++i) {
      tracker::NodeInfo info{fmt::format("{}-n{}", us, i), std::string(kUltraServerType)};
      info.groups = {tracker::NodeGroup{4, us, i},
                     tracker::NodeGroup{2, us + (i < 2 ? "-a" : "-b"), i % 2}};
      fleet.names.push_back(info.name);
      fleet.nodes.push_back(std::move(info));
      fleet.four.push_back(k);
      fleet.two.push_back(2 * k + i / 2);
      fleet.devices += us_type->devices;
    }
  }
  for (int k = 0; k < options.plain_nodes; ++k) {
    tracker::NodeInfo info{fmt::format("trn2-{}", k), std::string(kPlainType)};
    fleet.names.push_back(info.name);
    fleet.nodes.push_back(std::move(info));
    fleet.four.push_back(-1);
    fleet.two.push_back(-1);
    fleet.devices += plain_type->devices;
  }
  return fleet;
}

tracker::PodSpec MemberPod(int job, int member, int devices) {
  tracker::PodSpec pod;
  pod.uid = fmt::format("g{}-{}", job, member);
  pod.name = fmt::format("gang-{}/worker-{}", job, member);
  pod.containers.push_back({"main", Request{Unit::kDevice, devices}, false});
  return pod;
}

tracker::PodSpec SinglePod(int job, int devices) {
  tracker::PodSpec pod;
  pod.uid = fmt::format("s{}", job);
  pod.name = fmt::format("single-{}", job);
  pod.containers.push_back({"main", Request{Unit::kDevice, devices}, false});
  return pod;
}

std::string GangId(int job) { return fmt::format("gang-{}", job); }

// Departures before arrivals at the same instant (freed nodes are usable at once).
enum Phase { kDeparture = 0, kArrival = 1 };

struct Event {
  int64_t t = 0;
  int phase = kArrival;
  int64_t seq = 0;
  int job = 0;
  int member = 0;
  bool operator>(const Event& o) const {
    return std::tie(t, phase, seq) > std::tie(o.t, o.phase, o.seq);
  }
};

// One gang's progress under one strategy.
struct GangRun {
  int arrived = 0;
  int placed = 0;  // members bound to a node
  int held = 0;    // nodes the gang holds (placed members, or every reserved seat)
  bool running = false;
  bool stuck = false;
  int stranded = 0;  // the nodes counted as stranded while stuck
  int64_t stuck_since = 0;
  int64_t stuck_ns = 0;
  int64_t last_placed = 0;
  bool ever_stuck = false;
  // All-or-nothing: the gang's seats are reserved; it waits in the queue.
  bool reserved = false;
  bool queued = false;
  std::vector<bool> member_arrived;
  std::vector<int> member_node;  // pod-by-pod: node index per member, -1 when not placed
  int group = -1;                // pod-by-pod: the group its placed members are in
};

// What both strategies share: the tracker, the event queue, single pods, and the accounting.
class Replay {
 public:
  Replay(const topology::Catalog& catalog, const GangSimOptions& options, const Fleet& fleet,
         const std::vector<GangJob>& stream, int64_t window_start, int64_t window_end)
      : tracker_(catalog, options.policy),
        options_(options),
        fleet_(fleet),
        stream_(stream),
        window_start_(window_start),
        window_end_(window_end) {
    runs_.resize(stream.size());
    for (size_t j = 0; j < stream.size(); ++j) {
      const GangJob& job = stream[j];
      if (job.size > 1) {
        runs_[j].member_arrived.assign(static_cast<size_t>(job.size), false);
        runs_[j].member_node.assign(static_cast<size_t>(job.size), -1);
      }
      for (size_t m = 0; m < job.arrival_ns.size(); ++m) {
        events_.push(
            {job.arrival_ns[m], kArrival, next_seq_++, static_cast<int>(j), static_cast<int>(m)});
      }
    }
  }
  virtual ~Replay() = default;

  Status Setup() {
    for (const auto& node : fleet_.nodes) TOPOSCHED_RETURN_IF_ERROR(tracker_.UpsertNode(node));
    return OkStatus();
  }

  Result<GangStrategyResult> Run(std::string name) {
    GangStrategyResult out;
    out.name = std::move(name);
    while (!events_.empty()) {
      const Event event = events_.top();
      events_.pop();
      Advance(event.t);
      TOPOSCHED_RETURN_IF_ERROR(BeforeEvent());
      const GangJob& job = stream_[static_cast<size_t>(event.job)];
      if (event.phase == kDeparture) {
        if (job.size == 1) {
          tracker_.Forget(SinglePod(event.job, job.devices).uid);
          held_devices_ -= job.devices;
          running_devices_ -= job.devices;
        } else {
          for (int m = 0; m < job.size; ++m) tracker_.Forget(MemberPod(event.job, m, 0).uid);
          Change(event.job, [&](GangRun& run) {
            run.held = 0;
            run.running = false;
          });
          running_devices_ -= job.size * job.devices;
          OnGangLeft(event.job);
        }
        TOPOSCHED_RETURN_IF_ERROR(Retry());
      } else if (job.size == 1) {
        TOPOSCHED_RETURN_IF_ERROR(PlaceSingle(event.job, out));
      } else {
        tracker_.ObserveDemand(MemberPod(event.job, event.member, job.devices));
        Change(event.job, [&](GangRun& run) {
          ++run.arrived;
          run.member_arrived[static_cast<size_t>(event.member)] = true;
        });
        TOPOSCHED_RETURN_IF_ERROR(OnMemberArrived(event.job, event.member));
      }
      Settle();
    }
    Finish(out);
    return out;
  }

 protected:
  virtual Status BeforeEvent() { return OkStatus(); }
  virtual Status OnMemberArrived(int job, int member) = 0;
  virtual void OnGangLeft(int /*job*/) {}
  virtual Status Retry() = 0;

  // Changes a gang's state, keeping the fleet-wide counters (nodes held before the gang runs,
  // devices held) in step; whether it is stuck is settled once the event is handled, so that a
  // member arriving and being placed at once is never counted as waiting.
  void Change(int job, const std::function<void(GangRun&)>& mutate) {
    GangRun& run = runs_[static_cast<size_t>(job)];
    const int devices = stream_[static_cast<size_t>(job)].devices;
    held_before_run_ -= run.running ? 0 : run.held;
    held_devices_ -= run.held * devices;
    mutate(run);
    held_before_run_ += run.running ? 0 : run.held;
    held_devices_ += run.held * devices;
    dirty_.push_back(job);
  }

  // Members are bound (`count`, holding `new_nodes` more nodes): when the last is, the gang
  // starts running and leaves after its run.
  void MembersPlaced(int job, int count, int new_nodes) {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    bool started = false;
    Change(job, [&](GangRun& run) {
      run.placed += count;
      run.held += new_nodes;
      run.last_placed = now_;
      if (run.placed == spec.size) {
        run.running = true;
        started = true;
      }
    });
    if (started) {
      running_devices_ += spec.size * spec.devices;
      events_.push({now_ + spec.duration_ns, kDeparture, next_seq_++, job, 0});
    }
  }

  tracker::Tracker tracker_;
  const GangSimOptions& options_;
  const Fleet& fleet_;
  const std::vector<GangJob>& stream_;
  int64_t now_ = 0;
  std::vector<GangRun> runs_;

 private:
  Status PlaceSingle(int job, GangStrategyResult& out) {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    const tracker::PodSpec pod = SinglePod(job, spec.devices);
    const tracker::Ranking ranking = ChooseNode(tracker_, pod, fleet_.names);
    if (ranking.best < 0) {
      ++out.singles_rejected;
      return OkStatus();
    }
    TOPOSCHED_RETURN_IF_ERROR(
        BindPod(tracker_, pod, fleet_.names[static_cast<size_t>(ranking.best)], now_));
    ++out.singles_placed;
    held_devices_ += spec.devices;
    running_devices_ += spec.devices;
    events_.push({now_ + spec.duration_ns, kDeparture, next_seq_++, job, 0});
    return OkStatus();
  }

  // Stuck: holding nodes, not running, with an arrived member waiting for a node.
  void Settle() {
    for (int job : dirty_) {
      GangRun& run = runs_[static_cast<size_t>(job)];
      stranded_nodes_ -= run.stuck ? run.stranded : 0;
      const bool stuck = !run.running && run.held > 0 && run.arrived > run.placed;
      if (stuck && !run.stuck) {
        run.stuck_since = now_;
        run.ever_stuck = true;
      }
      if (!stuck && run.stuck) run.stuck_ns += now_ - run.stuck_since;
      run.stuck = stuck;
      run.stranded = run.held;
      stranded_nodes_ += run.stuck ? run.stranded : 0;
    }
    dirty_.clear();
    max_stranded_ = std::max(max_stranded_, stranded_nodes_);
  }

  void Advance(int64_t t) {
    if (t <= now_) {
      now_ = std::max(now_, t);
      return;
    }
    const double dt = static_cast<double>(t - now_);
    stranded_ns_ += stranded_nodes_ * dt;
    held_before_run_ns_ += held_before_run_ * dt;
    const int64_t from = std::max(now_, window_start_);
    const int64_t to = std::min(t, window_end_);
    if (to > from) {
      const double wdt = static_cast<double>(to - from);
      held_device_ns_ += held_devices_ * wdt;
      running_device_ns_ += running_devices_ * wdt;
    }
    now_ = t;
  }

  void Finish(GangStrategyResult& out) {
    std::vector<double> all, two, four;
    for (size_t j = 0; j < stream_.size(); ++j) {
      const GangJob& spec = stream_[j];
      if (spec.size == 1) continue;
      GangRun& run = runs_[j];
      if (run.stuck) run.stuck_ns += now_ - run.stuck_since;
      GangOutcome o;
      o.job = static_cast<int>(j);
      o.size = spec.size;
      o.completed = run.placed == spec.size;
      o.wait_s = static_cast<double>(run.last_placed - spec.arrival_ns.front()) / kNsPerSecond;
      o.stuck_s = static_cast<double>(run.stuck_ns) / kNsPerSecond;
      o.deadlocked = o.stuck_s > static_cast<double>(options_.timeout_s);
      ++out.gangs;
      out.gangs_completed += o.completed ? 1 : 0;
      out.gangs_deadlocked += o.deadlocked ? 1 : 0;
      out.gangs_stuck += run.ever_stuck ? 1 : 0;
      if (o.completed) {
        all.push_back(o.wait_s);
        (spec.size == 2 ? two : four).push_back(o.wait_s);
      }
      out.outcomes.push_back(o);
    }
    auto stats = [](std::vector<double> waits) {
      WaitStats s;
      s.gangs = static_cast<int>(waits.size());
      if (waits.empty()) return s;
      std::sort(waits.begin(), waits.end());
      double sum = 0;
      for (double w : waits) sum += w;
      s.mean_s = sum / static_cast<double>(waits.size());
      // Nearest rank.
      const auto rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(waits.size())));
      s.p95_s = waits[std::max<size_t>(rank, 1) - 1];
      s.max_s = waits.back();
      return s;
    };
    out.wait = stats(all);
    out.wait_two = stats(two);
    out.wait_four = stats(four);
    out.stranded_node_hours = stranded_ns_ / kNsPerHour;
    out.max_stranded_nodes = max_stranded_;
    out.held_before_run_node_hours = held_before_run_ns_ / kNsPerHour;
    const double window = static_cast<double>(window_end_ - window_start_);
    if (window > 0 && fleet_.devices > 0) {
      out.mean_allocated_share = held_device_ns_ / window / fleet_.devices;
      out.mean_running_share = running_device_ns_ / window / fleet_.devices;
    }
  }

  const int64_t window_start_;
  const int64_t window_end_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t next_seq_ = 0;
  int stranded_nodes_ = 0;
  int max_stranded_ = 0;
  std::vector<int> dirty_;  // gangs changed by the event being handled
  int held_before_run_ = 0;
  int64_t held_devices_ = 0;
  int64_t running_devices_ = 0;
  double stranded_ns_ = 0;
  double held_before_run_ns_ = 0;
  double held_device_ns_ = 0;
  double running_device_ns_ = 0;
};

// A shape that failed to place at this instant, so that a retry pass skips shapes that cannot
// fit either: the fleet only fills up during one pass, and a gang of at least as many nodes,
// each asking at least as many devices, needs more of the same.
class FailedShapes {
 public:
  void Clear() { failed_.clear(); }
  void Add(int size, int devices) { failed_.emplace_back(size, devices); }
  bool Covers(int size, int devices) const {
    return std::any_of(failed_.begin(), failed_.end(),
                       [&](const auto& f) { return f.first <= size && f.second <= devices; });
  }

 private:
  std::vector<std::pair<int, int>> failed_;
};

// All-or-nothing: the tracker's gang reservations.
class AllOrNothing : public Replay {
 public:
  using Replay::Replay;

 protected:
  Status BeforeEvent() override {
    // As the extender's sweep does. Members arrive within the spread, shorter than the
    // reservation's window, so a reservation running out would be a bug in this replay.
    const tracker::Expired expired = tracker_.ExpireReservations(now_);
    if (!expired.empty()) {
      return Error{fmt::format(
          "internal error: reservation of {} expired in the gang replay",
          expired.pods.empty() ? "gang " + expired.gangs.front() : expired.pods.front())};
    }
    return OkStatus();
  }

  Status OnMemberArrived(int job, int member) override {
    GangRun& run = runs_[static_cast<size_t>(job)];
    if (run.reserved) {
      TOPOSCHED_RETURN_IF_ERROR(Seat(job, member));
      MembersPlaced(job, 1, 0);  // its node was counted when the gang was reserved
      return OkStatus();
    }
    if (run.queued) return OkStatus();  // waiting for room; tried again when pods leave
    TOPOSCHED_ASSIGN_OR_RETURN(const bool reserved, TryReserve(job));
    if (!reserved) {
      run.queued = true;
      queue_.push_back(job);
    }
    return OkStatus();
  }

  Status Retry() override {
    failed_.Clear();
    for (auto it = queue_.begin(); it != queue_.end();) {
      const GangJob& spec = stream_[static_cast<size_t>(*it)];
      if (failed_.Covers(spec.size, spec.devices)) {
        ++it;
        continue;
      }
      TOPOSCHED_ASSIGN_OR_RETURN(const bool reserved, TryReserve(*it));
      if (reserved) {
        runs_[static_cast<size_t>(*it)].queued = false;
        it = queue_.erase(it);
      } else {
        failed_.Add(spec.size, spec.devices);
        ++it;
      }
    }
    return OkStatus();
  }

 private:
  // Reserves every seat, then seats the members that are here already. False: it does not fit.
  Result<bool> TryReserve(int job) {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    tracker::GangRequest request;
    request.id = GangId(job);
    request.size = spec.size;
    request.group_nodes = spec.size;
    request.member = MemberPod(job, 0, spec.devices);
    auto gang = tracker_.ReserveGang(request, fleet_.names, now_ + TimeoutNs());
    if (!gang.ok()) return false;
    GangRun& run = runs_[static_cast<size_t>(job)];
    run.reserved = true;
    int seated = 0;
    for (int m = 0; m < spec.size; ++m) {
      if (run.member_arrived[static_cast<size_t>(m)]) {
        TOPOSCHED_RETURN_IF_ERROR(Seat(job, m));
        ++seated;
      }
    }
    MembersPlaced(job, seated, spec.size);
    return true;
  }

  // Seats and binds one member (the tracker's part only; the caller counts it).
  Status Seat(int job, int member) {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    const tracker::PodSpec pod = MemberPod(job, member, spec.devices);
    const std::string id = GangId(job);
    auto seat = tracker_.SeatGangMember(id, pod.uid, member, now_ + TimeoutNs());
    if (!seat.ok()) return Error{"internal error: " + seat.error()};
    auto bound = tracker_.CommitGangMember(id, pod.uid, pod.name, seat->node);
    if (!bound.ok()) return Error{"internal error: " + bound.error()};
    return OkStatus();
  }

  int64_t TimeoutNs() const { return options_.timeout_s * 1'000'000'000; }

  std::deque<int> queue_;
  FailedShapes failed_;
};

// Pod-by-pod: kube-scheduler with AWS's rules, one member at a time.
class PodByPod : public Replay {
 public:
  PodByPod(const topology::Catalog& catalog, const GangSimOptions& options, const Fleet& fleet,
           const std::vector<GangJob>& stream, int64_t window_start, int64_t window_end)
      : Replay(catalog, options, fleet, stream, window_start, window_end),
        in_four_(static_cast<size_t>(options.ultraservers)),
        in_two_(static_cast<size_t>(2 * options.ultraservers)) {}

 protected:
  Status OnMemberArrived(int job, int member) override {
    TOPOSCHED_ASSIGN_OR_RETURN(const bool placed, TryPlace(job, member));
    if (!placed) waiting_.emplace_back(job, member);
    return OkStatus();
  }

  void OnGangLeft(int job) override {
    GangRun& run = runs_[static_cast<size_t>(job)];
    for (int& node : run.member_node) {
      if (node >= 0) Unregister(job, node);
      node = -1;
    }
    run.group = -1;
  }

  Status Retry() override {
    failed_.Clear();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const auto [job, member] = *it;
      const GangJob& spec = stream_[static_cast<size_t>(job)];
      // A member whose gang has no node yet may go anywhere its shape fits: one that failed
      // stands for all of them. Members tied to a group are tried one by one.
      const bool free_choice = runs_[static_cast<size_t>(job)].group < 0;
      if (free_choice && failed_.Covers(spec.size, spec.devices)) {
        ++it;
        continue;
      }
      TOPOSCHED_ASSIGN_OR_RETURN(const bool placed, TryPlace(job, member));
      if (placed) {
        it = waiting_.erase(it);
      } else {
        if (free_choice) failed_.Add(spec.size, spec.devices);
        ++it;
      }
    }
    return OkStatus();
  }

 private:
  // Which nodes the member may go to under AWS's rules: an UltraServer node (the nodeSelector),
  // not one with a member of its own gang (one worker per node), in the group its gang's placed
  // members are in (required pod affinity on server-id-N), in a group with no other job's
  // workers (its own anti-affinity on server-id-N) and not where another job's anti-affinity
  // forbids it (kube-scheduler checks existing pods' terms too).
  std::vector<std::string> Candidates(int job) const {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    const GangRun& run = runs_[static_cast<size_t>(job)];
    std::vector<std::string> out;
    for (size_t i = 0; i < fleet_.names.size(); ++i) {
      const int four = fleet_.four[i];
      if (four < 0) continue;
      const int two = fleet_.two[i];
      const int group = spec.size == 4 ? four : two;
      if (run.group >= 0 && group != run.group) continue;
      if (std::find(run.member_node.begin(), run.member_node.end(), static_cast<int>(i)) !=
          run.member_node.end()) {
        continue;
      }
      if (spec.size == 4 && HasOther(in_four_[static_cast<size_t>(four)], job, 0)) continue;
      if (spec.size == 2 && (HasOther(in_two_[static_cast<size_t>(two)], job, 0) ||
                             HasOther(in_four_[static_cast<size_t>(four)], job, 4))) {
        continue;
      }
      out.push_back(fleet_.names[i]);
    }
    return out;
  }

  // Does the group hold workers of a job other than `job` (of that size, when size > 0)?
  bool HasOther(const std::map<int, int>& workers, int job, int size) const {
    for (const auto& [other, count] : workers) {
      if (other == job || count == 0) continue;
      if (size == 0 || stream_[static_cast<size_t>(other)].size == size) return true;
    }
    return false;
  }

  Result<bool> TryPlace(int job, int member) {
    const GangJob& spec = stream_[static_cast<size_t>(job)];
    const std::vector<std::string> candidates = Candidates(job);
    if (candidates.empty()) return false;
    const tracker::PodSpec pod = MemberPod(job, member, spec.devices);
    const tracker::Ranking ranking = tracker_.Rank(pod, candidates);
    if (ranking.best < 0) return false;
    const std::string& name = candidates[static_cast<size_t>(ranking.best)];
    TOPOSCHED_RETURN_IF_ERROR(BindPod(tracker_, pod, name, now_));
    const auto node = static_cast<int>(std::find(fleet_.names.begin(), fleet_.names.end(), name) -
                                       fleet_.names.begin());
    GangRun& run = runs_[static_cast<size_t>(job)];
    run.member_node[static_cast<size_t>(member)] = node;
    run.group = spec.size == 4 ? fleet_.four[static_cast<size_t>(node)]
                               : fleet_.two[static_cast<size_t>(node)];
    ++in_four_[static_cast<size_t>(fleet_.four[static_cast<size_t>(node)])][job];
    ++in_two_[static_cast<size_t>(fleet_.two[static_cast<size_t>(node)])][job];
    MembersPlaced(job, 1, 1);
    return true;
  }

  void Unregister(int job, int node) {
    auto drop = [job](std::map<int, int>& workers) {
      if (--workers[job] <= 0) workers.erase(job);
    };
    drop(in_four_[static_cast<size_t>(fleet_.four[static_cast<size_t>(node)])]);
    drop(in_two_[static_cast<size_t>(fleet_.two[static_cast<size_t>(node)])]);
  }

  // Per UltraServer and per half: the jobs with workers there, and how many.
  std::vector<std::map<int, int>> in_four_;
  std::vector<std::map<int, int>> in_two_;
  std::deque<std::pair<int, int>> waiting_;  // (job, member), in arrival order
  FailedShapes failed_;
};

// Uniform in (0, 1) from the generator's raw output.
double Uniform(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

double Exponential(std::mt19937_64& rng, double mean) { return -std::log(Uniform(rng)) * mean; }

Status Validate(const GangSimOptions& options) {
  if (options.ultraservers < 1 || options.ultraservers > 10'000) {
    return Error{fmt::format("--ultraservers must be 1 to 10000, not {}", options.ultraservers)};
  }
  if (options.plain_nodes < 0 || options.plain_nodes > 100'000) {
    return Error{fmt::format("--plain-nodes must be 0 to 100000, not {}", options.plain_nodes)};
  }
  if (options.stream.empty() && (options.jobs < 1 || options.jobs > 1'000'000)) {
    return Error{fmt::format("--gang-jobs must be 1 to 1000000, not {}", options.jobs)};
  }
  if (!(options.load > 0 && options.load <= 10)) {
    return Error{fmt::format("--gang-load must be above 0 and at most 10, not {}", options.load)};
  }
  if (options.timeout_s < 1) return Error{"--gang-timeout must be at least 1 second"};
  if (options.stream.empty() && options.mix.spread_s >= static_cast<double>(options.timeout_s)) {
    return Error{fmt::format(
        "a gang's members arrive over {} s, which must be shorter than the timeout ({} s)",
        options.mix.spread_s, options.timeout_s)};
  }
  for (size_t j = 0; j < options.stream.size(); ++j) {
    const GangJob& job = options.stream[j];
    if (job.size != 1 && job.size != 2 && job.size != 4) {
      return Error{fmt::format("job {}: size {} is not 1, 2 or 4", j, job.size)};
    }
    if (static_cast<int>(job.arrival_ns.size()) != job.size) {
      return Error{
          fmt::format("job {}: {} arrivals for {} pods", j, job.arrival_ns.size(), job.size)};
    }
    if (!std::is_sorted(job.arrival_ns.begin(), job.arrival_ns.end()) ||
        job.arrival_ns.back() - job.arrival_ns.front() >= options.timeout_s * 1'000'000'000) {
      return Error{fmt::format(
          "job {}: its members' arrivals must be ascending and span less than the timeout", j)};
    }
    if (job.devices < 1 || job.devices > 16 || job.duration_ns < 0) {
      return Error{fmt::format("job {}: devices 1..16 and a duration of at least 0", j)};
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<GangJob> GenerateGangStream(const GangSimOptions& options, int fleet_devices) {
  const GangMix& mix = options.mix;
  std::mt19937_64 rng(options.seed);
  double single_weight = 0;
  double single_devices = 0;
  for (const auto& [devices, weight] : mix.single_sizes) {
    single_weight += weight;
    single_devices += devices * weight;
  }
  if (single_weight > 0) single_devices /= single_weight;
  const double total = mix.four_node + mix.two_node + mix.single;
  const double member_devices = 16 * (1 - mix.member_half) + 8 * mix.member_half;
  // Mean device-hours one job brings; the gap makes the offered load `options.load`.
  const double device_hours = (mix.four_node * 4 * member_devices * mix.gang_mean_hours +
                               mix.two_node * 2 * member_devices * mix.gang_mean_hours +
                               mix.single * single_devices * mix.single_mean_hours) /
                              total;
  const double mean_gap_s = device_hours * 3600.0 / (options.load * fleet_devices);
  std::vector<GangJob> stream;
  stream.reserve(static_cast<size_t>(options.jobs));
  double now_s = 0;
  for (int k = 0; k < options.jobs; ++k) {
    now_s += Exponential(rng, mean_gap_s);
    GangJob job;
    const double pick = Uniform(rng) * total;
    job.size = pick < mix.four_node ? 4 : pick < mix.four_node + mix.two_node ? 2 : 1;
    if (job.size > 1) {
      job.devices = Uniform(rng) < mix.member_half ? 8 : 16;
      job.duration_ns = static_cast<int64_t>(Exponential(rng, mix.gang_mean_hours * 3600) * 1e9);
      job.arrival_ns.push_back(static_cast<int64_t>(now_s * 1e9));
      for (int m = 1; m < job.size; ++m) {
        job.arrival_ns.push_back(static_cast<int64_t>((now_s + Uniform(rng) * mix.spread_s) * 1e9));
      }
      std::sort(job.arrival_ns.begin(), job.arrival_ns.end());
    } else {
      double size_pick = Uniform(rng) * single_weight;
      job.devices = mix.single_sizes.back().first;
      for (const auto& [devices, weight] : mix.single_sizes) {
        if (size_pick < weight) {
          job.devices = devices;
          break;
        }
        size_pick -= weight;
      }
      job.duration_ns = static_cast<int64_t>(Exponential(rng, mix.single_mean_hours * 3600) * 1e9);
      job.arrival_ns.push_back(static_cast<int64_t>(now_s * 1e9));
    }
    stream.push_back(std::move(job));
  }
  return stream;
}

Result<GangSimResult> SimulateGangs(const topology::Catalog& catalog,
                                    const GangSimOptions& options) {
  TOPOSCHED_RETURN_IF_ERROR(Validate(options));
  TOPOSCHED_ASSIGN_OR_RETURN(const Fleet fleet, BuildFleet(catalog, options));
  const std::vector<GangJob> stream =
      options.stream.empty() ? GenerateGangStream(options, fleet.devices) : options.stream;
  GangSimResult result;
  result.ultraservers = options.ultraservers;
  result.plain_nodes = options.plain_nodes;
  result.nodes = static_cast<int>(fleet.nodes.size());
  result.devices = fleet.devices;
  result.seed = options.seed;
  result.timeout_s = options.timeout_s;
  result.load = options.load;
  result.jobs = static_cast<int>(stream.size());
  int64_t first = 0;
  int64_t last = 0;
  bool any = false;
  for (const GangJob& job : stream) {
    (job.size == 4 ? result.gangs_four : job.size == 2 ? result.gangs_two : result.singles)++;
    for (int64_t t : job.arrival_ns) {
      first = any ? std::min(first, t) : t;
      last = any ? std::max(last, t) : t;
      any = true;
    }
  }
  result.arrival_window_hours = static_cast<double>(last - first) / kNsPerHour;

  AllOrNothing whole(catalog, options, fleet, stream, first, last);
  TOPOSCHED_RETURN_IF_ERROR(whole.Setup());
  TOPOSCHED_ASSIGN_OR_RETURN(auto a, whole.Run("all-or-nothing"));
  result.strategies.push_back(std::move(a));
  PodByPod apart(catalog, options, fleet, stream, first, last);
  TOPOSCHED_RETURN_IF_ERROR(apart.Setup());
  TOPOSCHED_ASSIGN_OR_RETURN(auto b, apart.Run("pod-by-pod"));
  result.strategies.push_back(std::move(b));
  const auto& ws = result.strategies[0].outcomes;
  const auto& ps = result.strategies[1].outcomes;
  for (size_t i = 0; i < ws.size() && i < ps.size(); ++i) {
    if (ws[i].wait_s > ps[i].wait_s + 60) ++result.longer_all_or_nothing;
    if (ps[i].wait_s > ws[i].wait_s + 60) ++result.longer_pod_by_pod;
  }
  return result;
}

namespace {

std::string Minutes(double s) { return fmt::format("{:.1f} min", s / 60.0); }

}  // namespace

std::string FormatGangTable(const GangSimResult& r) {
  std::string out = fmt::format(
      "Gangs on {} UltraServers ({} trn2u.48xlarge nodes){}, {} devices; seed {}, offered load "
      "{:.0f}%\n"
      "Stream: {} jobs over {:.1f} h: {} 4-node gangs, {} 2-node gangs, {} single pods. "
      "Deadlocked: partly placed, with a member waiting for a node, for more than {} s.\n\n",
      r.ultraservers, r.ultraservers * 4,
      r.plain_nodes > 0 ? fmt::format(" + {} trn2.48xlarge", r.plain_nodes) : std::string(),
      r.devices, r.seed, 100 * r.load, r.jobs, r.arrival_window_hours, r.gangs_four, r.gangs_two,
      r.singles, r.timeout_s);
  constexpr int kLabel = 46;
  constexpr int kCol = 16;
  out += fmt::format("{:<{}}", "", kLabel);
  for (const auto& s : r.strategies) out += fmt::format("{:>{}}", s.name, kCol);
  out += '\n';
  auto row = [&](std::string_view label,
                 const std::function<std::string(const GangStrategyResult&)>& cell) {
    out += fmt::format("{:<{}}", label, kLabel);
    for (const auto& s : r.strategies) out += fmt::format("{:>{}}", cell(s), kCol);
    out += '\n';
  };
  row("gangs completed",
      [](const auto& s) { return fmt::format("{} of {}", s.gangs_completed, s.gangs); });
  row("gangs deadlocked", [](const auto& s) { return fmt::format("{}", s.gangs_deadlocked); });
  row("gangs ever stuck partly placed",
      [](const auto& s) { return fmt::format("{}", s.gangs_stuck); });
  row("node-hours stranded by partial gangs",
      [](const auto& s) { return fmt::format("{:.1f}", s.stranded_node_hours); });
  row("most nodes stranded at once",
      [](const auto& s) { return fmt::format("{}", s.max_stranded_nodes); });
  row("node-hours held by gangs before they run",
      [](const auto& s) { return fmt::format("{:.1f}", s.held_before_run_node_hours); });
  row("gang wait, mean", [](const auto& s) { return Minutes(s.wait.mean_s); });
  row("gang wait, p95", [](const auto& s) { return Minutes(s.wait.p95_s); });
  row("gang wait, max", [](const auto& s) { return Minutes(s.wait.max_s); });
  row("2-node gang wait, mean / p95 (min)", [](const auto& s) {
    return fmt::format("{:.1f} / {:.1f}", s.wait_two.mean_s / 60, s.wait_two.p95_s / 60);
  });
  row("4-node gang wait, mean / p95 (min)", [](const auto& s) {
    return fmt::format("{:.1f} / {:.1f}", s.wait_four.mean_s / 60, s.wait_four.p95_s / 60);
  });
  row("single pods placed", [](const auto& s) { return fmt::format("{}", s.singles_placed); });
  row("single pods rejected", [](const auto& s) { return fmt::format("{}", s.singles_rejected); });
  row("allocated share, mean",
      [](const auto& s) { return fmt::format("{:.1f}%", 100 * s.mean_allocated_share); });
  row("running share, mean",
      [](const auto& s) { return fmt::format("{:.1f}%", 100 * s.mean_running_share); });
  out += fmt::format(
      "\nGangs that waited over a minute longer: {} under all-or-nothing, {} under pod-by-pod.\n"
      "Shares are time-weighted over the arrival window; 'running' leaves out devices held by\n"
      "gangs not yet running. Definitions: docs/simulator.md, \"Gangs\".\n",
      r.longer_all_or_nothing, r.longer_pod_by_pod);
  return out;
}

std::string FormatGangJson(const GangSimResult& r) {
  auto wait = [](const WaitStats& w) -> JsonTree {
    return {{"gangs", w.gangs},
            {"mean_s", JsonRounded(w.mean_s, 1)},
            {"p95_s", JsonRounded(w.p95_s, 1)},
            {"max_s", JsonRounded(w.max_s, 1)}};
  };
  JsonTree strategies = JsonTree::array();
  for (const auto& s : r.strategies) {
    strategies.push_back(
        {{"name", s.name},
         {"gangs", s.gangs},
         {"gangs_completed", s.gangs_completed},
         {"gangs_deadlocked", s.gangs_deadlocked},
         {"gangs_stuck", s.gangs_stuck},
         {"stranded_node_hours", JsonRounded(s.stranded_node_hours, 3)},
         {"max_stranded_nodes", s.max_stranded_nodes},
         {"held_before_run_node_hours", JsonRounded(s.held_before_run_node_hours, 3)},
         {"wait", wait(s.wait)},
         {"wait_two", wait(s.wait_two)},
         {"wait_four", wait(s.wait_four)},
         {"singles_placed", s.singles_placed},
         {"singles_rejected", s.singles_rejected},
         {"mean_allocated_share", JsonRounded(s.mean_allocated_share, 4)},
         {"mean_running_share", JsonRounded(s.mean_running_share, 4)}});
  }
  const JsonTree out = {{"mode", "gangs"},
                        {"ultraservers", r.ultraservers},
                        {"plain_nodes", r.plain_nodes},
                        {"nodes", r.nodes},
                        {"devices", r.devices},
                        {"seed", r.seed},
                        {"load", r.load},
                        {"timeout_s", r.timeout_s},
                        {"jobs", r.jobs},
                        {"gangs_four", r.gangs_four},
                        {"gangs_two", r.gangs_two},
                        {"singles", r.singles},
                        {"arrival_window_hours", JsonRounded(r.arrival_window_hours, 4)},
                        {"longer_all_or_nothing", r.longer_all_or_nothing},
                        {"longer_pod_by_pod", r.longer_pod_by_pod},
                        {"strategies", std::move(strategies)}};
  return WriteJson(out) + "\n";
}

}  // namespace toposched::sim
