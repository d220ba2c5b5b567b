// FGD as a baseline (Weng et al., ATC'23): its fragmentation measure mapped to Neuron units, and
// its node choice through the tracker, with AWS's sets (fgd) or ours (fgd-scarcity-sets).
#include <gtest/gtest.h>

#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/demand.h"
#include "tracker/tracker.h"

namespace toposched {
namespace {

using topology::NodeShape;
using topology::NodeUsage;
using topology::Policy;
using topology::Request;
using topology::Unit;

NodeShape Shape(const char* type) {
  auto shape = NodeShape::Make(*topology::Catalog::Embedded().Find(type));
  EXPECT_TRUE(shape.ok());
  return shape.value();
}

topology::SlotCosts Mix(std::vector<Request> classes, std::vector<double> shares) {
  topology::SlotCosts costs;
  costs.classes = std::move(classes);
  costs.shares = std::move(shares);
  costs.per_slot.assign(costs.classes.size(), 0.0);
  return costs;
}

TEST(FgdTest, FreeUnitsNoLegalSetOfAClassCanUseAreItsFragments) {
  const NodeShape inf2 = Shape("inf2.24xlarge");  // 6 devices in a chain, 2 cores each
  NodeUsage usage;
  ASSERT_TRUE(usage.Take(inf2, Unit::kDevice, {2}));
  // Free: 0-1 and 3-5. No run of 4: all 5 free devices are fragments for a 4-device request;
  // none for a 1-device request.
  const auto half_and_half = Mix({{Unit::kDevice, 4}, {Unit::kDevice, 1}}, {0.5, 0.5});
  EXPECT_DOUBLE_EQ(topology::ExpectedFragmentation(inf2, usage, half_and_half), 2.5);
  // For 2 devices, 0-1 and 3-4 / 4-5 are legal: every free device is usable.
  EXPECT_DOUBLE_EQ(topology::ExpectedFragmentation(inf2, usage, Mix({{Unit::kDevice, 2}}, {1.0})),
                   0.0);
  // A core taken on device 0 leaves its other core usable by core requests only.
  ASSERT_TRUE(usage.Take(inf2, Unit::kCore, {0}));
  EXPECT_DOUBLE_EQ(topology::ExpectedFragmentation(inf2, usage, Mix({{Unit::kCore, 1}}, {1.0})),
                   0.0);
  EXPECT_DOUBLE_EQ(topology::ExpectedFragmentation(inf2, usage, Mix({{Unit::kDevice, 1}}, {1.0})),
                   0.5);
}

TEST(FgdTest, PolicyNamesAndSetRules) {
  EXPECT_EQ(topology::ParsePolicy("fgd").value(), Policy::kFgd);
  EXPECT_EQ(topology::ParsePolicy("fgd-scarcity-sets").value(), Policy::kFgdScarcitySets);
  EXPECT_EQ(topology::SetChoicePolicy(Policy::kFgd), Policy::kFirstFit);
  EXPECT_EQ(topology::SetChoicePolicy(Policy::kFgdScarcitySets), Policy::kScarcity);
}

TEST(FgdTest, TheNodeWhoseFragmentationGrowsLeastIsChosen) {
  // Two inf2.24xlarge (6-device chains). Node a holds devices 0 and 1, so its free 2-5 is one
  // run of 4; b is empty. The mix: 1-device and 4-device pods. A 1-device pod on a breaks a's
  // only run of 4 (3 free devices become fragments for the 4-class); on b it leaves 1-5, still a
  // run of 4. First-fit takes a (first in order); FGD must take b.
  for (Policy policy : {Policy::kFgd, Policy::kFgdScarcitySets}) {
    tracker::Tracker tracker(topology::Catalog::Embedded(), policy);
    ASSERT_TRUE(tracker.UpsertNode({"a", "inf2.24xlarge"}).ok());
    ASSERT_TRUE(tracker.UpsertNode({"b", "inf2.24xlarge"}).ok());
    for (const char* uid : {"h1", "h2"}) {
      const tracker::PodSpec holder{uid, uid, {{"main", {Unit::kDevice, 1}, false}}};
      ASSERT_TRUE(tracker.Reserve(holder, "a", 1'000'000'000'000).ok());
      ASSERT_TRUE(tracker.Commit(uid).ok());
    }
    for (int i = 0; i < 20; ++i) {
      tracker.ObserveDemand({"x", "x", {{"main", {Unit::kDevice, 4}, false}}});
      tracker.ObserveDemand({"y", "y", {{"main", {Unit::kDevice, 1}, false}}});
    }
    const tracker::PodSpec pod{"p", "p", {{"main", {Unit::kDevice, 1}, false}}};
    const std::vector<std::string> nodes = {"a", "b"};
    EXPECT_EQ(tracker.Rank(pod, nodes).best, 1) << topology::PolicyName(policy);
  }
}

}  // namespace
}  // namespace toposched
