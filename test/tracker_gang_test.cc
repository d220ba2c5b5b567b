// Gangs in the tracker: all-or-nothing seats in whole UltraServer groups, ranks by node index,
// node holds that keep other pods out, expiry of the whole gang, seats becoming pods' holds, and
// gangs completed from their recorded nodes.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "topology/catalog.h"
#include "topology/limits.h"
#include "tracker/tracker.h"

namespace toposched::tracker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

PodSpec Member(const std::string& uid, int devices) {
  return PodSpec{uid, "ns/" + uid, {ContainerRequest{"main", Request{Unit::kDevice, devices}}}};
}

class GangTest : public ::testing::Test {
 protected:
  GangTest() : tracker_(catalog_, topology::Policy::kScarcity) {}

  // UltraServer `us` of four trn2u.48xlarge nodes "<us>-n<i>", with 2-node halves <us>-a, <us>-b.
  void AddUltraServer(const std::string& us) {
    for (int i = 0; i < 4; ++i) {
      NodeInfo info{us + "-n" + std::to_string(i), "trn2u.48xlarge"};
      info.groups = {NodeGroup{4, us, i}, NodeGroup{2, us + (i < 2 ? "-a" : "-b"), i % 2}};
      ASSERT_TRUE(tracker_.UpsertNode(info).ok());
      names_.push_back(info.name);
    }
  }
  void AddPlain(const std::string& name) {
    ASSERT_TRUE(tracker_.UpsertNode(NodeInfo{name, "trn2.48xlarge"}).ok());
    names_.push_back(name);
  }
  GangRequest Gang(const std::string& id, int size, int group_nodes, int devices = 16) {
    GangRequest g;
    g.id = id;
    g.size = size;
    g.group_nodes = group_nodes;
    g.member = Member(id + "-0", devices);
    return g;
  }

  const topology::Catalog& catalog_ = topology::Catalog::Embedded();
  Tracker tracker_;
  std::vector<std::string> names_;
};

TEST_F(GangTest, FourNodeGangTakesOneWholeUltraServerRankedByNodeId) {
  AddPlain("plain");
  AddUltraServer("us1");
  auto gang = tracker_.ReserveGang(Gang("ns/job", 4, 4), names_, 100);
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_THAT(gang->Nodes(), ElementsAre("us1-n0", "us1-n1", "us1-n2", "us1-n3"));
  EXPECT_EQ(tracker_.Stats().reserved, 4);
  // The nodes are held for the gang: a single pod may not use them, even where devices are free.
  auto fit = tracker_.Fit(Member("other", 1), "us1-n0");
  EXPECT_FALSE(fit.fits);
  EXPECT_THAT(fit.reason, HasSubstr("held for gang ns/job"));
  EXPECT_TRUE(tracker_.Fit(Member("other", 1), "plain").fits);
}

TEST_F(GangTest, NoPartOfAGangIsHeldWhenItCannotBePlacedWhole) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.Reserve(Member("single", 1), "us1-n2", 100).ok());
  auto gang = tracker_.ReserveGang(Gang("ns/job", 4, 4), names_, 100);
  ASSERT_FALSE(gang.ok());
  EXPECT_THAT(gang.error(), HasSubstr("cannot be placed whole"));
  EXPECT_THAT(gang.error(), HasSubstr("us1-n2"));
  EXPECT_EQ(tracker_.Stats().reserved, 1);  // only the single pod's
  EXPECT_FALSE(tracker_.FindGang("ns/job").has_value());
}

TEST_F(GangTest, TwoGangsNeverEachHoldAPartOfOneUltraServer) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.ReserveGang(Gang("ns/a", 4, 4), names_, 100).ok());
  auto second = tracker_.ReserveGang(Gang("ns/b", 4, 4), names_, 100);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.error(), HasSubstr("held for gang ns/a"));
}

TEST_F(GangTest, TwoNodeGangsShareAnUltraServersHalvesAndKeepWholeOnesWhole) {
  AddUltraServer("us1");
  AddUltraServer("us2");
  ASSERT_TRUE(tracker_.Reserve(Member("single", 1), "us2-n3", 100).ok());
  // us2 is broken already: the first 2-node gang goes there, not into the whole us1.
  auto a = tracker_.ReserveGang(Gang("ns/a", 2, 2), names_, 100);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_THAT(a->Nodes(), ElementsAre("us2-n0", "us2-n1"));
  auto b = tracker_.ReserveGang(Gang("ns/b", 2, 2), names_, 100);
  ASSERT_TRUE(b.ok()) << b.error();
  auto c = tracker_.ReserveGang(Gang("ns/c", 2, 2), names_, 100);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_THAT(b->Nodes(), ElementsAre("us1-n0", "us1-n1"));
  EXPECT_THAT(c->Nodes(), ElementsAre("us1-n2", "us1-n3"));
}

TEST_F(GangTest, MembersGetTheirWantedRankOrTheLowestFreeOneAndKeepIt) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.ReserveGang(Gang("ns/job", 4, 4), names_, 100).ok());
  auto two = tracker_.SeatGangMember("ns/job", "uid-2", 2, 100);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->rank, 2);
  EXPECT_EQ(two->node, "us1-n2");
  auto any = tracker_.SeatGangMember("ns/job", "uid-x", 2, 100);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->rank, 0);
  EXPECT_EQ(tracker_.SeatGangMember("ns/job", "uid-2", -1, 100)->rank, 2);
  ASSERT_TRUE(tracker_.SeatGangMember("ns/job", "uid-y", -1, 100).ok());
  ASSERT_TRUE(tracker_.SeatGangMember("ns/job", "uid-z", -1, 100).ok());
  auto extra = tracker_.SeatGangMember("ns/job", "uid-extra", -1, 100);
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(extra.error(), HasSubstr("one too many"));
  // A deleted member gives its seat back.
  tracker_.Forget("uid-y");
  EXPECT_TRUE(tracker_.SeatGangMember("ns/job", "uid-extra", -1, 100).ok());
}

TEST_F(GangTest, ExpiryReleasesTheWholeGangButNotItsBoundMembers) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.ReserveGang(Gang("ns/job", 4, 4), names_, 100).ok());
  ASSERT_TRUE(tracker_.SeatGangMember("ns/job", "uid-0", 0, 100).ok());
  auto bound = tracker_.CommitGangMember("ns/job", "uid-0", "ns/w0", "us1-n0");
  ASSERT_TRUE(bound.ok()) << bound.error();
  EXPECT_EQ(bound->node, "us1-n0");
  EXPECT_EQ(tracker_.Stats().reserved, 3);
  EXPECT_EQ(tracker_.Stats().committed, 1);
  EXPECT_TRUE(tracker_.ExpireReservations(99).empty());
  ASSERT_TRUE(tracker_.ExtendGang("ns/job", 200).ok());
  EXPECT_TRUE(tracker_.ExpireReservations(100).empty());
  const Expired expired = tracker_.ExpireReservations(200);
  EXPECT_THAT(expired.gangs, ElementsAre("ns/job"));
  EXPECT_THAT(expired.pods, ElementsAre());
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  EXPECT_EQ(tracker_.Stats().committed, 1);
  EXPECT_TRUE(tracker_.Fit(Member("other", 1), "us1-n1").fits);
}

TEST_F(GangTest, TheLastBoundMemberEndsTheGangsHoldOnItsNodes) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.ReserveGang(Gang("ns/job", 4, 4, 8), names_, 100).ok());
  for (int r = 0; r < 4; ++r) {
    const std::string uid = "uid-" + std::to_string(r);
    ASSERT_TRUE(tracker_.SeatGangMember("ns/job", uid, r, 100).ok());
    EXPECT_FALSE(tracker_.CommitGangMember("ns/job", uid, uid, "us1-n9").ok());  // wrong node
    ASSERT_TRUE(tracker_.CommitGangMember("ns/job", uid, uid, "us1-n" + std::to_string(r)).ok());
  }
  EXPECT_FALSE(tracker_.FindGang("ns/job").has_value());
  EXPECT_EQ(tracker_.Stats().committed, 4);
  EXPECT_TRUE(tracker_.Fit(Member("other", 8), "us1-n1").fits);  // the other half of the node
  EXPECT_TRUE(tracker_.Forget("uid-1"));
  EXPECT_TRUE(tracker_.Fit(Member("other", 16), "us1-n1").fits);
}

TEST_F(GangTest, AHalfBoundGangIsCompletedOnItsRecordedNodesNotDuplicated) {
  AddUltraServer("us1");
  AddUltraServer("us2");
  // After a restart: ranks 0 and 1 are bound on us2 (adopted from their records).
  auto adopt = [&](const std::string& uid, const std::string& node) {
    RecordedPod pod{uid, "ns/" + uid, PodAllocation{node, {}}};
    std::vector<int> all;
    for (int i = 0; i < 16; ++i) all.push_back(i);
    pod.allocation.containers.push_back(
        {"main", topology::Placement::FromIds(Unit::kDevice, all, 1)});
    ASSERT_TRUE(tracker_.Adopt(pod).ok());
  };
  adopt("uid-0", "us2-n0");
  adopt("uid-1", "us2-n1");
  GangRequest g = Gang("ns/job", 4, 4);
  g.fixed_nodes = {"us2-n0", "us2-n1", "us2-n2", "us2-n3"};
  g.bound = {{0, "uid-0"}, {1, "uid-1"}};
  auto gang = tracker_.ReserveGang(g, names_, 100);
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_EQ(tracker_.Stats().reserved, 2);
  auto seat = tracker_.SeatGangMember("ns/job", "uid-new", -1, 100);
  ASSERT_TRUE(seat.ok());
  EXPECT_EQ(seat->rank, 2);
  EXPECT_EQ(seat->node, "us2-n2");
  EXPECT_FALSE(tracker_.Fit(Member("other", 1), "us2-n0").fits);
  EXPECT_TRUE(tracker_.Fit(Member("other", 1), "us1-n0").fits);
}

TEST_F(GangTest, OneNodeGangsPreferNodesOutsideUltraServers) {
  AddUltraServer("us1");
  AddPlain("p1");
  AddPlain("p2");
  auto gang = tracker_.ReserveGang(Gang("ns/job", 2, 1), names_, 100);
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_THAT(gang->Nodes(), ElementsAre("p1", "p2"));
  auto big = tracker_.ReserveGang(Gang("ns/big", 3, 1), names_, 100);
  ASSERT_TRUE(big.ok()) << big.error();
  EXPECT_EQ(big->Nodes().size(), 3u);
}

TEST_F(GangTest, BadRequestsAreRefusedWithTheReason) {
  AddUltraServer("us1");
  auto odd = tracker_.ReserveGang(Gang("ns/job", 3, 2), names_, 100);
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(odd.error(), HasSubstr("whole 2-node groups"));
  EXPECT_FALSE(tracker_.ReserveGang(Gang("ns/job", 4, 3), names_, 100).ok());
  EXPECT_FALSE(tracker_.ReserveGang(Gang("ns/job", 0, 1), names_, 100).ok());
  GangRequest twice = Gang("ns/job", 2, 1);
  twice.fixed_nodes = {"us1-n0", "us1-n0"};
  EXPECT_FALSE(tracker_.ReserveGang(twice, names_, 100).ok());
  EXPECT_EQ(tracker_.Stats().reserved, 0);
}

// The size bound is the one GangOf checks (topology/limits.h): a gang claims accepts is never
// refused here for its size (it once was: 65536 there, 4096 here).
TEST_F(GangTest, TheSizeBoundIsTheOneClaimsAccepts) {
  AddUltraServer("us1");
  auto largest = tracker_.ReserveGang(Gang("ns/big", topology::kMaxGangSize, 1), names_, 100);
  ASSERT_FALSE(largest.ok());  // 4,096 nodes are not there, but the size itself is fine
  EXPECT_THAT(largest.error(), Not(HasSubstr("outside")));
  auto over = tracker_.ReserveGang(Gang("ns/big", topology::kMaxGangSize + 1, 1), names_, 100);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.error(), HasSubstr("outside 1..4096"));
}

TEST_F(GangTest, RemovingAGangsNodeReleasesTheGang) {
  AddUltraServer("us1");
  ASSERT_TRUE(tracker_.ReserveGang(Gang("ns/job", 4, 4), names_, 100).ok());
  tracker_.RemoveNode("us1-n3");
  EXPECT_FALSE(tracker_.FindGang("ns/job").has_value());
  EXPECT_EQ(tracker_.Stats().reserved, 0);
  EXPECT_TRUE(tracker_.Fit(Member("other", 16), "us1-n0").fits);
}

}  // namespace
}  // namespace toposched::tracker
