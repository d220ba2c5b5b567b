// Smaller pods first in the extender (--hold-back-hours): filter refuses a pod while the smaller
// pods waiting now need the room its start would take, counts the waiting pods as they come,
// bind and go, and lets the pod go once it has waited the age.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender/offline.h"
#include "extender/pod_requests.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "kube/timestamp.h"
#include "support/every_verdict.h"
#include "support/pods.h"

namespace toposched::extender {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kNsPerHour = int64_t{3600} * 1'000'000'000;

ExtenderOptions HoldBack(std::chrono::hours age) {
  ExtenderOptions options = testing::EveryVerdict();
  options.hold_back_age = age;
  return options;
}

class HoldBackTest : public ::testing::Test {
 protected:
  explicit HoldBackTest(ExtenderOptions options = HoldBack(std::chrono::hours(24)))
      : service_(
            topology::Catalog::Embedded(), std::move(options), writer_, metrics_,
            [] { return int64_t{1'000'000'000}; }, [this] { return wall_ns_; }) {
    // What testing::PodJson writes as every pod's creationTimestamp.
    created_ns_ = kube::ParseRfc3339("2026-11-22T10:00:00Z").value() * 1'000'000'000;
    wall_ns_ = created_ns_ + kNsPerHour;  // every pod has waited an hour
    auto node = kube::DecodeNode(testing::EksNodeJson("inf-a", "inf2.48xlarge", 12, 24));
    EXPECT_TRUE(node.ok()) << node.error();
    service_.ReplaceNodes({*node});
    service_.ReplacePods({});
  }

  static kube::Pod Pod(const std::string& name, int devices, const std::string& node = "") {
    auto pod = kube::DecodePod(testing::PodJson(
        testing::PodJsonSpec{.name = name, .count = devices, .node = node, .annotations = {}}));
    EXPECT_TRUE(pod.ok()) << pod.error();
    return *pod;
  }

  json Filter(const std::string& name, int devices) {
    auto padded = simdjson::padded_string(testing::NamesArgs(
        testing::PodJson(testing::PodJsonSpec{.name = name, .count = devices}), {"inf-a"}));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    return json::parse(service_.Filter(*args));
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  int64_t created_ns_ = 0;
  int64_t wall_ns_ = 0;
  ExtenderService service_;
};

TEST_F(HoldBackTest, ABigPodWaitsWhileSmallerWaitingPodsNeedItsRoom) {
  // Four pairs waiting need 8 of the ring's 12; an 8-device start would leave 4.
  for (int i = 0; i < 4; ++i) service_.UpsertPod(Pod("pair-" + std::to_string(i), 2));
  json r = Filter("big", 8);
  EXPECT_TRUE(r["NodeNames"].empty());
  // Unresolvable: preemption must not evict anyone to start a pod that waits on purpose.
  const std::string reason = r["FailedAndUnresolvableNodes"]["inf-a"];
  EXPECT_THAT(reason, HasSubstr("lets smaller pods go first (--hold-back-hours 24)"));
  EXPECT_THAT(reason,
              HasSubstr("4 pods waiting for less than this pod's 8 devices need 8 devices"));
  EXPECT_THAT(reason, HasSubstr("would leave 4 free"));
  EXPECT_THAT(reason, HasSubstr("it has waited 1.0 h"));
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_filter_held_back_total 1"));
  // The operators' views say so too.
  const auto why = service_.WhyPending("default/big");
  ASSERT_TRUE(why.ok()) << why.error();
  EXPECT_EQ(json::parse(*why)["held_back"], reason);
  const json fleet = json::parse(service_.FleetView(FleetQuery{}));
  bool shown = false;
  for (const json& p : fleet["pending"])
    shown |= p["pod"] == "default/big" && p["held_back"] == reason;
  EXPECT_TRUE(shown) << fleet["pending"].dump();
  // The smaller pods themselves are not held back.
  EXPECT_THAT(Filter("pair-0", 2)["NodeNames"], ElementsAre("inf-a"));

  // One pair is bound (through our bind): 10 free, three left need 6, more than 10 - 8.
  ASSERT_EQ(json::parse(service_.Bind({"pair-0", "default", "pair-0-uid", "inf-a"}))["Error"], "");
  EXPECT_TRUE(Filter("big", 8)["NodeNames"].empty());
  // One is deleted: two left need 4, still more than 2.
  service_.DeletePod(Pod("pair-1", 2));
  EXPECT_TRUE(Filter("big", 8)["NodeNames"].empty());
  // One is bound as the watch shows it (another scheduler): the last needs 2, which is left.
  service_.UpsertPod(Pod("pair-2", 2, "inf-a"));
  EXPECT_THAT(Filter("big", 8)["NodeNames"], ElementsAre("inf-a"));
}

TEST_F(HoldBackTest, ABigPodGoesInQueueOrderOnceItHasWaitedTheAge) {
  for (int i = 0; i < 4; ++i) service_.UpsertPod(Pod("pair-" + std::to_string(i), 2));
  EXPECT_TRUE(Filter("big", 8)["NodeNames"].empty());
  wall_ns_ = created_ns_ + 24 * kNsPerHour;
  EXPECT_THAT(Filter("big", 8)["NodeNames"], ElementsAre("inf-a"));
}

TEST_F(HoldBackTest, ARelistCountsTheWaitingPodsAfresh) {
  for (int i = 0; i < 4; ++i) service_.UpsertPod(Pod("pair-" + std::to_string(i), 2));
  EXPECT_TRUE(Filter("big", 8)["NodeNames"].empty());
  // The list shows one pair left waiting and the big pod; the others are gone.
  service_.ReplacePods({Pod("pair-0", 2), Pod("big", 8)});
  EXPECT_THAT(Filter("big", 8)["NodeNames"], ElementsAre("inf-a"));
  service_.ReplacePods({Pod("pair-0", 2), Pod("pair-1", 2), Pod("pair-2", 2), Pod("big", 8)});
  EXPECT_TRUE(Filter("big", 8)["NodeNames"].empty());
}

// Gang members, multi-container pods and pods whose age is unknown neither wait in the count
// nor are held back; the flag's default is off.
class HoldBackOffTest : public HoldBackTest {
 protected:
  HoldBackOffTest() : HoldBackTest(testing::EveryVerdict()) {}
};

TEST_F(HoldBackOffTest, OffByDefault) {
  for (int i = 0; i < 4; ++i) service_.UpsertPod(Pod("pair-" + std::to_string(i), 2));
  EXPECT_THAT(Filter("big", 8)["NodeNames"], ElementsAre("inf-a"));
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_filter_held_back_total 0"));
}

TEST_F(HoldBackTest, APodWithoutACreationTimestampIsNeverHeldBack) {
  for (int i = 0; i < 4; ++i) service_.UpsertPod(Pod("pair-" + std::to_string(i), 2));
  std::string pod = testing::PodJson(testing::PodJsonSpec{.name = "big", .count = 8});
  const std::string stamp = R"("creationTimestamp":"2026-11-22T10:00:00Z",)";
  pod.replace(pod.find(stamp), stamp.size(), R"("creationTimestamp":"yesterday",)");
  auto padded = simdjson::padded_string(testing::NamesArgs(pod, {"inf-a"}));
  auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_THAT(json::parse(service_.Filter(*args))["NodeNames"], ElementsAre("inf-a"));
}

TEST_F(HoldBackTest, OnlyAPodStillWaitingHasItsCreationTimestampRead) {
  const ResourceNames names;  // AWS's names
  auto waiting = RequestsOf(Pod("waiting", 2), names);
  ASSERT_TRUE(waiting.ok()) << waiting.error();
  EXPECT_EQ(waiting->created_unix_s, kube::ParseRfc3339("2026-11-22T10:00:00Z").value());
  auto bound = RequestsOf(Pod("bound", 2, "inf-a"), names);
  ASSERT_TRUE(bound.ok()) << bound.error();
  EXPECT_FALSE(bound->created_unix_s.has_value());
}

}  // namespace
}  // namespace toposched::extender
