// Scarcity-aware scoring: free-slot counting per rule, the learned demand, slot costs, the set
// choice on one node, the tracker's fleet-wide supply and its node ranking.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/demand.h"
#include "topology/queue.h"
#include "tracker/tracker.h"

namespace toposched {
namespace {

using ::testing::ElementsAre;
using topology::DemandModel;
using topology::FreeSlots;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Policy;
using topology::Request;
using topology::SlotCosts;
using topology::Unit;

NodeShape Shape(const std::string& type) {
  return *NodeShape::Make(*topology::Catalog::Embedded().Find(type));
}

NodeUsage UsedDevices(const NodeShape& shape, std::vector<int> devices) {
  NodeUsage usage;
  EXPECT_TRUE(usage.Take(shape, Unit::kDevice, devices));
  return usage;
}

Request Dev(int n) { return {Unit::kDevice, n}; }
Request Core(int n) { return {Unit::kCore, n}; }

TEST(FreeSlotsTest, RingCountsEachFreeRunOnItsOwn) {
  const NodeShape inf2 = Shape("inf2.48xlarge");      // 12 devices, contiguous
  const NodeUsage usage = UsedDevices(inf2, {4, 9});  // runs 0-3, 5-8, 10-11
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(1)), 10);
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(2)), 2 + 2 + 1);
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(3)), 2);
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(4)), 2);
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(5)), 0);
  EXPECT_EQ(FreeSlots(inf2, usage, Dev(12)), 0);
  EXPECT_EQ(FreeSlots(inf2, NodeUsage{}, Dev(12)), 1);
  EXPECT_EQ(FreeSlots(inf2, NodeUsage{}, Dev(13)), 0);
}

TEST(FreeSlotsTest, TorusCountsFreeAlignedBlocksAndNeverLegalCountsAsZero) {
  const NodeShape trn1 = Shape("trn1.32xlarge");  // 16 devices, aligned 1/4/8/16
  const NodeUsage usage = UsedDevices(trn1, {5});
  EXPECT_EQ(FreeSlots(trn1, usage, Dev(4)), 3);
  EXPECT_EQ(FreeSlots(trn1, usage, Dev(8)), 1);
  EXPECT_EQ(FreeSlots(trn1, usage, Dev(16)), 0);
  EXPECT_EQ(FreeSlots(trn1, usage, Dev(2)), 0);  // never legal on the torus
  EXPECT_EQ(FreeSlots(trn1, usage, Dev(3)), 0);
}

TEST(FreeSlotsTest, CoresStayInsideTheirSegment) {
  const NodeShape trn1 = Shape("trn1.32xlarge");  // 2 cores per device
  NodeUsage usage;
  ASSERT_TRUE(usage.Take(trn1, Unit::kCore, {1, 2}));  // one core of device 0, one of device 1
  EXPECT_EQ(FreeSlots(trn1, usage, Core(1)), 30);
  // 2 cores must lie in one device on trn1: devices 0 and 1 each have one left.
  EXPECT_EQ(FreeSlots(trn1, usage, Core(2)), 14);
  const NodeShape inf2 = Shape("inf2.48xlarge");  // cores may span devices on a ring
  NodeUsage ring;
  ASSERT_TRUE(ring.Take(inf2, Unit::kCore, {1}));
  EXPECT_EQ(FreeSlots(inf2, ring, Core(2)), 0 + 11);  // core 0 alone, then cores 2-23
}

TEST(DemandModelTest, StartsFromThePriorAndLearnsWithDecay) {
  DemandModel demand(/*window=*/10, /*prior_weight=*/1);
  EXPECT_NEAR(demand.total_weight(), 1.0, 1e-9);
  const auto gen = demand.generation();
  demand.Observe(Dev(3));
  EXPECT_GT(demand.generation(), gen);  // a class the prior lacks
  for (int i = 0; i < 200; ++i) demand.Observe(Dev(3));
  double three = 0;
  for (const auto& e : demand.classes()) {
    if (e.request.unit == Unit::kDevice && e.request.count == 3) three = e.weight;
  }
  // The prior has faded: nearly all weight is on what was observed.
  EXPECT_GT(three / demand.total_weight(), 0.99);
  EXPECT_EQ(demand.observed(), 201);
  demand.Observe(Dev(0));  // nothing to learn from an empty request
  EXPECT_EQ(demand.observed(), 201);
}

TEST(DemandModelTest, ANewClassDisplacesTheLightestWhenFull) {
  DemandModel demand(100, 1);
  for (int n = 1; n <= 40; ++n) demand.Observe(Dev(n));
  EXPECT_EQ(static_cast<int>(demand.classes().size()), DemandModel::kMaxClasses);
  const auto& last = demand.classes();
  EXPECT_TRUE(std::any_of(last.begin(), last.end(), [](const auto& e) {
    return e.request.unit == Unit::kDevice && e.request.count == 40;
  }));
}

// The index of a request class in the model (the prior lists 1, 2, 4, 8, 16 devices, 1-2 cores).
size_t IndexOf(const DemandModel& demand, const Request& r) {
  const auto& classes = demand.classes();
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].request.unit == r.unit && classes[i].request.count == r.count) return i;
  }
  ADD_FAILURE() << "no class for " << r.count;
  return 0;
}

TEST(SlotCostsTest, ScarceClassesCostMoreAndUnservedOnesNothing) {
  DemandModel demand(1e12, 0);  // the prior's classes, with no weight; no decay to speak of
  demand.Observe(Dev(1));
  demand.Observe(Dev(2));
  std::vector<int64_t> supply(demand.classes().size(), 0);
  supply[IndexOf(demand, Dev(1))] = 100;
  supply[IndexOf(demand, Dev(2))] = 10;
  const SlotCosts costs = SlotCosts::From(demand, supply, 50 * topology::kUnitsPerDevice);
  ASSERT_EQ(costs.per_slot.size(), demand.classes().size());
  // The same share, a tenth of the homes: a hundred times the cost per slot.
  EXPECT_NEAR(costs.per_slot[IndexOf(demand, Dev(2))],
              100 * costs.per_slot[IndexOf(demand, Dev(1))], 1e-9);
  EXPECT_EQ(costs.per_slot[IndexOf(demand, Dev(8))], 0.0);  // never asked for
  supply[IndexOf(demand, Dev(2))] = 0;
  const SlotCosts none = SlotCosts::From(demand, supply, 0);
  EXPECT_EQ(none.per_slot[IndexOf(demand, Dev(2))], 0.0);  // nowhere left: nothing to protect
  EXPECT_EQ(none.per_unit, 0.0);
}

TEST(ScarcitySetTest, KeepsTheScarceBlockThatBestFitWouldBreak) {
  const NodeShape inf2 = Shape("inf2.48xlarge");
  // Free runs 0-3 (4 long) and 5-9 (5 long); devices 4, 10 and 11 are used.
  const NodeUsage usage = UsedDevices(inf2, {4, 10, 11});
  DemandModel demand(100, 0);
  demand.Observe(Dev(4));
  std::vector<int64_t> supply(demand.classes().size(), 0);
  supply[IndexOf(demand, Dev(4))] = 2;
  const SlotCosts costs = SlotCosts::From(demand, supply, 9 * topology::kUnitsPerDevice);
  // Best-fit takes the shortest run that fits, breaking the only whole 4-run there.
  const auto best = topology::Allocate(inf2, usage, Dev(1), Policy::kBestFit);
  EXPECT_THAT(best.placement.ids, ElementsAre(0));
  // Scarcity takes an end of the 5-run, which keeps both 4-slots. Both ends cost the same; a run's
  // start is a candidate before its end and only a strictly cheaper candidate replaces the one
  // chosen, so the start, 5.
  const auto ours = topology::Allocate(inf2, usage, Dev(1), Policy::kScarcity, &costs);
  ASSERT_TRUE(ours.ok());
  EXPECT_THAT(ours.placement.ids, ElementsAre(5));
  EXPECT_EQ(FreeSlots(
                inf2,
                [&] {
                  NodeUsage after = usage;
                  after.Take(inf2, Unit::kDevice, ours.placement.ids);
                  return after;
                }(),
                Dev(4)),
            2);
  // Without costs, scarcity chooses as best-fit does.
  EXPECT_EQ(topology::Allocate(inf2, usage, Dev(1), Policy::kScarcity).placement.ids,
            best.placement.ids);
}

TEST(ScarcitySetTest, RefusesWithTheSameReasonAsBestFit) {
  const NodeShape trn1 = Shape("trn1.32xlarge");
  DemandModel demand;
  const SlotCosts costs = SlotCosts::From(demand, std::vector<int64_t>(7, 10), 840);
  const auto ours = topology::Allocate(trn1, NodeUsage{}, Dev(3), Policy::kScarcity, &costs);
  const auto best = topology::Allocate(trn1, NodeUsage{}, Dev(3), Policy::kBestFit);
  EXPECT_FALSE(ours.ok());
  EXPECT_EQ(ours.reason, best.reason);
  EXPECT_TRUE(ours.unresolvable);
}

// The tracker keeps the fleet's supply equal to a recount, whatever happens to its holds.
TEST(TrackerSupplyTest, SupplyMatchesARecountAfterEveryChange) {
  tracker::Tracker t(topology::Catalog::Embedded(), Policy::kScarcity);
  const std::vector<std::string> types = {"inf2.48xlarge", "inf2.24xlarge", "trn1.32xlarge",
                                          "trn2.48xlarge"};
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) {
    names.push_back("n" + std::to_string(i));
    ASSERT_TRUE(t.UpsertNode({names.back(), types[i % 4], 0}).ok());
  }
  auto recount = [&] {
    const topology::DemandModel demand = t.Demand();
    std::vector<int64_t> expected(demand.classes().size(), 0);
    for (const auto& name : names) {
      auto snap = t.Snapshot(name);
      if (!snap) continue;
      for (size_t c = 0; c < expected.size(); ++c) {
        expected[c] += FreeSlots(snap->shape, snap->usage, demand.classes()[c].request);
      }
    }
    return expected;
  };
  std::mt19937 rng(7);
  const int counts[] = {1, 2, 3, 4, 8};
  std::vector<std::string> live;
  for (int step = 0; step < 300; ++step) {
    const bool cores = rng() % 4 == 0;
    tracker::PodSpec pod{"u" + std::to_string(step), "p" + std::to_string(step), {}};
    pod.containers.push_back(
        {"c", cores ? Core(1 + static_cast<int>(rng() % 2)) : Dev(counts[rng() % 5]), false});
    t.ObserveDemand(pod);
    const tracker::Ranking ranking = t.Rank(pod, names);
    if (ranking.best >= 0) {
      ASSERT_TRUE(t.Reserve(pod, names[static_cast<size_t>(ranking.best)], 1).ok());
      live.push_back(pod.uid);
    }
    if (!live.empty() && rng() % 3 == 0) {
      t.Forget(live[rng() % live.size()]);
    }
    if (step == 150) t.RemoveNode(names[3]);
    if (step % 100 == 99) {
      // A relist puts every hold back at once (it counts the supply once, at its end); it
      // lists every other pod, so the rest are gone.
      std::vector<tracker::RecordedPod> listed;
      std::vector<std::string> kept;
      for (size_t i = 0; i < live.size(); i += 2) {
        auto hold = t.Find(live[i]);
        if (!hold) continue;
        listed.push_back({live[i], hold->pod_name, hold->allocation});
        kept.push_back(live[i]);
      }
      const tracker::RebuildReport report = t.Rebuild(listed, /*keep_reservations=*/false);
      ASSERT_TRUE(report.problems.empty()) << "step " << step;
      live = kept;
    }
    ASSERT_EQ(t.Supply(), recount()) << "step " << step;
  }
}

// Queue-aware admission from the tracker's own counts (Tracker::HoldsBack): a waiting class fits
// when the fleet has a free slot of it, and the free devices are the fleet's free units.
TEST(TrackerHoldsBackTest, WeighsOnlyWaitingClassesTheFleetCanStartNow) {
  tracker::Tracker t(topology::Catalog::Embedded(), Policy::kScarcity);
  ASSERT_TRUE(t.UpsertNode({"inf", "inf2.48xlarge", 0}).ok());  // a ring of 12
  const int64_t age = topology::kHoldBackAgeNs;
  const Request big = Dev(8);
  // Four 2-device pods waiting need 8; an 8-device start leaves 4.
  std::vector<topology::WaitingClass> waiting = {{Dev(2), 4, false}, {big, 1, false}};
  topology::HoldBack verdict = t.HoldsBack(big, 0, waiting, age);
  EXPECT_TRUE(verdict.held);
  EXPECT_EQ(verdict.smaller_pods, 4);
  EXPECT_EQ(verdict.free_devices, 12);
  // Two need 4: both go.
  waiting[0].pods = 2;
  EXPECT_FALSE(t.HoldsBack(big, 0, waiting, age).held);
  // Past the age, queue order.
  waiting[0].pods = 4;
  EXPECT_FALSE(t.HoldsBack(big, age, waiting, age).held);
  // 2 devices is never legal on the torus: waiting pairs hold nothing back on a trn1 fleet.
  tracker::Tracker trn(topology::Catalog::Embedded(), Policy::kScarcity);
  ASSERT_TRUE(trn.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  const std::vector<topology::WaitingClass> pairs_only = {{Dev(2), 4, false}};
  EXPECT_FALSE(trn.HoldsBack(Dev(16), 0, pairs_only, age).held);
  EXPECT_TRUE(trn.HoldsBack(Dev(16), 0, waiting, age).held);  // the waiting 8 does fit there
  // Nor do pods of a class the full ring has no room for: 10 of 12 taken, a pair left but no 4.
  tracker::PodSpec ten{"u10", "ten", {{"c", Dev(10), false}}};
  t.ObserveDemand(ten);
  ASSERT_TRUE(t.Reserve(ten, "inf", 1).ok());
  const std::vector<topology::WaitingClass> fours = {{Dev(4), 1, false}};
  EXPECT_FALSE(t.HoldsBack(Dev(8), 0, fours, age).held);
  // Devices 10-11 are left: a pair starting there would leave nothing for two waiting singles,
  // and an 8-device pod, with no room to start, is never held back.
  const std::vector<topology::WaitingClass> ones = {{Dev(1), 2, false}};
  verdict = t.HoldsBack(Dev(2), 0, ones, age);
  EXPECT_TRUE(verdict.held);
  EXPECT_EQ(verdict.free_devices, 2);
  EXPECT_FALSE(t.HoldsBack(Dev(8), 0, ones, age).held);
}

TEST(TrackerRankTest, OneNodeScoresTenAndNodesThatDoNotFitScoreZero) {
  tracker::Tracker t(topology::Catalog::Embedded(), Policy::kScarcity);
  ASSERT_TRUE(t.UpsertNode({"inf", "inf2.48xlarge", 0}).ok());
  ASSERT_TRUE(t.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  ASSERT_TRUE(t.UpsertNode({"trn-b", "trn1.32xlarge", 0}).ok());
  const std::vector<std::string> names = {"inf", "trn", "trn-b", "ghost"};
  tracker::PodSpec two{"u2", "two", {{"c", Dev(2), false}}};
  tracker::Ranking r = t.Rank(two, names);
  // 2 devices is never legal on the torus: only the ring takes it.
  EXPECT_EQ(r.best, 0);
  EXPECT_THAT(r.scores, ElementsAre(10, 0, 0, 0));
  EXPECT_TRUE(r.fits[1].unresolvable);
  tracker::PodSpec one{"u1", "one", {{"c", Dev(1), false}}};
  r = t.Rank(one, names);
  EXPECT_EQ(std::count(r.scores.begin(), r.scores.end(), 10), 1);
  for (int s : r.scores) {
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 10);
  }
  // The node order given does not change the choice.
  const std::vector<std::string> reversed = {"ghost", "trn-b", "trn", "inf"};
  const tracker::Ranking back = t.Rank(one, reversed);
  EXPECT_EQ(reversed[static_cast<size_t>(back.best)], names[static_cast<size_t>(r.best)]);
}

// The problem this policy exists for, on a small mixed fleet: a stream of 1-device pods, then
// 2-device pods, which only the inf2 rings can ever take.
int PlaceStream(Policy policy, const std::vector<std::string>& fleet_order, int ones, int twos) {
  tracker::Tracker t(topology::Catalog::Embedded(), policy);
  std::vector<std::string> names;
  for (const auto& type : fleet_order) {
    names.push_back(type + "-" + std::to_string(names.size()));
    EXPECT_TRUE(t.UpsertNode({names.back(), type, 0}).ok());
  }
  int placed = 0;
  int uid = 0;
  auto place = [&](int count) {
    tracker::PodSpec pod{"u" + std::to_string(uid), "p" + std::to_string(uid), {}};
    ++uid;
    pod.containers.push_back({"c", Dev(count), false});
    t.ObserveDemand(pod);
    const tracker::Ranking r = t.Rank(pod, names);
    if (r.best < 0) return;
    ASSERT_TRUE(t.Reserve(pod, names[static_cast<size_t>(r.best)], 1).ok());
    ++placed;
  };
  for (int i = 0; i < ones; ++i) place(1);
  for (int i = 0; i < twos; ++i) place(2);
  return placed;
}

TEST(TrackerRankTest, SingleDevicesLeaveTheRingToRequestsOnlyItCanTake) {
  // The end-to-end scenario's fleet (test/e2e/scarcity.sh): one inf2.24xlarge ring of 6 and
  // four trn1.32xlarge; 12 single devices, then 3 pairs that fit only on the ring.
  const std::vector<std::string> inf_first = {"inf2.24xlarge", "trn1.32xlarge", "trn1.32xlarge",
                                              "trn1.32xlarge", "trn1.32xlarge"};
  std::vector<std::string> trn_first = inf_first;
  std::rotate(trn_first.begin(), trn_first.begin() + 1, trn_first.end());
  EXPECT_EQ(PlaceStream(Policy::kScarcity, inf_first, 12, 3), 15);
  EXPECT_EQ(PlaceStream(Policy::kScarcity, trn_first, 12, 3), 15);
  // First-fit in inf-first order strands them: the ring fills with single devices.
  EXPECT_EQ(PlaceStream(Policy::kFirstFit, inf_first, 12, 3), 12);
  // The previous default too: a single device fills the ring as tightly as the torus.
  EXPECT_LT(PlaceStream(Policy::kBestFit, inf_first, 12, 3), 15);
}

}  // namespace
}  // namespace toposched
