// Property tests of the tracker: long random sequences of every operation over nodes of mixed
// types, checked after every step against an independent model kept here; and a concurrency
// test that several threads never double-book.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/legality_oracle.h"
#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/id_ranges.h"
#include "tracker/tracker.h"

namespace toposched::tracker {
namespace {

using topology::Catalog;
using topology::CoreBits;
using topology::DeviceMask;
using topology::FormatIdRanges;
using topology::NodeShape;
// The independent model of the rules every answer is checked against.
using ::toposched::testing::CoresCovered;
using ::toposched::testing::DevicesOfCores;
using ::toposched::testing::WhyIllegal;

struct NodeDef {
  const char* name;
  const char* type;
  int lnc;
};
const NodeDef kNodes[] = {
    {"inf2", "inf2.48xlarge", 0},      {"trn1", "trn1.32xlarge", 0}, {"trn2", "trn2.48xlarge", 0},
    {"trn2-lnc1", "trn2.48xlarge", 1}, {"inf1", "inf1.6xlarge", 0},
};

NodeShape ShapeFor(const NodeDef& n) {
  return NodeShape::Make(*Catalog::Embedded().Find(n.type), n.lnc).value();
}

// The cores a pod's sets cover, computed independently of the allocator.
CoreBits FootprintOf(const NodeShape& shape, const PodAllocation& a) {
  CoreBits bits;
  for (const auto& c : a.containers) bits |= CoresCovered(shape, c.placement);
  return bits;
}

struct ModelHold {
  std::string node;
  HoldState state = HoldState::kReserved;
  int64_t deadline = 0;
  PodAllocation allocation;
};

class Harness {
 public:
  explicit Harness(uint32_t seed) : rng_(seed) {
    for (const auto& n : kNodes) {
      EXPECT_TRUE(tracker_.UpsertNode({n.name, n.type, n.lnc}).ok());
      shapes_.emplace(n.name, ShapeFor(n));
      names_.push_back(n.name);
    }
  }

  void Run(int ops) {
    for (int i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
      step_ = i;
      const unsigned r = Rand(100);
      if (r < 32) {
        DoReserve();
      } else if (r < 45) {
        DoCommit();
      } else if (r < 53) {
        DoRollback();
      } else if (r < 63) {
        DoForget();
      } else if (r < 71) {
        DoExpire();
      } else if (r < 74) {
        DoRebuild();
      } else if (r < 81) {
        DoAdopt();
      } else {
        DoQueries();
      }
      CheckInvariants();
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at step " << i;
        return;
      }
    }
    ForgetEverything();
  }

  int reserves_ok = 0;
  int reserves_refused = 0;
  int victims_found = 0;

 private:
  unsigned Rand(unsigned n) { return static_cast<unsigned>(rng_() % n); }
  std::string NewUid() { return "pod-" + std::to_string(next_uid_++); }
  const std::string& RandomNode() { return names_[Rand(static_cast<unsigned>(names_.size()))]; }
  // A uid from the model, or sometimes one nobody holds.
  std::string RandomUid() {
    if (model_.empty() || Rand(8) == 0) return "ghost-" + std::to_string(Rand(5));
    auto it = model_.begin();
    std::advance(it, Rand(static_cast<unsigned>(model_.size())));
    return it->first;
  }

  Request RandomRequest(const NodeShape& shape) {
    const bool devices = Rand(10) < 6;
    const int total = devices ? shape.devices : shape.cores;
    int count;
    switch (Rand(6)) {
      case 0:
        count = 1;
        break;
      case 1:
        count = std::min(total, 1 << Rand(5));  // 1, 2, 4, 8, 16
        break;
      case 2:
        count = 1 + static_cast<int>(Rand(static_cast<unsigned>(total)));
        break;
      case 3:
        count = 1 + static_cast<int>(Rand(static_cast<unsigned>(std::max(1, total / 4))));
        break;
      case 4:
        count = Rand(20) == 0 ? total + 1 : 2;
        break;
      default:
        count = 1 + static_cast<int>(Rand(3));
    }
    return Request{devices ? Unit::kDevice : Unit::kCore, count};
  }

  PodSpec RandomPod(const NodeShape& shape) {
    PodSpec pod;
    pod.uid = NewUid();
    pod.name = "ns/" + pod.uid;
    const int containers = Rand(4) == 0 ? 2 + static_cast<int>(Rand(2)) : 1;
    for (int i = 0; i < containers; ++i) {
      ContainerRequest c;
      c.name = "c" + std::to_string(i);
      c.request = RandomRequest(shape);
      c.init = i > 0 && Rand(3) == 0;
      if (Rand(30) == 0) c.request.count = 0;  // asks for nothing
      pod.containers.push_back(c);
    }
    return pod;
  }

  std::string State() const {
    std::string out;
    for (const auto& name : names_) {
      auto snap = tracker_.Snapshot(name);
      if (!snap) return "no snapshot of " + name;
      auto pods = snap->pod_uids;
      std::sort(pods.begin(), pods.end());
      out += name + ":" + std::to_string(std::hash<CoreBits>{}(snap->usage.used_cores())) + ":" +
             std::to_string(snap->usage.used_core_count()) + ":" +
             std::to_string(snap->usage.busy_devices());
      for (const auto& p : pods) out += "," + p;
      out += "\n";
    }
    const TrackerStats s = tracker_.Stats();
    out += std::to_string(s.nodes) + "/" + std::to_string(s.reserved) + "/" +
           std::to_string(s.committed);
    return out;
  }

  void CheckAllocationLegal(const PodSpec& pod, const PodAllocation& a) {
    const NodeShape& shape = shapes_.at(a.node);
    size_t asked = 0;
    for (const auto& c : pod.containers) asked += c.request.count != 0 ? 1 : 0;
    ASSERT_EQ(a.containers.size(), asked) << "one set per container that asked";
    CoreBits apps;
    for (const auto& ca : a.containers) {
      const auto it =
          std::find_if(pod.containers.begin(), pod.containers.end(),
                       [&](const ContainerRequest& c) { return c.name == ca.container; });
      ASSERT_NE(it, pod.containers.end()) << ca.container;
      EXPECT_EQ(ca.placement.unit, it->request.unit) << ca.container;
      EXPECT_EQ(static_cast<int>(ca.placement.ids.size()), it->request.count) << ca.container;
      const std::string why = WhyIllegal(shape, ca.placement);
      EXPECT_EQ(why, "") << a.node << " " << ca.container << " "
                         << topology::UnitName(ca.placement.unit, 2) << " "
                         << FormatIdRanges(ca.placement.ids);
      if (!it->init) {
        const CoreBits mine = CoresCovered(shape, ca.placement);
        EXPECT_FALSE((mine & apps).any()) << "two app containers share ids";
        apps |= mine;
      }
    }
  }

  void DoReserve() {
    const std::string& node = RandomNode();
    const NodeShape& shape = shapes_.at(node);
    PodSpec pod = RandomPod(shape);
    if (!model_.empty() && Rand(25) == 0) {  // a uid that already holds ids
      pod.uid = RandomUid();
      if (model_.count(pod.uid) != 0) {
        const std::string before = State();
        EXPECT_FALSE(tracker_.Reserve(pod, node, now_ + 10).ok());
        EXPECT_EQ(State(), before);
        return;
      }
    }
    const FitResult fit = tracker_.Fit(pod, node);
    const std::string before = State();
    const int64_t deadline = now_ + 1 + static_cast<int64_t>(Rand(60));
    auto r = tracker_.Reserve(pod, node, deadline);
    ASSERT_EQ(r.ok(), fit.fits) << "Fit and Reserve disagree: "
                                << (r.ok() ? fit.reason : r.error());
    if (!r.ok()) {
      ++reserves_refused;
      EXPECT_EQ(State(), before) << "a refused Reserve changed state";
      return;
    }
    ++reserves_ok;
    EXPECT_EQ(r->node, node);
    ASSERT_EQ(r->containers.size(), fit.allocation.containers.size());
    for (size_t i = 0; i < r->containers.size(); ++i) {
      EXPECT_EQ(r->containers[i].placement.ids, fit.allocation.containers[i].placement.ids);
    }
    CheckAllocationLegal(pod, r.value());
    // Disjoint from every other live hold on the node (checked again in CheckInvariants).
    const CoreBits mine = FootprintOf(shape, r.value());
    for (const auto& [uid, hold] : model_) {
      if (hold.node != node) continue;
      EXPECT_FALSE((FootprintOf(shape, hold.allocation) & mine).any())
          << pod.uid << " got ids held by " << uid;
    }
    model_[pod.uid] = ModelHold{node, HoldState::kReserved, deadline, r.value()};
  }

  void DoCommit() {
    const std::string uid = RandomUid();
    auto it = model_.find(uid);
    const Status s = tracker_.Commit(uid);
    if (it == model_.end()) {
      EXPECT_FALSE(s.ok()) << "committed " << uid << " which holds nothing";
      return;
    }
    if (it->second.state == HoldState::kCommitted) {
      EXPECT_FALSE(s.ok()) << "committed " << uid << " twice";
      return;
    }
    EXPECT_TRUE(s.ok()) << s.error();
    it->second.state = HoldState::kCommitted;
    it->second.deadline = 0;
  }

  void DoRollback() {
    const std::string uid = RandomUid();
    auto it = model_.find(uid);
    const std::string before = State();
    const Status s = tracker_.Rollback(uid);
    if (it == model_.end() || it->second.state == HoldState::kCommitted) {
      EXPECT_FALSE(s.ok()) << "rolled back " << uid;
      EXPECT_EQ(State(), before);
      return;
    }
    EXPECT_TRUE(s.ok()) << s.error();
    model_.erase(it);
  }

  void DoForget() {
    const std::string uid = RandomUid();
    const bool held = model_.count(uid) != 0;
    EXPECT_EQ(tracker_.Forget(uid), held) << uid;
    model_.erase(uid);
  }

  void DoExpire() {
    now_ += static_cast<int64_t>(Rand(25));
    std::vector<std::string> expected;
    for (const auto& [uid, hold] : model_) {
      if (hold.state == HoldState::kReserved && hold.deadline <= now_) expected.push_back(uid);
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(tracker_.ExpireReservations(now_).pods, expected);
    for (const auto& uid : expected) model_.erase(uid);
  }

  void DoRebuild() {
    std::vector<RecordedPod> records;
    int reserved = 0;
    for (const auto& [uid, hold] : model_) {
      if (hold.state == HoldState::kCommitted) {
        records.push_back(RecordedPod{uid, "ns/" + uid, hold.allocation});
      } else {
        ++reserved;
      }
    }
    std::shuffle(records.begin(), records.end(), rng_);
    // Sometimes a stale record claiming another pod's ids, listed after it.
    std::string intruder;
    std::string victim;
    const size_t pick = records.empty() ? 0 : Rand(static_cast<unsigned>(records.size()));
    // A pod that asked for nothing holds no ids, so nothing can conflict with it.
    const bool inject =
        !records.empty() && Rand(2) == 0 &&
        FootprintOf(shapes_.at(records[pick].allocation.node), records[pick].allocation).any();
    if (inject) {
      const RecordedPod original = records[pick];
      victim = original.uid;
      intruder = NewUid();
      records.push_back(RecordedPod{intruder, "ns/" + intruder, original.allocation});
    }
    const bool keep = Rand(2) == 0;
    const RebuildReport report = tracker_.Rebuild(records, keep);
    EXPECT_EQ(report.applied, static_cast<int>(records.size()) - (inject ? 1 : 0));
    EXPECT_EQ(report.reservations_kept, keep ? reserved : 0);
    if (inject) {
      ASSERT_EQ(report.problems.size(), 1u);
      EXPECT_EQ(report.problems[0].uid, intruder);
      EXPECT_EQ(report.problems[0].conflicting_uids, std::vector<std::string>{victim});
    } else {
      EXPECT_TRUE(report.problems.empty()) << report.problems.front().message;
    }
    if (!keep) {
      for (auto it = model_.begin(); it != model_.end();) {
        it = it->second.state == HoldState::kReserved ? model_.erase(it) : std::next(it);
      }
    }
  }

  void DoAdopt() {
    const std::string& node = RandomNode();
    const NodeShape& shape = shapes_.at(node);
    std::vector<std::string> here;
    for (const auto& [uid, hold] : model_) {
      if (hold.node == node && FootprintOf(shape, hold.allocation).any()) here.push_back(uid);
    }
    if (!here.empty() && Rand(3) == 0) {
      // Another replica's record that overlaps a live hold: refused, naming the holder.
      const std::string& holder = here[Rand(static_cast<unsigned>(here.size()))];
      const std::string uid = NewUid();
      const std::string before = State();
      const Status s = tracker_.Adopt(RecordedPod{uid, "ns/" + uid, model_.at(holder).allocation});
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.error().find(holder), std::string::npos) << s.error();
      EXPECT_EQ(State(), before);
      return;
    }
    const PodSpec pod = RandomPod(shape);
    const FitResult fit = tracker_.Fit(pod, node);
    if (!fit.fits) return;
    const Status s = tracker_.Adopt(RecordedPod{pod.uid, pod.name, fit.allocation});
    ASSERT_TRUE(s.ok()) << s.error();
    model_[pod.uid] = ModelHold{node, HoldState::kCommitted, 0, fit.allocation};
  }

  void DoQueries() {
    const std::string before = State();
    const std::string& node = RandomNode();
    const NodeShape& shape = shapes_.at(node);
    const PodSpec pod = RandomPod(shape);
    std::vector<std::string> on_node;
    std::vector<std::string> some;
    for (const auto& [uid, hold] : model_) {
      if (hold.node == node) on_node.push_back(uid);
      if (Rand(3) == 0) some.push_back(uid);
    }
    const FitResult fit = tracker_.Fit(pod, node);
    if (fit.fits) CheckAllocationLegal(pod, fit.allocation);
    const auto all = tracker_.FitAll(pod, names_);
    ASSERT_EQ(all.size(), names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == node) {
        EXPECT_EQ(all[i].fits, fit.fits);
        EXPECT_EQ(all[i].reason, fit.reason);
      }
    }
    const FitResult without = tracker_.FitWithout(pod, node, some);
    if (without.fits) CheckAllocationLegal(pod, without.allocation);
    if (fit.fits) {
      EXPECT_TRUE(without.fits) << "removing pods made it not fit: " << without.reason;
    }
    const FitResult without_all = tracker_.FitWithout(pod, node, on_node);
    auto victims = tracker_.FewestVictims(pod, node, on_node);
    EXPECT_EQ(victims.ok(), without_all.fits)
        << (victims.ok() ? without_all.reason : victims.error());
    if (victims.ok()) {
      ++victims_found;
      if (fit.fits) {
        EXPECT_TRUE(victims->empty());
      }
      for (const auto& v : victims.value()) {
        EXPECT_NE(std::find(on_node.begin(), on_node.end(), v), on_node.end()) << v;
      }
      EXPECT_TRUE(tracker_.FitWithout(pod, node, victims.value()).fits)
          << "the victims FewestVictims chose do not make room";
    }
    EXPECT_EQ(State(), before) << "a what-if query changed state";
  }

  void CheckInvariants() {
    int reserved = 0;
    int committed = 0;
    for (const auto& [uid, hold] : model_)
      (hold.state == HoldState::kReserved ? reserved : committed)++;
    const TrackerStats stats = tracker_.Stats();
    EXPECT_EQ(stats.reserved, reserved);
    EXPECT_EQ(stats.committed, committed);
    EXPECT_EQ(stats.nodes, static_cast<int>(names_.size()));
    for (const auto& name : names_) {
      const NodeShape& shape = shapes_.at(name);
      auto snap = tracker_.Snapshot(name);
      ASSERT_TRUE(snap.has_value()) << name;
      CoreBits expected;
      std::vector<std::string> uids;
      for (const auto& [uid, hold] : model_) {
        if (hold.node != name) continue;
        const CoreBits mine = FootprintOf(shape, hold.allocation);
        ASSERT_FALSE((mine & expected).any()) << uid << " shares ids with another pod on " << name;
        expected |= mine;
        uids.push_back(uid);
      }
      ASSERT_EQ(snap->usage.used_cores(), expected)
          << name << ": tracker uses " << snap->usage.used_cores().count() << " cores, model "
          << expected.count();
      EXPECT_EQ(snap->usage.busy_devices(), DevicesOfCores(shape, expected)) << name;
      auto pods = snap->pod_uids;
      std::sort(pods.begin(), pods.end());
      EXPECT_EQ(pods, uids) << name;
    }
    for (const auto& [uid, hold] : model_) {
      auto found = tracker_.Find(uid);
      ASSERT_TRUE(found.has_value()) << uid;
      EXPECT_EQ(found->state, hold.state) << uid;
      EXPECT_EQ(found->allocation.node, hold.node) << uid;
      if (hold.state == HoldState::kReserved) {
        EXPECT_EQ(found->deadline_ns, hold.deadline) << uid;
      }
    }
  }

  void ForgetEverything() {
    std::vector<std::string> uids;
    for (const auto& [uid, hold] : model_) uids.push_back(uid);
    for (const auto& uid : uids) {
      EXPECT_TRUE(tracker_.Forget(uid)) << uid;
      model_.erase(uid);
    }
    for (const auto& name : names_) {
      auto snap = tracker_.Snapshot(name);
      ASSERT_TRUE(snap.has_value());
      EXPECT_EQ(snap->usage.used_core_count(), 0) << name << " leaked cores";
      EXPECT_EQ(snap->usage.busy_devices(), DeviceMask{0}) << name << " leaked devices";
      EXPECT_TRUE(snap->pod_uids.empty()) << name;
    }
    EXPECT_EQ(tracker_.Stats().reserved, 0);
    EXPECT_EQ(tracker_.Stats().committed, 0);
  }

  std::mt19937 rng_;
  Tracker tracker_{Catalog::Embedded(), Policy::kBestFit};
  std::map<std::string, NodeShape> shapes_;
  std::vector<std::string> names_;
  std::map<std::string, ModelHold> model_;
  int64_t now_ = 0;
  int next_uid_ = 0;
  int step_ = 0;
};

TEST(TrackerProperty, RandomSequencesKeepEveryInvariant) {
  int reserves_ok = 0;
  int reserves_refused = 0;
  int victims = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Harness h(seed);
    h.Run(2000);
    if (HasFailure()) return;
    reserves_ok += h.reserves_ok;
    reserves_refused += h.reserves_refused;
    victims += h.victims_found;
  }
  // The sequences must exercise both outcomes, or they prove little.
  EXPECT_GT(reserves_ok, 5000);
  EXPECT_GT(reserves_refused, 1000);
  EXPECT_GT(victims, 1000);
}

// Several threads reserve, commit, roll back and forget on shared nodes while another asks
// what-if questions. Each successful reservation claims its cores in a shared ownership table;
// a claim that finds a core already owned is a double booking.
TEST(TrackerProperty, ConcurrentThreadsNeverDoubleBook) {
  Tracker tracker(Catalog::Embedded(), Policy::kBestFit);
  const NodeDef nodes[] = {
      {"a", "trn1.32xlarge", 0}, {"b", "inf2.48xlarge", 0}, {"c", "inf1.6xlarge", 0}};
  std::vector<NodeShape> shapes;
  for (const auto& n : nodes) {
    ASSERT_TRUE(tracker.UpsertNode({n.name, n.type, n.lnc}).ok());
    shapes.push_back(ShapeFor(n));
  }
  constexpr int kThreads = 4;
  constexpr int kOps = 4000;
  // owner[node][core]: -1 free, else the claiming thread.
  std::vector<std::vector<std::atomic<int>>> owner(3);
  for (size_t n = 0; n < 3; ++n) {
    owner[n] = std::vector<std::atomic<int>>(static_cast<size_t>(shapes[n].cores));
    for (auto& o : owner[n]) o.store(-1);
  }
  std::atomic<int> double_booked{0};
  std::atomic<int> illegal{0};
  std::atomic<int> granted{0};
  std::atomic<bool> stop{false};

  std::atomic<int> ready{0};
  auto worker = [&](int t) {
    std::mt19937 rng(static_cast<uint32_t>(1000 + t));
    // Start together, so the threads really overlap.
    ready.fetch_add(1);
    while (ready.load() < kThreads) std::this_thread::yield();
    struct Mine {
      std::string uid;
      size_t node;
      CoreBits cores;
    };
    std::vector<Mine> held;
    auto release = [&](const Mine& m) {
      for (int c = 0; c < shapes[m.node].cores; ++c) {
        if (m.cores.test(static_cast<size_t>(c))) owner[m.node][static_cast<size_t>(c)].store(-1);
      }
    };
    for (int i = 0; i < kOps; ++i) {
      const unsigned r = rng() % 10;
      if (r < 5 || held.empty()) {
        const size_t n = rng() % 3;
        const NodeShape& shape = shapes[n];
        PodSpec pod;
        pod.uid = "t" + std::to_string(t) + "-" + std::to_string(i);
        pod.name = pod.uid;
        const int containers = 1 + static_cast<int>(rng() % 2);
        for (int k = 0; k < containers; ++k) {
          const bool dev = rng() % 2 == 0;
          const int options[] = {1, 1, 2, 4, 8};
          int count = options[rng() % 5];
          count = std::min(count, dev ? shape.devices : shape.cores);
          pod.containers.push_back(
              {"c" + std::to_string(k), Request{dev ? Unit::kDevice : Unit::kCore, count}, false});
        }
        auto res = tracker.Reserve(pod, nodes[n].name, 1'000'000);
        if (!res.ok()) continue;
        granted.fetch_add(1);
        for (const auto& c : res->containers) {
          if (!WhyIllegal(shape, c.placement).empty()) illegal.fetch_add(1);
        }
        const CoreBits cores = FootprintOf(shape, res.value());
        for (int c = 0; c < shape.cores; ++c) {
          if (!cores.test(static_cast<size_t>(c))) continue;
          int expected = -1;
          if (!owner[n][static_cast<size_t>(c)].compare_exchange_strong(expected, t)) {
            double_booked.fetch_add(1);
          }
        }
        held.push_back({pod.uid, n, cores});
        if (rng() % 2 == 0) {
          EXPECT_TRUE(tracker.Commit(pod.uid).ok());
        }
      } else {
        const size_t k = rng() % held.size();
        const Mine m = held[k];
        held.erase(held.begin() + static_cast<long>(k));
        // Give up the claim before the tracker frees the ids, so nobody can be granted them
        // while we still claim them.
        release(m);
        if (rng() % 2 == 0) {
          EXPECT_TRUE(tracker.Forget(m.uid));
        } else if (!tracker.Rollback(m.uid).ok()) {  // committed: forget instead
          EXPECT_TRUE(tracker.Forget(m.uid));
        }
      }
    }
    for (const auto& m : held) {
      release(m);
      EXPECT_TRUE(tracker.Forget(m.uid));
    }
  };
  auto reader = [&] {
    std::mt19937 rng(7);
    const std::vector<std::string> names = {"a", "b", "c"};
    while (!stop.load()) {
      PodSpec pod{"reader", "reader", {{"c", Request{Unit::kDevice, 4}, false}}};
      (void)tracker.FitAll(pod, names);
      const std::string& node = names[rng() % 3];
      auto snap = tracker.Snapshot(node);
      if (snap) {
        // A snapshot is self-consistent: busy devices are exactly those with used cores.
        const DeviceMask derived = DevicesOfCores(snap->shape, snap->usage.used_cores());
        if (derived != snap->usage.busy_devices()) illegal.fetch_add(1);
        (void)tracker.FewestVictims(pod, node, snap->pod_uids);
        (void)tracker.FitWithout(pod, node, snap->pod_uids);
      }
      (void)tracker.ExpireReservations(0);  // every deadline is later: expires nothing
      (void)tracker.Stats();
    }
  };

  std::vector<std::thread> threads;
  std::thread read_thread(reader);
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  stop.store(true);
  read_thread.join();

  EXPECT_EQ(double_booked.load(), 0);
  EXPECT_EQ(illegal.load(), 0);
  EXPECT_GT(granted.load(), kThreads * kOps / 10);
  const TrackerStats stats = tracker.Stats();
  EXPECT_EQ(stats.reserved, 0);
  EXPECT_EQ(stats.committed, 0);
  for (const auto& n : nodes) {
    auto snap = tracker.Snapshot(n.name);
    ASSERT_TRUE(snap.has_value());
    EXPECT_EQ(snap->usage.used_core_count(), 0) << n.name;
    EXPECT_TRUE(snap->pod_uids.empty()) << n.name;
  }
}

}  // namespace
}  // namespace toposched::tracker
