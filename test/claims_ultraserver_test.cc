// UltraServer membership from node labels (claims/ultraserver.h): the labels AWS's device plugin
// sets, as in AWS's UltraServer guide, and every malformed form refused with the label named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/keys.h"
#include "claims/ultraserver.h"
#include "kube/decode.h"

namespace toposched::claims {
namespace {

using ::testing::HasSubstr;
using Labels = std::map<std::string, std::string, std::less<>>;

Labels Member(std::string server4, std::string node4, std::string server2, std::string node2) {
  return {{std::string(kLabelUltraServerMode), "1_2_4"},
          {std::string(kLabelUltraServerServerId4), std::move(server4)},
          {std::string(kLabelUltraServerNodeId4), std::move(node4)},
          {std::string(kLabelUltraServerServerId2), std::move(server2)},
          {std::string(kLabelUltraServerNodeId2), std::move(node2)},
          {"node.kubernetes.io/instance-type", "trn2u.48xlarge"}};
}

TEST(UltraServerPlace, ReadsTheLabelsOfAwsGuide) {
  auto place = UltraServerPlaceOf(Member("bog79p1y8tetj5uu", "3", "u5wy80u0o2saugxy", "1"));
  ASSERT_TRUE(place.ok()) << place.error();
  ASSERT_TRUE(place->has_value());
  const UltraServerPlace& p = **place;
  EXPECT_EQ(p.node_configs, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(p.GroupId(4), "bog79p1y8tetj5uu");
  EXPECT_EQ(p.NodeId(4), 3);
  EXPECT_EQ(p.GroupId(2), "u5wy80u0o2saugxy");
  EXPECT_EQ(p.NodeId(2), 1);
  EXPECT_EQ(p.GroupId(1), "");
  EXPECT_TRUE(p.Supports(1));
  EXPECT_TRUE(p.Supports(2));
  EXPECT_TRUE(p.Supports(4));
  EXPECT_FALSE(p.Supports(3));
}

TEST(UltraServerPlace, AnOrdinaryNodeHasNone) {
  auto place = UltraServerPlaceOf({{"node.kubernetes.io/instance-type", "trn2.48xlarge"}});
  ASSERT_TRUE(place.ok()) << place.error();
  EXPECT_FALSE(place->has_value());
}

TEST(UltraServerPlace, AConfigTheModeDoesNotListIsNotSupported) {
  Labels labels = Member("srv", "0", "half", "0");
  labels[std::string(kLabelUltraServerMode)] = "4_1";
  auto place = UltraServerPlaceOf(labels);
  ASSERT_TRUE(place.ok()) << place.error();
  EXPECT_EQ((*place)->node_configs, (std::vector<int>{1, 4}));
  EXPECT_TRUE((*place)->Supports(4));
  EXPECT_FALSE((*place)->Supports(2));  // ids present, mode says no
}

TEST(UltraServerPlace, AModeWithoutIdsSupportsOnlyOneNode) {
  auto place = UltraServerPlaceOf({{std::string(kLabelUltraServerMode), "1_2_4"}});
  ASSERT_TRUE(place.ok()) << place.error();
  EXPECT_TRUE((*place)->Supports(1));
  EXPECT_FALSE((*place)->Supports(2));
  EXPECT_FALSE((*place)->Supports(4));
}

TEST(UltraServerPlace, MalformedLabelsAreRefusedWithTheLabelNamed) {
  struct Case {
    std::string key;
    std::string value;  // empty: the label is removed
    std::string wanted;
  };
  const std::vector<Case> cases = {
      {std::string(kLabelUltraServerMode), "1_3", "'3' is not a node config"},
      {std::string(kLabelUltraServerMode), "", "'' is not a node config"},
      {std::string(kLabelUltraServerMode), "2_2", "listed twice"},
      {std::string(kLabelUltraServerMode), "1__4", "'' is not a node config"},
      {std::string(kLabelUltraServerNodeId4), "4", "not a node id from 0 to 3"},
      {std::string(kLabelUltraServerNodeId4), "-1", "not a node id from 0 to 3"},
      {std::string(kLabelUltraServerNodeId4), "1x", "not a node id from 0 to 3"},
      {std::string(kLabelUltraServerNodeId2), "2", "not a node id from 0 to 1"},
      {std::string(kLabelUltraServerServerId4), "0000000000000000", "not a real server id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + "=" + c.value);
    Labels labels = Member("srv", "0", "half", "0");
    labels[c.key] = c.value;
    auto place = UltraServerPlaceOf(labels);
    ASSERT_FALSE(place.ok());
    EXPECT_THAT(place.error(), HasSubstr(c.key));
    EXPECT_THAT(place.error(), HasSubstr(c.wanted));
  }
  Labels no_server = Member("srv", "0", "half", "0");
  no_server.erase(std::string(kLabelUltraServerServerId2));
  auto place = UltraServerPlaceOf(no_server);
  ASSERT_FALSE(place.ok());
  EXPECT_THAT(place.error(),
              HasSubstr("is set without " + std::string(kLabelUltraServerServerId2)));
  Labels no_mode = Member("srv", "0", "half", "0");
  no_mode.erase(std::string(kLabelUltraServerMode));
  place = UltraServerPlaceOf(no_mode);
  ASSERT_FALSE(place.ok());
  EXPECT_THAT(place.error(), HasSubstr(std::string(kLabelUltraServerMode)));
}

TEST(UltraServerPlace, TheDecoderKeepsTheLabels) {
  for (std::string_view key :
       {kLabelUltraServerMode, kLabelUltraServerServerId4, kLabelUltraServerNodeId4,
        kLabelUltraServerServerId2, kLabelUltraServerNodeId2}) {
    EXPECT_TRUE(kube::IsNodeLabelWeRead(key)) << key;
  }
}

}  // namespace
}  // namespace toposched::claims
