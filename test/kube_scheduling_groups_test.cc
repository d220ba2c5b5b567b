// Upstream's PodGroup and Workload read as a gang's size (kube/scheduling_groups.h): strict
// decoding of each version's JSON, and finding the version that serves PodGroups once.
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/scheduling_groups.h"

namespace toposched::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PodGroup, GangMinCountIsTheSizeBasicIsNoGang) {
  // As 1.37's v1beta1 and 1.36's v1alpha2 serve them (status and other fields ignored).
  auto gang = DecodePodGroupMinCount(
      R"({"apiVersion":"scheduling.k8s.io/v1beta1","kind":"PodGroup","metadata":{"name":"t"},)"
      R"("spec":{"schedulingPolicy":{"gang":{"minCount":4}},"disruptionMode":{"all":{}}},)"
      R"("status":{"conditions":[]}})");
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_EQ(*gang, 4);
  auto basic = DecodePodGroupMinCount(
      R"({"kind":"PodGroup","spec":{"podGroupTemplateRef":{"workloadName":"w","templateName":"x"},)"
      R"("schedulingPolicy":{"basic":{}}}})");
  ASSERT_TRUE(basic.ok()) << basic.error();
  EXPECT_EQ(*basic, 0);
  EXPECT_EQ(PodGroupPath("v1beta1", "ml", "train-0"),
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train-0");
}

TEST(PodGroup, MalformedIsAnErrorNamingTheObjectAndPath) {
  const std::map<std::string, std::string> bad = {
      {"{", "invalid JSON"},
      {"[]", "PodGroup: "},
      {R"({"kind":"PodGroup"})", "PodGroup: no spec"},
      {R"({"spec":null})", "PodGroup: spec: expected an object"},
      {R"({"spec":{}})", "PodGroup: spec: no schedulingPolicy"},
      {R"({"spec":{"schedulingPolicy":{}}})", "neither basic nor gang"},
      {R"({"spec":{"schedulingPolicy":{"basic":{},"gang":{"minCount":2}}}})", "both"},
      {R"({"spec":{"schedulingPolicy":{"gang":{}}}})", "spec.schedulingPolicy.gang: no minCount"},
      {R"({"spec":{"schedulingPolicy":{"gang":{"minCount":"4"}}}})",
       "spec.schedulingPolicy.gang.minCount: expected an integer"},
      {R"({"spec":{"schedulingPolicy":{"gang":{"minCount":0}}}})", "0 is not a count"},
      {R"({"spec":{"schedulingPolicy":{"gang":{"minCount":2.5}}}})", "expected an integer"},
      {R"({"spec":{"schedulingPolicy":{"gang":{"minCount":4294967296}}}})", "not a count"},
      {R"({"kind":"Workload","spec":{"schedulingPolicy":{"basic":{}}}})", "expected \"PodGroup\""},
  };
  for (const auto& [json, want] : bad) {
    auto got = DecodePodGroupMinCount(json);
    ASSERT_FALSE(got.ok()) << json;
    EXPECT_THAT(got.error(), HasSubstr(want)) << json;
    EXPECT_THAT(got.error(), HasSubstr("PodGroup: ")) << json;
  }
}

TEST(Workload, ThePodsGroupsPolicy) {
  const std::string workload =
      R"({"apiVersion":"scheduling.k8s.io/v1alpha1","kind":"Workload","metadata":{"name":"wl"},)"
      R"("spec":{"controllerRef":{"kind":"Job","name":"j"},"podGroups":[)"
      R"({"name":"driver","policy":{"basic":{}}},)"
      R"({"name":"workers","policy":{"gang":{"minCount":8}}}]}})";
  EXPECT_EQ(*DecodeWorkloadMinCount(workload, "workers"), 8);
  EXPECT_EQ(*DecodeWorkloadMinCount(workload, "driver"), 0);
  auto missing = DecodeWorkloadMinCount(workload, "ps");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), "Workload: spec.podGroups has no group \"ps\"");
  auto nameless =
      DecodeWorkloadMinCount(R"({"spec":{"podGroups":[{"policy":{"basic":{}}}]}})", "workers");
  ASSERT_FALSE(nameless.ok());
  EXPECT_THAT(nameless.error(), HasSubstr("spec.podGroups[0]: no name"));
  auto bad_policy = DecodeWorkloadMinCount(
      R"({"spec":{"podGroups":[{"name":"other","policy":{"gang":{"minCount":-1}}}]}})", "workers");
  ASSERT_FALSE(bad_policy.ok());  // every group is checked, not only the one asked for
  EXPECT_THAT(bad_policy.error(), HasSubstr("spec.podGroups[0].policy.gang.minCount"));
  EXPECT_FALSE(DecodeWorkloadMinCount(R"({"spec":{}})", "workers").ok());
  // Found by scheduling_groups_fuzz: a null (or null-looking) list was iterated.
  auto null_groups = DecodeWorkloadMinCount(R"({"spec":{"podGroups":null}})", "workers");
  ASSERT_FALSE(null_groups.ok());
  EXPECT_EQ(null_groups.error(), "Workload: spec: no podGroups");
  EXPECT_FALSE(
      DecodeWorkloadMinCount(R"({"spec":{"podGroups":n[{"name":"workers"}]}})", "workers").ok());
  EXPECT_EQ(WorkloadPath("ml", "wl"),
            "/apis/scheduling.k8s.io/v1alpha1/namespaces/ml/workloads/wl");
}

// An API server serving `served` (group version -> its APIResourceList's names) and objects by
// path; every path asked is recorded.
class FakeGroups {
 public:
  std::map<std::string, std::vector<std::string>> served;
  std::map<std::string, std::string> objects;
  std::vector<std::string> asked;

  SchedulingGroups::Getter Getter() {
    return [this](std::string_view path) -> Result<HttpResponse> {
      asked.emplace_back(path);
      const std::string p(path);
      constexpr std::string_view kPrefix = "/apis/scheduling.k8s.io/";
      if (auto it = served.find(p.substr(kPrefix.size())); it != served.end()) {
        std::string body = R"({"kind":"APIResourceList","resources":[)";
        for (size_t i = 0; i < it->second.size(); ++i) {
          body += (i > 0 ? "," : "") + std::string(R"({"name":")") + it->second[i] + "\"}";
        }
        return HttpResponse{200, body + "]}"};
      }
      if (auto it = objects.find(p); it != objects.end()) return HttpResponse{200, it->second};
      if (p == "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/secret") {
        return HttpResponse{403, "{}"};
      }
      return HttpResponse{404, "404 page not found"};
    };
  }
};

TEST(SchedulingGroups, FindsTheServedVersionOnceThenReadsPodGroups) {
  FakeGroups api;
  api.served["v1alpha2"] = {"podgroups", "podgroups/status", "workloads"};
  api.served["v1beta1"] = {"priorityclasses"};  // served, without PodGroups: skipped
  api.objects["/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/train"] =
      R"({"kind":"PodGroup","spec":{"schedulingPolicy":{"gang":{"minCount":2}}}})";
  SchedulingGroups groups(api.Getter());
  EXPECT_EQ(groups.PodGroupVersion(), "");
  auto size = groups.PodGroupMinCount("ml", "train");
  ASSERT_TRUE(size.ok()) << size.error();
  EXPECT_EQ(*size, 2);
  EXPECT_EQ(groups.PodGroupVersion(), "v1alpha2");
  auto missing = groups.PodGroupMinCount("ml", "gone");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), "reading PodGroup ml/gone: not found");
  auto denied = groups.PodGroupMinCount("ml", "secret");
  ASSERT_FALSE(denied.ok());
  EXPECT_THAT(denied.error(), HasSubstr("HTTP 403 (RBAC: get podgroups in scheduling.k8s.io)"));
  EXPECT_THAT(api.asked,
              ElementsAre("/apis/scheduling.k8s.io/v1beta1", "/apis/scheduling.k8s.io/v1alpha2",
                          "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/train",
                          "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/gone",
                          "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/secret"));
}

TEST(SchedulingGroups, NoVersionServedIsAnErrorRetriedLater) {
  FakeGroups api;  // 1.20, or the gate off
  SchedulingGroups groups(api.Getter());
  auto none = groups.PodGroupMinCount("ml", "train");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error(), HasSubstr("the API server serves no PodGroups (v1beta1 not served, "
                                      "v1alpha2 not served, v1alpha3 not served)"));
  EXPECT_THAT(none.error(), HasSubstr("GenericWorkload"));
  api.served["v1beta1"] = {"podgroups"};
  api.objects["/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train"] =
      R"({"spec":{"schedulingPolicy":{"basic":{}}}})";
  auto basic = groups.PodGroupMinCount("ml", "train");
  ASSERT_TRUE(basic.ok()) << basic.error();
  EXPECT_EQ(*basic, 0);
}

TEST(SchedulingGroups, ReadsAWorkloadsPodGroup) {
  FakeGroups api;
  api.objects["/apis/scheduling.k8s.io/v1alpha1/namespaces/ml/workloads/wl"] =
      R"({"spec":{"podGroups":[{"name":"workers","policy":{"gang":{"minCount":3}}}]}})";
  SchedulingGroups groups(api.Getter());
  EXPECT_EQ(*groups.WorkloadMinCount("ml", "wl", "workers"), 3);
  auto bad = groups.WorkloadMinCount("ml", "wl", "ps");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "reading ml/wl: Workload: spec.podGroups has no group \"ps\"");
}

TEST(ResourceList, NamesOrAnError) {
  auto names = DecodeResourceNames(R"({"resources":[{"name":"podgroups"},{"name":"workloads"}]})");
  ASSERT_TRUE(names.ok()) << names.error();
  EXPECT_THAT(*names, ElementsAre("podgroups", "workloads"));
  EXPECT_FALSE(DecodeResourceNames(R"({"resources":[{"name":1}]})").ok());
  EXPECT_FALSE(DecodeResourceNames(R"({"resources":[null]})").ok());
}

}  // namespace
}  // namespace toposched::kube
