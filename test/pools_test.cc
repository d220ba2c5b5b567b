// Shared pools: the pools file, the buddy-tree rules on an IPU-POD, and the tracker sharing one
// pool between several head nodes.
#include "topology/pools.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pools_fixtures.h"
#include "tracker/tracker.h"

namespace toposched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using topology::PoolSet;
using tracker::PodSpec;
using tracker::Tracker;

const topology::Catalog& Cat() { return topology::Catalog::Embedded(); }

PoolSet Pools(const char* text = testing::kTwoPools) {
  auto parsed = PoolSet::Parse(text, "pools.yaml", Cat());
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? std::move(parsed).value() : PoolSet{};
}

PodSpec Ipus(const std::string& uid, int n) {
  return PodSpec{uid, "default/" + uid, {{"main", {topology::Unit::kDevice, n}, false}}};
}

std::vector<int> Ids(const tracker::PodAllocation& a) { return a.containers.at(0).placement.ids; }

TEST(PoolFileTest, ParsesKindAndSize) {
  PoolSet pools = Pools();
  ASSERT_NE(pools.Find("pod-a"), nullptr);
  EXPECT_EQ(pools.Find("pod-a")->size, 16);
  EXPECT_EQ(pools.Find("pod64")->size, 64);
  EXPECT_THAT(pools.Find("pod64")->shape_type->sizes, ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_EQ(pools.Names(), "pod-a, pod64");
}

TEST(PoolFileTest, RefusesBadDefinitionsWithTheReason) {
  struct Case {
    const char* yaml;
    const char* says;
  } cases[] = {
      {"pools:\n  - name: p\n    kind: ipu-pod16\n    size: 12\n", "size 12 is not a power of two"},
      {"pools:\n  - name: p\n    kind: ipu-pod16\n    size: 0\n", "not a power of two"},
      {"pools:\n  - name: p\n    kind: ipu-pod16\n    size: 128\n", "over the 64 devices"},
      {"pools:\n  - name: p\n    kind: ipu-pod99\n", "kind 'ipu-pod99' is not in the catalog"},
      {"pools:\n  - name: p\n    kind: inf2.48xlarge\n", "needs rule aligned"},
      {"pools:\n  - name: p\n    kind: ipu-pod16\n  - name: p\n    kind: ipu-pod16\n",
       "defined twice"},
      {"pools:\n  - name: p\n    kind: ipu-pod16\n    colour: red\n", "unknown key 'colour'"},
      {"pool: []\n", "expected a map with a 'pools' list"},
      {"pools:\n  - kind: ipu-pod16\n", "pool name is missing"},
      {"pools:\n  - name: p\n", "pool p: kind is missing"},
      {"pools:\n  - name: [a]\n    kind: ipu-pod16\n", "pool name must be"},
      {"pools: [\n", "pools.yaml"},
  };
  for (const auto& c : cases) {
    auto parsed = PoolSet::Parse(c.yaml, "pools.yaml", Cat());
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_THAT(parsed.error(), HasSubstr(c.says)) << c.yaml;
    EXPECT_THAT(parsed.error(), HasSubstr("pools.yaml")) << c.yaml;
  }
}

class PoolTrackerTest : public ::testing::Test {
 protected:
  PoolTrackerTest() : pools_(Pools()), tracker_(Cat(), topology::Policy::kBestFit, &pools_) {
    EXPECT_TRUE(tracker_.UpsertNode({"head-1", "m5.8xlarge", 0, "pod-a"}).ok());
    EXPECT_TRUE(tracker_.UpsertNode({"head-2", "m5.8xlarge", 0, "pod-a"}).ok());
    EXPECT_TRUE(tracker_.UpsertNode({"trn", "trn1.32xlarge", 0, ""}).ok());
  }
  std::vector<int> Reserve(const std::string& uid, int n, const std::string& node) {
    auto r = tracker_.Reserve(Ipus(uid, n), node, 1'000'000'000'000);
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? Ids(*r) : std::vector<int>{};
  }

  PoolSet pools_;
  Tracker tracker_;
};

TEST_F(PoolTrackerTest, SizesMustBePowersOfTwo) {
  auto fit = tracker_.Fit(Ipus("u", 3), "head-1");
  EXPECT_FALSE(fit.fits);
  EXPECT_TRUE(fit.unresolvable);
  EXPECT_THAT(fit.reason, HasSubstr("3"));
  for (int n : {1, 2, 4, 8, 16}) EXPECT_TRUE(tracker_.Fit(Ipus("u", n), "head-1").fits) << n;
  EXPECT_FALSE(tracker_.Fit(Ipus("u", 32), "head-1").fits);
}

TEST_F(PoolTrackerTest, PartitionsAreAlignedAndBestFitPacksTheDensestSubtree) {
  EXPECT_THAT(Reserve("a", 1, "head-1"), ElementsAre(0));
  // A second single IPU goes beside the first (the densest subtree), not into a free half.
  EXPECT_THAT(Reserve("b", 1, "head-2"), ElementsAre(1));
  // Two IPUs: the aligned pair in the already-broken quad.
  EXPECT_THAT(Reserve("c", 2, "head-1"), ElementsAre(2, 3));
  EXPECT_THAT(Reserve("d", 4, "head-2"), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(Reserve("e", 8, "head-1"), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_FALSE(tracker_.Fit(Ipus("f", 1), "head-2").fits);
  // Freeing b and c leaves {1, 2, 3}: a 2-IPU request needs an aligned pair, so it takes {2,3}.
  ASSERT_TRUE(tracker_.Forget("b"));
  ASSERT_TRUE(tracker_.Forget("c"));
  EXPECT_THAT(Reserve("g", 2, "head-2"), ElementsAre(2, 3));
  EXPECT_THAT(Reserve("h", 1, "head-2"), ElementsAre(1));
}

TEST_F(PoolTrackerTest, TwoNodesOnOnePoolNeverOverlap) {
  auto a = Reserve("a", 8, "head-1");
  auto b = Reserve("b", 8, "head-2");
  std::vector<int> both = a;
  both.insert(both.end(), b.begin(), b.end());
  std::sort(both.begin(), both.end());
  EXPECT_EQ(std::adjacent_find(both.begin(), both.end()), both.end());
  // The pool is full for every node on it; the private node is untouched.
  EXPECT_FALSE(tracker_.Fit(Ipus("c", 1), "head-1").fits);
  EXPECT_FALSE(tracker_.Fit(Ipus("c", 1), "head-2").fits);
  EXPECT_TRUE(tracker_.Fit(Ipus("c", 16), "trn").fits);
  // Freed through one node, free for the other.
  ASSERT_TRUE(tracker_.Forget("a"));
  EXPECT_TRUE(tracker_.Fit(Ipus("c", 8), "head-2").fits);
  EXPECT_EQ(tracker_.PoolOf("head-1"), "pod-a");
  EXPECT_EQ(tracker_.PoolOf("trn"), "");
}

TEST_F(PoolTrackerTest, UnknownPoolLabelFailsThatNodeNamingThePool) {
  auto s = tracker_.UpsertNode({"head-x", "m5.8xlarge", 0, "pod-zz"});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("pod-zz"));
  auto fit = tracker_.Fit(Ipus("u", 1), "head-x");
  EXPECT_FALSE(fit.fits);
  EXPECT_TRUE(fit.unresolvable);
  EXPECT_THAT(fit.reason, HasSubstr("toposched.io/ipu-pool=pod-zz"));
  EXPECT_THAT(fit.reason, HasSubstr("defined pools: pod-a, pod64"));
}

TEST_F(PoolTrackerTest, NoPoolsFileMeansALabelledNodeFailsClearly) {
  Tracker plain(Cat(), topology::Policy::kBestFit);
  EXPECT_FALSE(plain.UpsertNode({"head", "m5.8xlarge", 0, "pod-a"}).ok());
  EXPECT_THAT(plain.Fit(Ipus("u", 1), "head").reason, HasSubstr("without a --pools file"));
}

TEST_F(PoolTrackerTest, RemovingAHeadNodeKeepsThePoolsHolds) {
  Reserve("a", 16, "head-1");
  tracker_.RemoveNode("head-1");
  EXPECT_FALSE(tracker_.Fit(Ipus("b", 1), "head-2").fits);
  ASSERT_TRUE(tracker_.Forget("a"));
  EXPECT_TRUE(tracker_.Fit(Ipus("b", 16), "head-2").fits);
}

TEST_F(PoolTrackerTest, ReleasingHoldsKeepTheirIdsThroughRebuildUntilForgotten) {
  Reserve("a", 4, "head-1");
  ASSERT_TRUE(tracker_.BeginRelease("a").ok());
  EXPECT_EQ(tracker_.Stats().releasing, 1);
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  EXPECT_TRUE(tracker_.ExpireReservations(int64_t{1} << 62).empty());
  tracker_.Rebuild({}, /*keep_reservations=*/false);
  EXPECT_EQ(tracker_.PoolUsage("pod-a")->busy_devices(), 0xFu);
  EXPECT_FALSE(tracker_.Commit("a").ok());
  ASSERT_TRUE(tracker_.Forget("a"));
  EXPECT_EQ(tracker_.PoolUsage("pod-a")->busy_devices(), 0u);
}

TEST_F(PoolTrackerTest, HoldReleasingTakesAnOrphanPartitionsDevices) {
  ASSERT_TRUE(tracker_.HoldReleasing("partition/x", "partition x", "pod-a", {8, 9, 10, 11}).ok());
  EXPECT_THAT(Reserve("a", 8, "head-1"), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_TRUE(tracker_.Fit(Ipus("b", 4), "head-2").fits);  // 12-15
  EXPECT_FALSE(tracker_.Fit(Ipus("b", 8), "head-2").fits);
  auto clash = tracker_.HoldReleasing("partition/y", "partition y", "pod-a", {0});
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.error(), HasSubstr("held by a"));
  EXPECT_FALSE(tracker_.HoldReleasing("partition/z", "partition z", "nope", {0}).ok());
  EXPECT_FALSE(tracker_.HoldReleasing("partition/w", "partition w", "pod-a", {16}).ok());
  ASSERT_TRUE(tracker_.Forget("partition/x"));
  EXPECT_TRUE(tracker_.Fit(Ipus("b", 8), "head-2").fits);
}

TEST_F(PoolTrackerTest, PreemptionOnAPoolCountsOnlyThatNodesPods) {
  Reserve("a", 8, "head-1");
  Reserve("b", 8, "head-2");
  auto victims = tracker_.FewestVictims(Ipus("big", 8), "head-1", std::vector<std::string>{"a"});
  ASSERT_TRUE(victims.ok()) << victims.error();
  EXPECT_THAT(*victims, ElementsAre("a"));
  // b holds ids through head-2: kube-scheduler cannot offer it as a victim on head-1.
  EXPECT_FALSE(
      tracker_.FewestVictims(Ipus("all", 16), "head-1", std::vector<std::string>{"a", "b"}).ok());
}

}  // namespace
}  // namespace toposched
