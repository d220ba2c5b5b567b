// The tracker: reservations, commits, rollbacks, expiry, what-if queries, preemption, rebuild,
// multi-container and init-container pods, and node changes.
#include "tracker/tracker.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "topology/catalog.h"
#include "topology/id_ranges.h"

namespace toposched::tracker {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using topology::Catalog;
using topology::FormatIdRanges;
using topology::MaskToIds;

std::vector<int> Range(int first, int last) {
  std::vector<int> out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

ContainerRequest Dev(const std::string& name, int n, bool init = false) {
  return ContainerRequest{name, Request{Unit::kDevice, n}, init};
}
ContainerRequest Cores(const std::string& name, int n, bool init = false) {
  return ContainerRequest{name, Request{Unit::kCore, n}, init};
}
PodSpec Pod(const std::string& uid, std::vector<ContainerRequest> containers) {
  return PodSpec{uid, "ns/" + uid, std::move(containers)};
}
PodSpec DevPod(const std::string& uid, int n) { return Pod(uid, {Dev("main", n)}); }
PodSpec CorePod(const std::string& uid, int n) { return Pod(uid, {Cores("main", n)}); }

Placement DevicePlacement(const std::vector<int>& ids) {
  return Placement::FromIds(Unit::kDevice, ids, /*cores_per_device=*/1);
}
Placement CorePlacement(int cores_per_device, const std::vector<int>& ids) {
  return Placement::FromIds(Unit::kCore, ids, cores_per_device);
}
RecordedPod Record(const std::string& uid, const std::string& node, std::vector<Placement> sets) {
  RecordedPod r{uid, "ns/" + uid, PodAllocation{node, {}}};
  int i = 0;
  for (auto& p : sets) r.allocation.containers.push_back({"c" + std::to_string(i++), std::move(p)});
  return r;
}

class TrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tracker_.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
    ASSERT_TRUE(tracker_.UpsertNode({"inf", "inf2.48xlarge", 0}).ok());
    ASSERT_TRUE(tracker_.UpsertNode({"inf1", "inf1.6xlarge", 0}).ok());
  }

  std::vector<int> BusyDevices(const std::string& node) const {
    auto snap = tracker_.Snapshot(node);
    if (!snap) return {-1};
    return MaskToIds(snap->usage.busy_devices());
  }
  std::vector<int> UsedCores(const std::string& node) const {
    auto snap = tracker_.Snapshot(node);
    std::vector<int> out;
    if (!snap) return {-1};
    for (int c = 0; c < snap->shape.cores; ++c) {
      if (snap->usage.used_cores().test(static_cast<size_t>(c))) out.push_back(c);
    }
    return out;
  }
  std::vector<std::string> PodsOn(const std::string& node) const {
    auto snap = tracker_.Snapshot(node);
    if (!snap) return {"<no snapshot>"};
    auto pods = snap->pod_uids;
    std::sort(pods.begin(), pods.end());
    return pods;
  }
  // Reserves and commits; the ids it got.
  std::vector<int> Place(const PodSpec& pod, const std::string& node) {
    auto r = tracker_.Reserve(pod, node, 1'000);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
    if (!r.ok()) return {};
    EXPECT_TRUE(tracker_.Commit(pod.uid).ok());
    return r->containers.at(0).placement.ids;
  }
  // Everything observable about the state.
  std::string State() const {
    std::string out;
    for (const auto& node : tracker_.NodeNames()) {
      out += node + ": cores " + FormatIdRanges(UsedCores(node)) + " devices " +
             FormatIdRanges(BusyDevices(node)) + " pods";
      for (const auto& uid : PodsOn(node)) {
        auto hold = tracker_.Find(uid);
        out += " " + uid +
               (hold && hold->state == HoldState::kReserved
                    ? "(r" + std::to_string(hold->deadline_ns) + ")"
                    : "(c)");
      }
      out += "\n";
    }
    const TrackerStats s = tracker_.Stats();
    out += "stats " + std::to_string(s.nodes) + "/" + std::to_string(s.reserved) + "/" +
           std::to_string(s.committed);
    return out;
  }

  Tracker tracker_{Catalog::Embedded(), Policy::kBestFit};
};

// --- Reserve / Commit / Rollback / Forget / Expire --------------------------------------------

TEST_F(TrackerTest, ReserveHoldsIdsAndCommitMakesThemPermanent) {
  auto r = tracker_.Reserve(DevPod("a", 4), "trn", 100);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->node, "trn");
  ASSERT_EQ(r->containers.size(), 1u);
  EXPECT_EQ(r->containers[0].container, "main");
  EXPECT_THAT(r->containers[0].placement.ids, ElementsAreArray(Range(0, 3)));
  auto hold = tracker_.Find("a");
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->state, HoldState::kReserved);
  EXPECT_EQ(hold->deadline_ns, 100);
  EXPECT_EQ(hold->pod_name, "ns/a");
  EXPECT_EQ(hold->allocation.node, "trn");
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 3)));
  EXPECT_THAT(UsedCores("trn"), ElementsAreArray(Range(0, 7)));
  EXPECT_THAT(PodsOn("trn"), ElementsAre("a"));
  EXPECT_EQ(tracker_.Stats().reserved, 1);
  EXPECT_EQ(tracker_.Stats().committed, 0);

  ASSERT_TRUE(tracker_.Commit("a").ok());
  hold = tracker_.Find("a");
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->state, HoldState::kCommitted);
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  EXPECT_EQ(tracker_.Stats().committed, 1);
  // Committed holds never expire.
  EXPECT_THAT(tracker_.ExpireReservations(1'000'000).pods, IsEmpty());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 3)));
  // The next pod gets the next row.
  auto b = tracker_.Reserve(DevPod("b", 4), "trn", 100);
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_THAT(b->containers[0].placement.ids, ElementsAreArray(Range(4, 7)));
}

TEST_F(TrackerTest, ReserveGivesWhatFitPredicted) {
  Place(DevPod("x", 1), "trn");
  const PodSpec pod = Pod("p", {Dev("a", 4), Cores("b", 3)});
  const FitResult fit = tracker_.Fit(pod, "trn");
  ASSERT_TRUE(fit.fits) << fit.reason;
  EXPECT_EQ(fit.allocation.node, "trn");
  EXPECT_GE(fit.score, 1);
  EXPECT_LE(fit.score, 10);
  auto r = tracker_.Reserve(pod, "trn", 5);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), fit.allocation.containers.size());
  for (size_t i = 0; i < r->containers.size(); ++i) {
    EXPECT_EQ(r->containers[i].container, fit.allocation.containers[i].container);
    EXPECT_EQ(r->containers[i].placement.ids, fit.allocation.containers[i].placement.ids);
  }
}

TEST_F(TrackerTest, ReserveTwiceForOneUidIsAnError) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("a", 1), "trn", 100).ok());
  const std::string before = State();
  auto again = tracker_.Reserve(DevPod("a", 1), "trn", 200);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.error(), HasSubstr("already holds ids on node trn"));
  auto elsewhere = tracker_.Reserve(DevPod("a", 1), "inf", 200);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_EQ(State(), before);
  ASSERT_TRUE(tracker_.Commit("a").ok());
  EXPECT_FALSE(tracker_.Reserve(DevPod("a", 1), "trn", 200).ok());
  EXPECT_FALSE(
      tracker_.ReserveExact("a", "ns/a", {"inf", {{"main", DevicePlacement({5})}}}, 1).ok());
}

TEST_F(TrackerTest, ReserveOnAnUnknownNodeOrWithoutRoomChangesNothing) {
  const std::string before = State();
  auto r = tracker_.Reserve(DevPod("a", 1), "nowhere", 100);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("node nowhere is not known"));
  auto seven = tracker_.Reserve(DevPod("b", 7), "trn", 100);
  ASSERT_FALSE(seven.ok());
  EXPECT_THAT(seven.error(), HasSubstr("does not support requests for device: 7"));
  EXPECT_EQ(State(), before);
  EXPECT_FALSE(tracker_.Find("a").has_value());
  EXPECT_FALSE(tracker_.Find("b").has_value());

  for (const char* uid : {"r0", "r1", "r2"}) Place(DevPod(uid, 4), "trn");
  const std::string full = State();
  auto eight = tracker_.Reserve(DevPod("c", 8), "trn", 100);
  ASSERT_FALSE(eight.ok());
  EXPECT_THAT(eight.error(), HasSubstr("pod ns/c does not fit on trn"));
  EXPECT_THAT(eight.error(), HasSubstr("no free aligned block of 8 devices"));
  EXPECT_EQ(State(), full);
}

TEST_F(TrackerTest, CommitNeedsAReservation) {
  auto s = tracker_.Commit("ghost");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("ghost"));
  EXPECT_EQ(tracker_.Stats().committed, 0);
}

TEST_F(TrackerTest, ForEachFitGivesFitAllsVerdictsWithoutIds) {
  Place(DevPod("full", 12), "inf");
  const std::vector<std::string> nodes = {"trn", "missing", "inf", "inf1"};
  for (int count : {1, 4, 7}) {
    const auto all = tracker_.FitAll(DevPod("q", count), nodes);
    size_t seen = 0;
    tracker_.ForEachFit(DevPod("q", count), nodes, [&](size_t i, FitResult&& r) {
      ASSERT_EQ(i, seen++);
      EXPECT_EQ(r.fits, all[i].fits) << nodes[i];
      EXPECT_EQ(r.score, all[i].score) << nodes[i];
      EXPECT_EQ(r.reason, all[i].reason) << nodes[i];
      EXPECT_EQ(r.unresolvable, all[i].unresolvable) << nodes[i];
      EXPECT_TRUE(r.allocation.containers.empty());
    });
    EXPECT_EQ(seen, nodes.size());
  }
}

TEST_F(TrackerTest, CommitTwiceIsAnErrorAndKeepsTheCounts) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("a", 1), "trn", 100).ok());
  EXPECT_EQ(tracker_.Stats().reserved, 1);
  ASSERT_TRUE(tracker_.Commit("a").ok());
  auto again = tracker_.Commit("a");
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.error(), HasSubstr("already committed"));
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  EXPECT_EQ(tracker_.Stats().committed, 1);
}

TEST_F(TrackerTest, RollbackReleasesAReservationButNotACommittedPod) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("a", 4), "trn", 100).ok());
  ASSERT_TRUE(tracker_.Rollback("a").ok());
  EXPECT_FALSE(tracker_.Find("a").has_value());
  EXPECT_THAT(BusyDevices("trn"), IsEmpty());
  EXPECT_THAT(PodsOn("trn"), IsEmpty());
  EXPECT_FALSE(tracker_.Rollback("a").ok()) << "rolled back twice";
  EXPECT_FALSE(tracker_.Rollback("ghost").ok());

  Place(DevPod("c", 4), "trn");
  const std::string before = State();
  auto s = tracker_.Rollback("c");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("no reservation to roll back"));
  EXPECT_EQ(State(), before);
  EXPECT_EQ(tracker_.Find("c")->state, HoldState::kCommitted);
}

TEST_F(TrackerTest, ForgetReleasesWhateverThePodHolds) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("r", 4), "trn", 100).ok());
  Place(DevPod("c", 4), "trn");
  Place(CorePod("k", 3), "inf");
  EXPECT_TRUE(tracker_.Forget("r"));
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(4, 7)));
  EXPECT_TRUE(tracker_.Forget("c"));
  EXPECT_THAT(BusyDevices("trn"), IsEmpty());
  EXPECT_THAT(UsedCores("inf"), ElementsAre(0, 1, 2));
  EXPECT_TRUE(tracker_.Forget("k"));
  EXPECT_THAT(UsedCores("inf"), IsEmpty());
  EXPECT_FALSE(tracker_.Forget("k"));
  EXPECT_FALSE(tracker_.Forget("ghost"));
  EXPECT_EQ(tracker_.Stats().reserved + tracker_.Stats().committed, 0);
  EXPECT_THAT(PodsOn("trn"), IsEmpty());
  EXPECT_THAT(PodsOn("inf"), IsEmpty());
}

TEST_F(TrackerTest, ExpiryReleasesOnlyReservationsAtOrBeforeNow) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("t100", 1), "trn", 100).ok());
  ASSERT_TRUE(tracker_.Reserve(DevPod("t300", 1), "trn", 300).ok());
  ASSERT_TRUE(tracker_.Reserve(DevPod("t200", 1), "inf", 200).ok());
  ASSERT_TRUE(tracker_.Reserve(DevPod("committed", 1), "inf", 50).ok());
  ASSERT_TRUE(tracker_.Commit("committed").ok());

  EXPECT_THAT(tracker_.ExpireReservations(99).pods, IsEmpty());
  EXPECT_THAT(tracker_.ExpireReservations(200).pods, ElementsAre("t100", "t200"));  // sorted
  EXPECT_FALSE(tracker_.Find("t100").has_value());
  EXPECT_FALSE(tracker_.Find("t200").has_value());
  EXPECT_TRUE(tracker_.Find("t300").has_value());
  EXPECT_TRUE(tracker_.Find("committed").has_value());
  EXPECT_THAT(PodsOn("trn"), ElementsAre("t300"));
  EXPECT_THAT(tracker_.ExpireReservations(299).pods, IsEmpty());
  EXPECT_THAT(tracker_.ExpireReservations(300).pods, ElementsAre("t300"));
  EXPECT_THAT(BusyDevices("trn"), IsEmpty());
  EXPECT_THAT(BusyDevices("inf"), ElementsAre(1));  // the committed pod's device
  EXPECT_THAT(tracker_.ExpireReservations(1'000'000'000).pods, IsEmpty());
  EXPECT_EQ(tracker_.Stats().committed, 1);
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  // An expired reservation can no longer be committed or rolled back.
  EXPECT_FALSE(tracker_.Commit("t100").ok());
  EXPECT_FALSE(tracker_.Rollback("t100").ok());
}

TEST_F(TrackerTest, ReserveExactHoldsExactlyThoseIds) {
  ASSERT_TRUE(
      tracker_.ReserveExact("e", "ns/e", {"trn", {{"main", DevicePlacement(Range(8, 11))}}}, 70)
          .ok());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(8, 11)));
  EXPECT_EQ(tracker_.Find("e")->state, HoldState::kReserved);
  EXPECT_EQ(tracker_.Find("e")->deadline_ns, 70);
  auto clash = tracker_.ReserveExact("f", "ns/f", {"trn", {{"main", DevicePlacement({11})}}}, 70);
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.error(), HasSubstr("held by e"));
  auto core_clash =
      tracker_.ReserveExact("g", "ns/g", {"trn", {{"main", CorePlacement(2, {22, 23})}}}, 70);
  ASSERT_FALSE(core_clash.ok());
  EXPECT_THAT(core_clash.error(), HasSubstr("held by e"));
  EXPECT_FALSE(
      tracker_.ReserveExact("h", "ns/h", {"trn", {{"main", DevicePlacement({16})}}}, 70).ok());
  EXPECT_FALSE(
      tracker_.ReserveExact("h", "ns/h", {"gone", {{"main", DevicePlacement({1})}}}, 70).ok());
  EXPECT_THAT(PodsOn("trn"), ElementsAre("e"));
  EXPECT_THAT(tracker_.ExpireReservations(70).pods, ElementsAre("e"));
}

// --- What-if queries --------------------------------------------------------------------------

TEST_F(TrackerTest, FilterQueriesChangeNothing) {
  Place(DevPod("a", 4), "trn");
  Place(DevPod("b", 1), "trn");
  ASSERT_TRUE(tracker_.Reserve(CorePod("c", 5), "inf", 42).ok());
  const std::string before = State();
  const std::vector<std::string> nodes = {"trn", "inf", "inf1", "missing"};
  const std::vector<std::string> gone = {"a", "b", "c"};
  for (const PodSpec& pod : {DevPod("q", 4), DevPod("q", 16), CorePod("q", 9),
                             Pod("q", {Dev("x", 4), Dev("y", 4), Cores("z", 2, true)})}) {
    (void)tracker_.Fit(pod, "trn");
    (void)tracker_.Fit(pod, "missing");
    (void)tracker_.FitAll(pod, nodes);
    (void)tracker_.FitWithout(pod, "trn", gone);
    (void)tracker_.FitWithout(pod, "missing", gone);
    (void)tracker_.FewestVictims(pod, "trn", gone);
    (void)tracker_.FewestVictims(pod, "inf", gone);
    EXPECT_EQ(State(), before);
  }
  EXPECT_FALSE(tracker_.Find("q").has_value());
}

TEST_F(TrackerTest, FitAllAnswersEachNodeInOrder) {
  Place(DevPod("full", 12), "inf");
  const std::vector<std::string> nodes = {"trn", "missing", "inf", "inf1"};
  const auto results = tracker_.FitAll(DevPod("q", 4), nodes);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0].fits);
  EXPECT_EQ(results[0].allocation.node, "trn");
  EXPECT_FALSE(results[1].fits);
  EXPECT_THAT(results[1].reason, HasSubstr("node missing is not known"));
  EXPECT_FALSE(results[2].fits);
  EXPECT_FALSE(results[2].unresolvable);
  EXPECT_THAT(results[2].reason, HasSubstr("no 4 contiguous free devices on inf2.48xlarge"));
  EXPECT_TRUE(results[3].fits);
  EXPECT_EQ(results[3].allocation.node, "inf1");
  const auto seven = tracker_.FitAll(DevPod("q", 7), nodes);
  EXPECT_TRUE(seven[0].unresolvable);
  EXPECT_FALSE(seven[3].fits);
  EXPECT_TRUE(seven[3].unresolvable) << "7 devices on a 4-device node";
}

TEST_F(TrackerTest, FitWithoutPretendsThePodsAreGone) {
  for (const char* uid : {"r0", "r1", "r2", "r3"}) Place(DevPod(uid, 4), "trn");
  Place(DevPod("other-node", 2), "inf");
  EXPECT_FALSE(tracker_.Fit(DevPod("q", 4), "trn").fits);
  const std::vector<std::string> r1 = {"r1"};
  FitResult f = tracker_.FitWithout(DevPod("q", 4), "trn", r1);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_THAT(f.allocation.containers[0].placement.ids, ElementsAreArray(Range(4, 7)));
  const std::vector<std::string> useless = {"other-node", "ghost"};
  EXPECT_FALSE(tracker_.FitWithout(DevPod("q", 4), "trn", useless).fits);
  const std::vector<std::string> r1r2 = {"r1", "r2"};
  EXPECT_FALSE(tracker_.FitWithout(DevPod("q", 8), "trn", r1r2).fits) << "rows 1 and 2 are no half";
  const std::vector<std::string> r2r3 = {"r2", "r3"};
  f = tracker_.FitWithout(DevPod("q", 8), "trn", r2r3);
  ASSERT_TRUE(f.fits) << f.reason;
  EXPECT_THAT(f.allocation.containers[0].placement.ids, ElementsAreArray(Range(8, 15)));
  const FitResult missing = tracker_.FitWithout(DevPod("q", 1), "missing", r1);
  EXPECT_FALSE(missing.fits);
  EXPECT_THAT(missing.reason, HasSubstr("not known"));
}

// --- Preemption -------------------------------------------------------------------------------

class VictimsTest : public TrackerTest {
 protected:
  // Rows 1..3 hold 4-device pods; row 0 holds the given 1-device pods.
  void Fill(const std::vector<int>& singles) {
    for (int d : singles) {
      ASSERT_TRUE(tracker_
                      .ReserveExact("s" + std::to_string(d), "ns/s",
                                    {"trn", {{"main", DevicePlacement({d})}}}, 0)
                      .ok());
      ASSERT_TRUE(tracker_.Commit("s" + std::to_string(d)).ok());
    }
    for (int row = 1; row < 4; ++row) {
      const std::string uid = "row" + std::to_string(row);
      ASSERT_TRUE(
          tracker_
              .ReserveExact(uid, "ns/" + uid,
                            {"trn", {{"main", DevicePlacement(Range(4 * row, 4 * row + 3))}}}, 0)
              .ok());
      ASSERT_TRUE(tracker_.Commit(uid).ok());
    }
  }
  std::vector<std::string> Everyone() const { return PodsOn("trn"); }
};

TEST_F(VictimsTest, OneSmallPodInTheWayIsTheOnlyVictim) {
  Fill({0});
  const auto everyone = Everyone();
  auto v = tracker_.FewestVictims(DevPod("q", 4), "trn", everyone);
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_THAT(v.value(), ElementsAre("s0"));
}

TEST_F(VictimsTest, ARowPodBeatsTwoSmallPods) {
  Fill({0, 1});
  const auto everyone = Everyone();
  auto v = tracker_.FewestVictims(DevPod("q", 4), "trn", everyone);
  ASSERT_TRUE(v.ok()) << v.error();
  ASSERT_EQ(v->size(), 1u) << ::testing::PrintToString(v.value());
  EXPECT_THAT(v->front(), HasSubstr("row"));
  // Removing the chosen victim is enough.
  EXPECT_TRUE(tracker_.FitWithout(DevPod("q", 4), "trn", v.value()).fits);
}

TEST_F(VictimsTest, EightDevicesNeedTwoVictims) {
  for (const auto& singles : {std::vector<int>{0}, std::vector<int>{0, 1}}) {
    for (const auto& uid : PodsOn("trn")) ASSERT_TRUE(tracker_.Forget(uid));
    Fill(singles);
    const auto everyone = Everyone();
    auto v = tracker_.FewestVictims(DevPod("q", 8), "trn", everyone);
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->size(), 2u) << ::testing::PrintToString(v.value());
    EXPECT_TRUE(tracker_.FitWithout(DevPod("q", 8), "trn", v.value()).fits);
  }
}

TEST_F(VictimsTest, NotEnoughOfferedVictimsIsAnError) {
  Fill({0, 1});
  const std::vector<std::string> only_s0 = {"s0", "ghost"};
  auto v = tracker_.FewestVictims(DevPod("q", 4), "trn", only_s0);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.error(), HasSubstr("even without all 1 offered victims"));
  const std::vector<std::string> none;
  EXPECT_FALSE(tracker_.FewestVictims(DevPod("q", 4), "trn", none).ok());
  // Pods on another node cannot help.
  Place(DevPod("elsewhere", 4), "inf");
  const std::vector<std::string> elsewhere = {"elsewhere"};
  EXPECT_FALSE(tracker_.FewestVictims(DevPod("q", 4), "trn", elsewhere).ok());
  EXPECT_FALSE(tracker_.FewestVictims(DevPod("q", 4), "missing", elsewhere).ok());
  // An unresolvable request stays an error whatever is removed.
  const auto everyone = Everyone();
  EXPECT_FALSE(tracker_.FewestVictims(DevPod("q", 7), "trn", everyone).ok());
}

TEST_F(VictimsTest, NoVictimsWhenItFitsAlready) {
  Fill({0});
  const auto everyone = Everyone();
  auto v = tracker_.FewestVictims(DevPod("q", 1), "trn", everyone);
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_THAT(v.value(), IsEmpty());
}

TEST_F(VictimsTest, MultiContainerPodsGetEnoughVictims) {
  Fill({0});
  const auto everyone = Everyone();
  const PodSpec pod = Pod("q", {Dev("a", 4), Dev("b", 4)});
  auto v = tracker_.FewestVictims(pod, "trn", everyone);
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->size(), 2u) << ::testing::PrintToString(v.value());
  EXPECT_TRUE(tracker_.FitWithout(pod, "trn", v.value()).fits);
}

// --- Rebuild ----------------------------------------------------------------------------------

// Issue 18, row 3. A relist whose snapshot predates a bind must not take the bind's ids back:
// before the fix Rebuild replaced every committed hold with the list, so "old" (committed after
// the list was requested) lost its ids and the next pod was given them.
TEST_F(TrackerTest, RebuildKeepsCommittedHoldsTheListCannotProveGone) {
  const std::vector<int> gone_ids = Place(DevPod("gone", 1), "trn");  // deleted while unwatched
  const std::vector<int> pending_ids = Place(DevPod("pending", 1), "trn");
  const uint64_t listed_at = tracker_.Generation();  // the list is requested here
  const std::vector<int> old_ids = Place(DevPod("old", 4), "trn");
  // p's record: four devices none of the three holds has.
  auto held = [&](int d) {
    for (const auto* ids : {&gone_ids, &pending_ids, &old_ids}) {
      if (std::find(ids->begin(), ids->end(), d) != ids->end()) return true;
    }
    return false;
  };
  std::vector<int> p_ids;
  for (int d = 0; d < 16 && p_ids.size() < 4; ++d) {
    if (!held(d)) p_ids.push_back(d);
  }
  const std::vector<RecordedPod> pods = {
      Record("p", "trn", {DevicePlacement(p_ids)}),
      Record("q", "inf", {CorePlacement(2, {2, 3, 4})}),
  };
  // "pending" is listed, but without its record (the list predates its bind).
  const std::unordered_set<std::string> alive = {"p", "q", "pending"};
  RebuildScope scope;
  scope.keep_reservations = true;
  scope.listed_at = listed_at;
  scope.alive = &alive;
  const RebuildReport report = tracker_.Rebuild(pods, scope);
  EXPECT_EQ(report.applied, 2);
  EXPECT_EQ(report.newer_kept, 2);
  EXPECT_EQ(report.dropped, 1);
  EXPECT_THAT(report.problems, IsEmpty());
  EXPECT_FALSE(tracker_.Find("gone").has_value());  // older than the list and absent: gone
  ASSERT_TRUE(tracker_.Find("old").has_value());
  EXPECT_EQ(tracker_.Find("old")->state, HoldState::kCommitted);
  EXPECT_EQ(tracker_.Find("old")->allocation.containers[0].placement.ids, old_ids);
  EXPECT_TRUE(tracker_.Find("pending").has_value());
  EXPECT_EQ(tracker_.Find("p")->state, HoldState::kCommitted);
  std::vector<int> busy = p_ids;
  busy.insert(busy.end(), old_ids.begin(), old_ids.end());
  busy.insert(busy.end(), pending_ids.begin(), pending_ids.end());
  std::sort(busy.begin(), busy.end());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(busy));
  EXPECT_THAT(UsedCores("inf"), ElementsAre(2, 3, 4));
  EXPECT_THAT(PodsOn("trn"), ElementsAre("old", "p", "pending"));
  // The next pod gets none of them.
  auto next = tracker_.Reserve(DevPod("next", 4), "trn", 1'000);
  ASSERT_TRUE(next.ok()) << next.error();
  for (int id : next->containers[0].placement.ids) {
    EXPECT_TRUE(std::find(busy.begin(), busy.end(), id) == busy.end()) << id;
  }
}

// A pod bound after the list's snapshot keeps its ids against a record the stale list still shows
// for a pod deleted meanwhile (the newer knowledge wins; the stale record is reported).
TEST_F(TrackerTest, RebuildGivesContestedIdsToTheHoldNewerThanTheList) {
  const uint64_t listed_at = tracker_.Generation();
  const std::vector<int> ids = Place(DevPod("new", 4), "trn");
  const std::vector<RecordedPod> pods = {Record("deleted", "trn", {DevicePlacement(ids)})};
  RebuildScope scope;
  scope.listed_at = listed_at;
  const RebuildReport report = tracker_.Rebuild(pods, scope);
  EXPECT_EQ(report.newer_kept, 1);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_EQ(report.problems[0].uid, "deleted");
  EXPECT_THAT(report.problems[0].conflicting_uids, ElementsAre("new"));
  EXPECT_TRUE(tracker_.Find("new").has_value());
}

// Without a scope the list is the whole truth (a start): what it does not record is dropped.
TEST_F(TrackerTest, RebuildWithoutAScopeReplacesCommittedHolds) {
  Place(DevPod("old", 4), "trn");
  const std::vector<RecordedPod> pods = {Record("p", "trn", {DevicePlacement(Range(4, 7))})};
  const RebuildReport report = tracker_.Rebuild(pods, true);
  EXPECT_EQ(report.applied, 1);
  EXPECT_EQ(report.dropped, 1);
  EXPECT_FALSE(tracker_.Find("old").has_value());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(4, 7)));
}

// Issue 18, row 6. Records on a node not known yet are parked, and taken with the node when it is
// added, in the same step: no query sees the node free.
TEST_F(TrackerTest, RecordsOnANodeNotKnownYetAreTakenWithTheNode) {
  const std::vector<RecordedPod> pods = {Record("x", "late", {DevicePlacement(Range(0, 15))})};
  const RebuildReport report = tracker_.Rebuild(pods, true);
  EXPECT_EQ(report.parked, 1);
  EXPECT_THAT(report.problems, IsEmpty());
  ASSERT_TRUE(tracker_.Find("x").has_value());
  EXPECT_TRUE(tracker_.Find("x")->parked);
  ASSERT_TRUE(tracker_.Adopt(Record("y", "late", {DevicePlacement({3})})).ok());  // parks too
  EXPECT_EQ(tracker_.Stats().parked, 2);
  // y's record overlaps x's (the earlier): the node comes with x, and y is named.
  auto s = tracker_.UpsertNode({"late", "trn1.32xlarge", 0});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("ns/y"));
  EXPECT_THAT(BusyDevices("late"), ElementsAreArray(Range(0, 15)));
  EXPECT_FALSE(tracker_.Find("x")->parked);
  EXPECT_FALSE(tracker_.Find("y").has_value());
  EXPECT_FALSE(tracker_.Fit(DevPod("z", 16), "late").fits);
}

TEST_F(TrackerTest, RebuildKeepsTheEarlierPodOnAConflict) {
  const std::vector<RecordedPod> pods = {
      Record("first", "trn", {DevicePlacement(Range(0, 3))}),
      Record("second", "trn", {DevicePlacement({3})}),
      Record("third", "trn", {CorePlacement(2, {6, 7, 8})}),  // device 3 (cores 6,7) and 4
      Record("fourth", "trn", {DevicePlacement({4})}),
  };
  const RebuildReport report = tracker_.Rebuild(pods, false);
  EXPECT_EQ(report.applied, 2);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_EQ(report.problems[0].uid, "second");
  EXPECT_EQ(report.problems[0].name, "ns/second");
  EXPECT_EQ(report.problems[0].node, "trn");
  EXPECT_THAT(report.problems[0].conflicting_uids, ElementsAre("first"));
  EXPECT_THAT(report.problems[0].message, HasSubstr("already held by ns/first"));
  EXPECT_EQ(report.problems[1].uid, "third");
  EXPECT_THAT(report.problems[1].conflicting_uids, ElementsAre("first"));
  EXPECT_FALSE(tracker_.Find("second").has_value());
  EXPECT_FALSE(tracker_.Find("third").has_value());
  EXPECT_TRUE(tracker_.Find("fourth").has_value());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 4)));
  EXPECT_THAT(UsedCores("trn"), ElementsAreArray(Range(0, 9)));
}

TEST_F(TrackerTest, RebuildReportsConflictsWhateverTheRecordedOrder) {
  // Ids as an annotation may list them (not ascending) and without the derived device mask:
  // the conflict must still name the holder.
  RecordedPod messy{"messy", "ns/messy", {"inf", {{"c", Placement{Unit::kCore, {5, 4, 3}, 0}}}}};
  const std::vector<RecordedPod> pods = {
      Record("first", "inf", {CorePlacement(2, {3, 4})}),
      messy,
      Record("dev", "inf", {Placement{Unit::kDevice, {2}, 0}}),
  };
  const RebuildReport report = tracker_.Rebuild(pods, false);
  EXPECT_EQ(report.applied, 1);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_EQ(report.problems[0].uid, "messy");
  EXPECT_THAT(report.problems[0].conflicting_uids, ElementsAre("first"));
  EXPECT_EQ(report.problems[1].uid, "dev");
  EXPECT_THAT(report.problems[1].conflicting_uids, ElementsAre("first"));
  EXPECT_THAT(UsedCores("inf"), ElementsAre(3, 4));
}

TEST_F(TrackerTest, RebuildReportsInvalidRecordsAndAppliesNoneOfThem) {
  const std::vector<RecordedPod> pods = {
      Record("out-of-range", "trn", {DevicePlacement({16})}),
      Record("core-out-of-range", "trn", {CorePlacement(2, {31, 32})}),
      Record("negative", "trn", {Placement{Unit::kCore, {-1}, 0}}),
      Record("nowhere", "no-such-node", {DevicePlacement({0})}),
      Record("good", "trn", {DevicePlacement({0})}),
      Record("good", "trn", {DevicePlacement({1})}),
  };
  const RebuildReport report = tracker_.Rebuild(pods, false);
  EXPECT_EQ(report.applied, 2);  // good, and nowhere parked until its node is known
  EXPECT_EQ(report.parked, 1);
  ASSERT_EQ(report.problems.size(), 4u);
  EXPECT_EQ(report.problems[0].uid, "out-of-range");
  EXPECT_THAT(report.problems[0].message, HasSubstr("out of range"));
  EXPECT_THAT(report.problems[0].message, HasSubstr("16"));
  EXPECT_EQ(report.problems[1].uid, "core-out-of-range");
  EXPECT_THAT(report.problems[1].message, HasSubstr("core id 32 is out of range"));
  EXPECT_EQ(report.problems[2].uid, "negative");
  EXPECT_EQ(report.problems[3].uid, "good");
  EXPECT_THAT(report.problems[3].message, HasSubstr("listed twice"));
  EXPECT_TRUE(tracker_.Find("nowhere")->parked);
  for (const auto& p : report.problems) EXPECT_THAT(p.conflicting_uids, IsEmpty()) << p.uid;
  EXPECT_THAT(BusyDevices("trn"), ElementsAre(0));
  EXPECT_THAT(UsedCores("trn"), ElementsAre(0, 1));
}

TEST_F(TrackerTest, RebuildKeepsReservationsInFlightUnlessTheyConflict) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("inflight", 4), "trn", 777).ok());  // row 0
  ASSERT_TRUE(tracker_.Reserve(DevPod("clashing", 2), "inf", 888).ok());  // devices 0-1
  ASSERT_TRUE(tracker_.Reserve(DevPod("landed", 1), "inf1", 999).ok());   // device 0
  const std::vector<RecordedPod> pods = {
      Record("landed", "inf1", {DevicePlacement({0})}),
      Record("winner", "inf", {DevicePlacement({1})}),
  };
  const RebuildReport report = tracker_.Rebuild(pods, true);
  EXPECT_EQ(report.applied, 2);
  EXPECT_EQ(report.reservations_kept, 1);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_EQ(report.problems[0].uid, "clashing");
  EXPECT_THAT(report.problems[0].conflicting_uids, ElementsAre("winner"));
  auto inflight = tracker_.Find("inflight");
  ASSERT_TRUE(inflight.has_value());
  EXPECT_EQ(inflight->state, HoldState::kReserved);
  EXPECT_EQ(inflight->deadline_ns, 777);
  EXPECT_EQ(tracker_.Find("landed")->state, HoldState::kCommitted);
  EXPECT_FALSE(tracker_.Find("clashing").has_value());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 3)));
  EXPECT_THAT(BusyDevices("inf"), ElementsAre(1));
  EXPECT_THAT(tracker_.ExpireReservations(800).pods, ElementsAre("inflight"));
}

TEST_F(TrackerTest, RebuildWithoutKeepingReservationsDropsThem) {
  ASSERT_TRUE(tracker_.Reserve(DevPod("inflight", 4), "trn", 777).ok());
  const RebuildReport report = tracker_.Rebuild({}, false);
  EXPECT_EQ(report.applied, 0);
  EXPECT_EQ(report.reservations_kept, 0);
  EXPECT_THAT(report.problems, IsEmpty());
  EXPECT_FALSE(tracker_.Find("inflight").has_value());
  EXPECT_THAT(BusyDevices("trn"), IsEmpty());
  EXPECT_EQ(tracker_.Stats().reserved, 0);
}

// --- Adopt ------------------------------------------------------------------------------------

TEST_F(TrackerTest, AdoptRecordsCommittedAllocationsAndRefusesConflicts) {
  ASSERT_TRUE(tracker_.Adopt(Record("a", "trn", {DevicePlacement(Range(4, 7))})).ok());
  EXPECT_EQ(tracker_.Find("a")->state, HoldState::kCommitted);
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(4, 7)));
  auto clash = tracker_.Adopt(Record("b", "trn", {CorePlacement(2, {15, 16})}));
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.error(), HasSubstr("held by a"));
  EXPECT_FALSE(tracker_.Find("b").has_value());
  EXPECT_FALSE(tracker_.Adopt(Record("c", "trn", {DevicePlacement({99})})).ok());
  // On a node not known yet it is parked until the node comes (issue 18, row 6).
  ASSERT_TRUE(tracker_.Adopt(Record("c", "nowhere", {DevicePlacement({0})})).ok());
  EXPECT_TRUE(tracker_.Find("c")->parked);
  EXPECT_TRUE(tracker_.Forget("c"));
  // Our own reservation, seen again through the watch, becomes committed.
  auto r = tracker_.Reserve(DevPod("mine", 1), "inf", 10);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(tracker_.Adopt(RecordedPod{"mine", "ns/mine", r.value()}).ok());
  EXPECT_EQ(tracker_.Find("mine")->state, HoldState::kCommitted);
  EXPECT_THAT(tracker_.ExpireReservations(10).pods, IsEmpty());
  // Recorded on the same node with other ids than it holds (another writer's bind): the record
  // wins when those ids are free; refused, keeping the hold, when another pod has them.
  auto other = tracker_.Reserve(DevPod("other", 1), "inf", 10);
  ASSERT_TRUE(other.ok());
  const std::vector<int> held = tracker_.Find("mine")->allocation.containers[0].placement.ids;
  ASSERT_TRUE(tracker_.Adopt(Record("mine", "inf", {DevicePlacement({9})})).ok());
  EXPECT_THAT(tracker_.Find("mine")->allocation.containers[0].placement.ids, ElementsAre(9));
  EXPECT_THAT(BusyDevices("inf"),
              ::testing::UnorderedElementsAre(9, other->containers[0].placement.ids[0]));
  auto taken =
      tracker_.Adopt(Record("mine", "inf", {DevicePlacement(other->containers[0].placement.ids)}));
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(taken.error(), HasSubstr("held by other"));
  EXPECT_THAT(tracker_.Find("mine")->allocation.containers[0].placement.ids, ElementsAre(9));
  EXPECT_NE(held, std::vector<int>{9});
  // Recorded on another node than the one it holds: an error.
  EXPECT_FALSE(tracker_.Adopt(Record("mine", "trn", {DevicePlacement({0})})).ok());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(4, 7)));
}

// --- Multi-container and init-container pods --------------------------------------------------

std::set<int> CoresOf(const Placement& p, int cores_per_device) {
  std::set<int> out;
  for (int id : p.ids) {
    if (p.unit == Unit::kCore) {
      out.insert(id);
    } else {
      for (int k = 0; k < cores_per_device; ++k) out.insert(id * cores_per_device + k);
    }
  }
  return out;
}

bool Disjoint(const std::set<int>& a, const std::set<int>& b) {
  return std::none_of(a.begin(), a.end(), [&](int x) { return b.count(x) != 0; });
}

TEST_F(TrackerTest, EachContainerGetsItsOwnLegalSet) {
  auto r = tracker_.Reserve(Pod("p", {Dev("a", 4), Dev("b", 4), Dev("c", 1)}), "trn", 10);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), 3u);
  std::set<std::string> names;
  std::set<int> all;
  for (const auto& c : r->containers) {
    names.insert(c.container);
    const auto cores = CoresOf(c.placement, 2);
    EXPECT_TRUE(Disjoint(all, cores)) << c.container;
    all.insert(cores.begin(), cores.end());
    if (c.placement.ids.size() == 4) {
      EXPECT_EQ(c.placement.ids.front() % 4, 0) << "a row";
      EXPECT_EQ(c.placement.ids.back(), c.placement.ids.front() + 3);
    }
  }
  EXPECT_THAT(names, UnorderedElementsAre("a", "b", "c"));
  EXPECT_EQ(BusyDevices("trn").size(), 9u);
  EXPECT_EQ(UsedCores("trn").size(), 18u);

  // Mixed units on inf2: the core set is not inside the device set.
  auto m = tracker_.Reserve(Pod("m", {Dev("d", 2), Cores("k", 3)}), "inf", 10);
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_EQ(m->containers.size(), 2u);
  EXPECT_TRUE(
      Disjoint(CoresOf(m->containers[0].placement, 2), CoresOf(m->containers[1].placement, 2)));
  EXPECT_EQ(UsedCores("inf").size(), 7u);
}

TEST_F(TrackerTest, APodFitsOnlyIfAllItsContainersFitAtOnce) {
  for (const char* uid : {"r0", "r1", "r2"}) Place(DevPod(uid, 4), "trn");
  const std::string before = State();
  const PodSpec pod = Pod("p", {Dev("a", 4), Dev("b", 4)});
  const FitResult f = tracker_.Fit(pod, "trn");
  EXPECT_FALSE(f.fits);
  EXPECT_FALSE(f.unresolvable);
  EXPECT_THAT(f.reason, HasSubstr("container '"));
  EXPECT_THAT(f.reason, HasSubstr("no free aligned block of 4 devices"));
  EXPECT_FALSE(tracker_.Reserve(pod, "trn", 10).ok());
  EXPECT_EQ(State(), before);
  EXPECT_TRUE(tracker_.Fit(Pod("p", {Dev("a", 4)}), "trn").fits);
  const FitResult both = tracker_.Fit(Pod("p", {Dev("one", 1), Dev("three", 3)}), "inf1");
  EXPECT_TRUE(both.fits) << both.reason;
  EXPECT_FALSE(tracker_.Fit(Pod("p", {Dev("two", 2), Dev("three", 3)}), "inf1").fits);
  // A container with an unresolvable count makes the whole pod unresolvable.
  const FitResult seven = tracker_.Fit(Pod("p", {Dev("ok", 1), Dev("bad", 7)}), "trn");
  EXPECT_FALSE(seven.fits);
  EXPECT_TRUE(seven.unresolvable);
  EXPECT_THAT(seven.reason, HasSubstr("container 'bad'"));
}

TEST_F(TrackerTest, ContainersAskingForNothingAreIgnored) {
  auto r = tracker_.Reserve(Pod("p", {Dev("sidecar", 0), Dev("main", 1)}), "trn", 10);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), 1u);
  EXPECT_EQ(r->containers[0].container, "main");
  EXPECT_FALSE(Pod("n", {Dev("x", 0)}).AsksForAnything());
  EXPECT_TRUE(Pod("n", {Dev("x", 0), Cores("y", 1)}).AsksForAnything());
}

TEST_F(TrackerTest, SmallInitContainerReusesTheAppIds) {
  auto r = tracker_.Reserve(Pod("p", {Dev("init", 1, true), Dev("app", 4)}), "trn", 10);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), 2u);
  const Placement* app = nullptr;
  const Placement* init = nullptr;
  for (const auto& c : r->containers) (c.container == "app" ? app : init) = &c.placement;
  ASSERT_NE(app, nullptr);
  ASSERT_NE(init, nullptr);
  ASSERT_EQ(init->ids.size(), 1u);
  EXPECT_NE(std::find(app->ids.begin(), app->ids.end(), init->ids[0]), app->ids.end());
  EXPECT_EQ(BusyDevices("trn").size(), 4u) << "the footprint is the app set";
  // Core requests: the init container gets the app container's cores.
  auto k = tracker_.Reserve(Pod("k", {Cores("init", 2, true), Cores("app", 2)}), "inf", 10);
  ASSERT_TRUE(k.ok()) << k.error();
  EXPECT_EQ(k->containers[0].placement.ids, k->containers[1].placement.ids);
  EXPECT_EQ(UsedCores("inf").size(), 2u);
  // Releasing the pod releases everything.
  EXPECT_TRUE(tracker_.Forget("p"));
  EXPECT_TRUE(tracker_.Forget("k"));
  EXPECT_THAT(UsedCores("trn"), IsEmpty());
  EXPECT_THAT(UsedCores("inf"), IsEmpty());
}

TEST_F(TrackerTest, LargerInitContainerTakesMore) {
  auto r = tracker_.Reserve(Pod("p", {Dev("app", 4), Dev("init", 8, true)}), "trn", 10);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), 2u);
  const auto app = CoresOf(r->containers[0].placement, 2);
  const auto init = CoresOf(r->containers[1].placement, 2);
  EXPECT_EQ(r->containers[1].container, "init");
  EXPECT_EQ(init.size(), 16u);
  EXPECT_TRUE(Disjoint(app, init));
  EXPECT_EQ(BusyDevices("trn").size(), 12u);
  // Not enough room for app + init: does not fit.
  EXPECT_FALSE(tracker_.Fit(Pod("q", {Dev("app", 4), Dev("init", 16, true)}), "trn").fits);
}

TEST_F(TrackerTest, InitContainersRunOneAtATimeAndShareIds) {
  // Rows 2 and 3 are taken. The app needs 1 device; two init containers need a row each, but
  // they run one after the other, so one row serves both (effective request = max of inits).
  Place(DevPod("other", 8), "trn");
  const PodSpec pod = Pod("p", {Dev("app", 1), Dev("init1", 4, true), Dev("init2", 4, true)});
  const FitResult f = tracker_.Fit(pod, "trn");
  ASSERT_TRUE(f.fits) << f.reason;
  auto r = tracker_.Reserve(pod, "trn", 10);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->containers.size(), 3u);
  EXPECT_EQ(r->containers[1].placement.ids, r->containers[2].placement.ids);
  EXPECT_EQ(BusyDevices("trn").size(), 8u + 5u);
  // Only init containers: the second reuses the first one's ids.
  auto q = tracker_.Reserve(Pod("q", {Dev("i1", 2, true), Dev("i2", 1, true)}), "inf", 10);
  ASSERT_TRUE(q.ok()) << q.error();
  EXPECT_EQ(BusyDevices("inf").size(), 2u);
}

// --- Nodes ------------------------------------------------------------------------------------

TEST_F(TrackerTest, UnknownInstanceTypeIsAnErrorAndFitSaysWhy) {
  auto s = tracker_.UpsertNode({"odd", "trn9.huge", 0});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("odd"));
  EXPECT_THAT(s.error(), HasSubstr("'trn9.huge'"));
  EXPECT_THAT(s.error(), HasSubstr("catalog/instance-types.yaml"));
  auto names = tracker_.NodeNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "odd"), names.end()) << "kept so Fit can say why";
  const FitResult f = tracker_.Fit(DevPod("q", 1), "odd");
  EXPECT_FALSE(f.fits);
  EXPECT_TRUE(f.unresolvable);
  EXPECT_EQ(f.reason, Catalog::UnknownTypeMessage("trn9.huge"));
  EXPECT_EQ(tracker_.FitAll(DevPod("q", 1), std::vector<std::string>{"odd"})[0].reason, f.reason);
  const std::vector<std::string> none;
  EXPECT_EQ(tracker_.FitWithout(DevPod("q", 1), "odd", none).reason, f.reason);
  EXPECT_FALSE(tracker_.FewestVictims(DevPod("q", 1), "odd", none).ok());
  EXPECT_FALSE(tracker_.Reserve(DevPod("q", 1), "odd", 1).ok());
  EXPECT_FALSE(tracker_.Adopt(Record("q", "odd", {DevicePlacement({0})})).ok());
  EXPECT_FALSE(tracker_.Snapshot("odd").has_value());
  // Still an error when the same node is seen again (resync).
  EXPECT_FALSE(tracker_.UpsertNode({"odd", "trn9.huge", 0}).ok());
  // Fixing the label makes it usable.
  ASSERT_TRUE(tracker_.UpsertNode({"odd", "trn1.32xlarge", 0}).ok());
  EXPECT_TRUE(tracker_.Fit(DevPod("q", 1), "odd").fits);
}

TEST_F(TrackerTest, UnsupportedLncIsAnError) {
  auto s = tracker_.UpsertNode({"inf-lnc", "inf2.48xlarge", 2});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("LNC"));
  EXPECT_THAT(tracker_.Fit(DevPod("q", 1), "inf-lnc").reason, HasSubstr("LNC"));
  ASSERT_TRUE(tracker_.UpsertNode({"trn2", "trn2.48xlarge", 1}).ok());
  auto snap = tracker_.Snapshot("trn2");
  ASSERT_TRUE(snap.has_value());
  EXPECT_EQ(snap->shape.cores, 128);
  auto r = tracker_.Reserve(CorePod("k", 8), "trn2", 1);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_THAT(r->containers[0].placement.ids, ElementsAreArray(Range(0, 7)));
}

// Issue 18, row 6: a Node object deleted and re-created (a kubelet re-registering) does not stop
// its pods. Before the fix their holds were dropped and the node came back empty.
TEST_F(TrackerTest, RemoveNodeParksItsHoldsUntilItComesBack) {
  const std::vector<int> a_ids = Place(DevPod("a", 4), "trn");
  ASSERT_TRUE(tracker_.Reserve(DevPod("b", 1), "trn", 5).ok());
  Place(DevPod("c", 1), "inf");
  tracker_.RemoveNode("trn");
  ASSERT_TRUE(tracker_.Find("a").has_value());
  EXPECT_TRUE(tracker_.Find("a")->parked);
  EXPECT_TRUE(tracker_.Find("c").has_value());
  EXPECT_EQ(tracker_.Stats().nodes, 2);
  EXPECT_EQ(tracker_.Stats().parked, 2);
  EXPECT_THAT(tracker_.ExpireReservations(100).pods,
              ElementsAre("b"));  // reservations still expire
  EXPECT_EQ(tracker_.Stats().parked, 1);
  EXPECT_THAT(tracker_.Fit(DevPod("q", 1), "trn").reason, HasSubstr("not known"));
  tracker_.RemoveNode("never-there");  // no-op
  ASSERT_TRUE(tracker_.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(a_ids));
  EXPECT_THAT(PodsOn("trn"), ElementsAre("a"));
  EXPECT_FALSE(tracker_.Find("a")->parked);
  EXPECT_EQ(tracker_.Stats().parked, 0);
  EXPECT_EQ(tracker_.Stats().committed, 2);
  // A pod forgotten while its node is away is not brought back with it.
  tracker_.RemoveNode("trn");
  EXPECT_TRUE(tracker_.Forget("a"));
  EXPECT_EQ(tracker_.Stats().parked, 0);
  ASSERT_TRUE(tracker_.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  EXPECT_THAT(BusyDevices("trn"), IsEmpty());
  EXPECT_THAT(PodsOn("trn"), IsEmpty());
}

TEST_F(TrackerTest, NodeCannotChangeTypeWhilePodsHoldIds) {
  Place(DevPod("a", 4), "trn");
  auto s = tracker_.UpsertNode({"trn", "inf2.48xlarge", 0});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("trn1.32xlarge"));
  EXPECT_THAT(s.error(), HasSubstr("inf2.48xlarge"));
  auto snap = tracker_.Snapshot("trn");
  ASSERT_TRUE(snap.has_value());
  EXPECT_EQ(snap->info.instance_type, "trn1.32xlarge");
  EXPECT_EQ(snap->shape.devices, 16);
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 3)));
  // Re-upserting the same type keeps the holds.
  ASSERT_TRUE(tracker_.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  EXPECT_THAT(BusyDevices("trn"), ElementsAreArray(Range(0, 3)));
  EXPECT_TRUE(tracker_.Find("a").has_value());
  // Once empty, the change is accepted.
  ASSERT_TRUE(tracker_.Forget("a"));
  ASSERT_TRUE(tracker_.UpsertNode({"trn", "inf2.48xlarge", 0}).ok());
  EXPECT_EQ(tracker_.Snapshot("trn")->shape.devices, 12);
}

TEST_F(TrackerTest, NodeNamesAreSorted) {
  ASSERT_TRUE(tracker_.UpsertNode({"aaa", "inf2.xlarge", 0}).ok());
  EXPECT_THAT(tracker_.NodeNames(), ElementsAre("aaa", "inf", "inf1", "trn"));
  EXPECT_EQ(tracker_.Stats().nodes, 4);
  EXPECT_EQ(tracker_.policy(), Policy::kBestFit);
}

TEST(TrackerPolicy, FirstFitTrackerUsesLowestIds) {
  Tracker tracker(Catalog::Embedded(), Policy::kFirstFit);
  ASSERT_TRUE(tracker.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  ASSERT_TRUE(tracker.Adopt(Record("x", "trn", {DevicePlacement({4})})).ok());
  auto r = tracker.Reserve(DevPod("a", 1), "trn", 1);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->containers[0].placement.ids, ElementsAre(0));
  Tracker best(Catalog::Embedded(), Policy::kBestFit);
  ASSERT_TRUE(best.UpsertNode({"trn", "trn1.32xlarge", 0}).ok());
  ASSERT_TRUE(best.Adopt(Record("x", "trn", {DevicePlacement({4})})).ok());
  auto b = best.Reserve(DevPod("a", 1), "trn", 1);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(b->containers[0].placement.ids, ElementsAre(5));
}

TEST_F(TrackerTest, DevicesOutOfServiceAreNeverChosenAndTheirHoldersKeepTheirIds) {
  const auto supply_before = tracker_.Supply();
  // A pod recorded on 0-3 of the inf2 ring; device 2 fails under it.
  ASSERT_TRUE(tracker_.Adopt(Record("old", "inf", {DevicePlacement(Range(0, 3))})).ok());
  NodeInfo info{"inf", "inf2.48xlarge", 0};
  info.out_of_service = topology::DeviceMask{1} << 2 | topology::DeviceMask{1} << 9;
  ASSERT_TRUE(tracker_.UpsertNode(info).ok());
  EXPECT_EQ(BusyDevices("inf"), (std::vector<int>{0, 1, 2, 3, 9}));
  ASSERT_TRUE(tracker_.Find("old").has_value());
  // 4 devices: 4-7 is the one legal set left (0-3 held, 9 dead: 8 and 10-11 too short).
  auto a = tracker_.Reserve(DevPod("a", 4), "inf", 100);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_THAT(a->containers[0].placement.ids, ElementsAre(4, 5, 6, 7));
  const FitResult b = tracker_.Fit(DevPod("b", 2), "inf");
  ASSERT_TRUE(b.fits) << b.reason;
  const FitResult c = tracker_.Fit(DevPod("c", 3), "inf");
  EXPECT_FALSE(c.fits);
  EXPECT_THAT(c.reason, HasSubstr("devices 2,9 out of service"));
  // A new hold never starts on a dead device; a record there is still adopted after a restart.
  EXPECT_FALSE(
      tracker_.ReserveExact("d", "ns/d", {"inf", {{"main", DevicePlacement({9})}}}, 100).ok());
  ASSERT_TRUE(tracker_.Adopt(Record("e", "inf", {DevicePlacement({9})})).ok());
  // The old pod leaves: 0, 1 and 3 come back, 2 does not.
  ASSERT_TRUE(tracker_.Forget("old"));
  EXPECT_EQ(BusyDevices("inf"), (std::vector<int>{2, 4, 5, 6, 7, 9}));
  // The devices return: 2 is free again, 9 stays with its holder.
  info.out_of_service = 0;
  ASSERT_TRUE(tracker_.UpsertNode(info).ok());
  EXPECT_EQ(BusyDevices("inf"), (std::vector<int>{4, 5, 6, 7, 9}));
  ASSERT_TRUE(tracker_.Forget("a"));
  ASSERT_TRUE(tracker_.Forget("e"));
  EXPECT_EQ(tracker_.Supply(), supply_before);
}

TEST_F(TrackerTest, ANodeAddedWithADeadDeviceCountsOnlyItsRealSupply) {
  NodeInfo info{"trn-b", "trn1.32xlarge", 0};
  info.out_of_service = topology::DeviceMask{1} << 5;
  ASSERT_TRUE(tracker_.UpsertNode(info).ok());
  const FitResult whole = tracker_.Fit(DevPod("w", 16), "trn-b");
  EXPECT_FALSE(whole.fits);
  auto row = tracker_.Reserve(DevPod("r", 8), "trn-b", 100);
  ASSERT_TRUE(row.ok()) << row.error();
  EXPECT_THAT(row->containers[0].placement.ids, ElementsAreArray(Range(8, 15)));
}

// A relist rebuilds the holds from the pods' records; the node's failed devices are the node's,
// not the pods', and stay out of service through it.
TEST_F(TrackerTest, ARebuildKeepsTheNodesFailedDevicesOut) {
  NodeInfo info{"inf", "inf2.48xlarge", 0};
  info.out_of_service = topology::DeviceMask{1} << 5;
  ASSERT_TRUE(tracker_.UpsertNode(info).ok());
  const std::vector<RecordedPod> records = {Record("p", "inf", {DevicePlacement(Range(0, 3))})};
  tracker_.Rebuild(records, false);
  EXPECT_EQ(BusyDevices("inf"), (std::vector<int>{0, 1, 2, 3, 5}));
  const FitResult four = tracker_.Fit(DevPod("four", 4), "inf");
  ASSERT_TRUE(four.fits) << four.reason;
  auto set = tracker_.Reserve(DevPod("four", 4), "inf", 100);
  ASSERT_TRUE(set.ok()) << set.error();
  EXPECT_THAT(set->containers[0].placement.ids, Not(Contains(5)));
}

TEST_F(TrackerTest, ADeviceFailingWhileTheNodeKeepsItsOldShapeIsRefusedToo) {
  // Pods hold ids, the node comes back at another LNC (kept: their ids name the old shape's
  // cores), and one of its devices fails in the same update: no new set may contain it.
  ASSERT_TRUE(tracker_.UpsertNode({"trn2", "trn2.48xlarge", 1}).ok());
  std::vector<int> others = Range(2, 15);
  others.insert(others.begin(), 0);
  ASSERT_TRUE(tracker_.Adopt(Record("held", "trn2", {DevicePlacement(others)})).ok());
  NodeInfo info{"trn2", "trn2.48xlarge", 2};
  info.out_of_service = topology::DeviceMask{1} << 1;
  EXPECT_FALSE(tracker_.UpsertNode(info).ok());  // the shape is kept, and says so
  const FitResult one = tracker_.Fit(DevPod("one", 1), "trn2");
  EXPECT_FALSE(one.fits) << "device 1, the one left, is out of service";
  EXPECT_THAT(one.reason, HasSubstr("device 1 out of service"));
}

}  // namespace
}  // namespace toposched::tracker
