// The count-request rewrite (webhook/count_requests.h): each patch is applied to the pod it was
// made for (nlohmann's RFC 6902 patch) and the result checked as the API server would store it.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kube/kubeconfig.h"
#include "webhook/count_requests.h"
#include "webhook/template_store.h"

namespace toposched::webhook {
namespace {

using nlohmann::json;
using topology::Unit;

json Review(const json& pod, const std::string& operation = "CREATE", bool dry_run = false) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"namespace", "ml"},
            {"operation", operation},
            {"dryRun", dry_run},
            {"userInfo", {{"username", "admin"}}},
            {"object", pod}}}};
}

json Container(const std::string& name, const json& limits, const json& requests = nullptr) {
  json c = {{"name", name}, {"image", "app:1"}};
  if (!limits.is_null()) c["resources"]["limits"] = limits;
  if (!requests.is_null()) c["resources"]["requests"] = requests;
  return c;
}

// A vector, not an initializer list: nlohmann reads a one-element list as that element.
json Pod(const std::vector<json>& containers) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "train-0"}, {"namespace", "ml"}}},
          {"spec", {{"containers", json(containers)}}}};
}

Decision MustDecide(const json& review) {
  Result<Decision> d = Decide(review.dump());
  EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error());
  return d.ok() ? *d : Decision{};
}

json Patched(const json& pod, const Decision& d) {
  EXPECT_FALSE(d.patch.empty());
  return pod.patch(json::parse(d.patch));
}

TEST(CountRequests, EachAppContainerAskingDevicesGetsAClaimFromTheTemplateOfItsSize) {
  const json pod = Pod({Container("main", {{"aws.amazon.com/neuron", "4"}, {"cpu", "2"}},
                                  {{"aws.amazon.com/neuron", "4"}, {"cpu", "1"}}),
                        Container("log", {{"cpu", "100m"}}),
                        Container("helper", {{"aws.amazon.com/neurondevice", 1}})});
  const Decision d = MustDecide(Review(pod));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_EQ(d.ns, "ml");
  EXPECT_EQ(d.pod, "train-0");
  EXPECT_EQ(d.templates, (std::vector<ClaimSize>{{Unit::kDevice, 4}, {Unit::kDevice, 1}}));
  const json out = Patched(pod, d);
  const json& main = out["spec"]["containers"][0]["resources"];
  EXPECT_EQ(main["limits"], (json{{"cpu", "2"}}));
  EXPECT_EQ(main["requests"], (json{{"cpu", "1"}}));
  EXPECT_EQ(main["claims"], (json::array({{{"name", "toposched-neuron-0"}}})));
  EXPECT_EQ(out["spec"]["containers"][1], pod["spec"]["containers"][1]);
  const json& helper = out["spec"]["containers"][2]["resources"];
  EXPECT_EQ(helper["limits"], json::object());
  EXPECT_EQ(helper["claims"], (json::array({{{"name", "toposched-neuron-2"}}})));
  EXPECT_EQ(out["spec"]["resourceClaims"],
            (json::array({{{"name", "toposched-neuron-0"},
                           {"resourceClaimTemplateName", "toposched-neuron-devices-4-v1"}},
                          {{"name", "toposched-neuron-2"},
                           {"resourceClaimTemplateName", "toposched-neuron-devices-1-v1"}}})));
  EXPECT_EQ(out["metadata"]["annotations"]["toposched.io/count-requests"],
            "main=aws.amazon.com/neuron:4,helper=aws.amazon.com/neurondevice:1");
  ASSERT_EQ(d.rewrites.size(), 2U);
  EXPECT_EQ(d.rewrites[0],
            "main: aws.amazon.com/neuron 4 -> claim toposched-neuron-0 from "
            "toposched-neuron-devices-4-v1");

  // The answer carries the patch base64-encoded, and says what was done.
  const json response = json::parse(ResponseJson(d));
  EXPECT_EQ(response["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(response["kind"], "AdmissionReview");
  EXPECT_EQ(response["response"]["uid"], d.uid);
  EXPECT_EQ(response["response"]["allowed"], true);
  EXPECT_EQ(response["response"]["patchType"], "JSONPatch");
  EXPECT_EQ(*kube::DecodeBase64(response["response"]["patch"].get<std::string>()), d.patch);
  EXPECT_EQ(response["response"]["warnings"].size(), 2U);
}

TEST(CountRequests, ExistingClaimsAndAnnotationsAreAddedTo) {
  json pod = Pod({Container("main", {{"aws.amazon.com/neuron", 8}})});
  pod["metadata"]["annotations"] = {{"team", "a/b"}};
  pod["spec"]["resourceClaims"] = json::array({{{"name", "gpu"}, {"resourceClaimName", "x"}}});
  pod["spec"]["containers"][0]["resources"]["claims"] = json::array({{{"name", "gpu"}}});
  const json out = Patched(pod, MustDecide(Review(pod)));
  EXPECT_EQ(out["metadata"]["annotations"]["team"], "a/b");
  EXPECT_EQ(out["metadata"]["annotations"]["toposched.io/count-requests"],
            "main=aws.amazon.com/neuron:8");
  EXPECT_EQ(out["spec"]["resourceClaims"].size(), 2U);
  EXPECT_EQ(out["spec"]["resourceClaims"][0]["name"], "gpu");
  EXPECT_EQ(out["spec"]["resourceClaims"][1]["resourceClaimTemplateName"],
            "toposched-neuron-devices-8-v1");
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["claims"],
            (json::array({{{"name", "gpu"}}, {{"name", "toposched-neuron-0"}}})));
  EXPECT_FALSE(
      out["spec"]["containers"][0]["resources"]["limits"].contains("aws.amazon.com/neuron"));
}

TEST(CountRequests, CoresGetACoreRangeTemplate) {
  const json pod = Pod({Container("main", nullptr, {{"aws.amazon.com/neuroncore", "2"}})});
  const Decision d = MustDecide(Review(pod));
  EXPECT_EQ(d.templates, (std::vector<ClaimSize>{{Unit::kCore, 2}}));
  const json out = Patched(pod, d);
  EXPECT_EQ(out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            "toposched-neuron-cores-2-v1");
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["requests"], json::object());
}

TEST(CountRequests, PodsAskingNothingOtherOperationsAndDryRuns) {
  const json plain = Pod({Container("main", {{"cpu", "1"}, {"nvidia.com/gpu", 1}})});
  Decision d = MustDecide(Review(plain));
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.patch.empty());
  EXPECT_TRUE(d.templates.empty());
  json response = json::parse(ResponseJson(d));
  EXPECT_EQ(response["response"]["allowed"], true);
  EXPECT_FALSE(response["response"].contains("patch"));

  const json asking = Pod({Container("main", {{"aws.amazon.com/neuron", 2}})});
  EXPECT_TRUE(MustDecide(Review(asking, "UPDATE")).patch.empty());
  // Zero is no ask.
  EXPECT_TRUE(
      MustDecide(Review(Pod({Container("m", {{"aws.amazon.com/neuron", 0}})}))).patch.empty());
  // A dry run is rewritten the same, and says so (the server then creates no template).
  d = MustDecide(Review(asking, "CREATE", true));
  EXPECT_TRUE(d.dry_run);
  EXPECT_FALSE(d.patch.empty());
  // Another kind (a misconfigured webhook) is left alone.
  json review = Review(asking);
  review["request"]["kind"]["kind"] = "Deployment";
  review["request"]["kind"]["group"] = "apps";
  EXPECT_TRUE(MustDecide(review).patch.empty());
  // generateName: the pod is named by its prefix in logs.
  json unnamed = asking;
  unnamed["metadata"].erase("name");
  unnamed["metadata"]["generateName"] = "train-";
  EXPECT_EQ(MustDecide(Review(unnamed)).pod, "train-*");
}

TEST(CountRequests, RefusesWhatItCannotServeAndSaysWhy) {
  auto refused = [](const json& pod) {
    const Decision d = MustDecide(Review(pod));
    EXPECT_FALSE(d.allowed);
    EXPECT_TRUE(d.patch.empty());
    EXPECT_TRUE(d.templates.empty());
    const json response = json::parse(ResponseJson(d));
    EXPECT_EQ(response["response"]["allowed"], false);
    EXPECT_EQ(response["response"]["status"]["code"], 422);
    return d.message;
  };
  json init = Pod({Container("main", {{"aws.amazon.com/neuron", 1}})});
  init["spec"]["initContainers"] =
      json(std::vector<json>{Container("warmup", {{"aws.amazon.com/neuron", 1}})});
  EXPECT_NE(refused(init).find("init container \"warmup\""), std::string::npos);
  EXPECT_NE(refused(Pod({Container(
                        "main", {{"aws.amazon.com/neuron", 1}, {"aws.amazon.com/neuroncore", 2}})}))
                .find("devices or cores, not both"),
            std::string::npos);
  EXPECT_NE(refused(Pod({Container("main", {{"aws.amazon.com/neuron", 100000}})}))
                .find("more than any Neuron node has"),
            std::string::npos);
  EXPECT_NE(refused(Pod({Container("m", {{"aws.amazon.com/neuron", -2}})})).find("negative"),
            std::string::npos);
  json taken = Pod({Container("main", {{"aws.amazon.com/neuron", 1}})});
  taken["spec"]["resourceClaims"] = json::array({{{"name", "toposched-neuron-0"}}});
  EXPECT_NE(refused(taken).find("already has a resource claim named \"toposched-neuron-0\""),
            std::string::npos);
}

TEST(CountRequests, MalformedReviewsAreErrorsNamingThePlace) {
  auto error = [](const std::string& body) {
    Result<Decision> d = Decide(body);
    EXPECT_FALSE(d.ok());
    return d.ok() ? std::string() : d.error();
  };
  EXPECT_NE(error("").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error("[1]").find("expected an object"), std::string::npos);
  json review = Review(Pod({Container("main", {{"aws.amazon.com/neuron", 1}})}));
  json v1beta1 = review;
  v1beta1["apiVersion"] = "admission.k8s.io/v1beta1";
  EXPECT_NE(error(v1beta1.dump()).find("admissionReviewVersions"), std::string::npos);
  json no_uid = review;
  no_uid["request"].erase("uid");
  EXPECT_EQ(error(no_uid.dump()), "request.uid: missing");
  json no_object = review;
  no_object["request"].erase("object");
  EXPECT_NE(error(no_object.dump()).find("request.object: missing"), std::string::npos);
  json not_object = review;
  not_object["request"]["object"] = "pod";
  EXPECT_NE(error(not_object.dump()).find("request.object"), std::string::npos);
  EXPECT_FALSE(Decide(review.dump() + "x").ok());
  // A pod that cannot be read is refused with the reason (the review itself is well-formed).
  auto refusal = [](const json& r) {
    Result<Decision> d = Decide(r.dump());
    EXPECT_TRUE(d.ok() && !d->allowed);
    return d.ok() ? d->message : std::string();
  };
  json bad_containers = review;
  bad_containers["request"]["object"]["spec"]["containers"] = "main";
  EXPECT_NE(refusal(bad_containers).find("spec.containers"), std::string::npos);
  json bad_quantity = review;
  bad_quantity["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
              ["aws.amazon.com/neuron"] = "four";
  EXPECT_NE(refusal(bad_quantity).find("aws.amazon.com/neuron"), std::string::npos);
}

TEST(CountRequests, TheDeviceTemplateTriesAnAlignedGroupThenASetDevice) {
  const json t = json::parse(TemplateJson("ml", {Unit::kDevice, 4}));
  EXPECT_EQ(t["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(t["kind"], "ResourceClaimTemplate");
  EXPECT_EQ(t["metadata"]["name"], "toposched-neuron-devices-4-v1");
  EXPECT_EQ(t["metadata"]["namespace"], "ml");
  const json& devices = t["spec"]["spec"]["devices"];
  ASSERT_EQ(devices["requests"].size(), 1U);
  const json& request = devices["requests"][0];
  EXPECT_EQ(request["name"], "neuron");
  const json& choices = request["firstAvailable"];
  ASSERT_EQ(choices.size(), 2U);
  EXPECT_EQ(choices[0], (json{{"name", "aligned"},
                              {"deviceClassName", "neuron.aws.com"},
                              {"allocationMode", "ExactCount"},
                              {"count", 4}}));
  EXPECT_EQ(choices[1]["name"], "set");
  EXPECT_EQ(choices[1]["deviceClassName"], "neurondevices.toposched.io");
  EXPECT_EQ(choices[1]["count"], 1);
  EXPECT_EQ(choices[1]["selectors"][0]["cel"]["expression"],
            "\"deviceCount\" in device.attributes[\"toposched.io\"] && "
            "device.attributes[\"toposched.io\"].deviceCount == 4");
  EXPECT_EQ(devices["constraints"],
            (json::array({{{"requests", {"neuron/aligned"}},
                           {"matchAttribute", "resource.aws.com/devicegroup4_id"}}})));

  const json one = json::parse(TemplateJson("ml", {Unit::kDevice, 1}));
  EXPECT_EQ(
      one["spec"]["spec"]["devices"]["requests"][0]["exactly"],
      (json{
          {"deviceClassName", "neuron.aws.com"}, {"allocationMode", "ExactCount"}, {"count", 1}}));
  EXPECT_FALSE(one["spec"]["spec"]["devices"].contains("constraints"));

  const json cores = json::parse(TemplateJson("ml", {Unit::kCore, 2}));
  const json& exactly = cores["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["deviceClassName"], "neuroncores.toposched.io");
  EXPECT_EQ(exactly["selectors"][0]["cel"]["expression"],
            "\"coreCount\" in device.attributes[\"toposched.io\"] && "
            "device.attributes[\"toposched.io\"].coreCount == 2");
}

TEST(TemplateStoreTest, CreatesOnceRemembersAndSaysWhyItFailed) {
  std::vector<std::string> paths;
  long status = 201;  // NOLINT(google-runtime-int)
  bool transport_error = false;
  TemplateStore store(
      [&](std::string_view path, std::string_view body) -> Result<CreateAnswer> {
        paths.emplace_back(path);
        EXPECT_NE(body.find("ResourceClaimTemplate"), std::string_view::npos);
        if (transport_error) return Error{"connection refused"};
        return CreateAnswer{status, R"({"kind":"Status","message":"no way"})"};
      },
      std::chrono::seconds(600));
  const std::vector<ClaimSize> four = {{Unit::kDevice, 4}};
  ASSERT_TRUE(store.Ensure("ml", four, std::chrono::seconds(1)).ok());
  EXPECT_EQ(paths, std::vector<std::string>{
                       "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates"});
  ASSERT_TRUE(store.Ensure("ml", four, std::chrono::seconds(2)).ok());
  EXPECT_EQ(paths.size(), 1U);  // remembered
  status = 409;                 // another replica made it: fine
  ASSERT_TRUE(store.Ensure("other", four, std::chrono::seconds(2)).ok());
  ASSERT_TRUE(store.Ensure("ml", four, std::chrono::seconds(700)).ok());  // asked again
  EXPECT_EQ(paths.size(), 3U);
  status = 403;
  Status forbidden = store.Ensure("denied", four, std::chrono::seconds(3));
  ASSERT_FALSE(forbidden.ok());
  EXPECT_NE(forbidden.error().find("denied/toposched-neuron-devices-4-v1: HTTP 403: no way"),
            std::string::npos);
  EXPECT_NE(forbidden.error().find("ClusterRole"), std::string::npos);
  transport_error = true;
  Status down = store.Ensure("down", four, std::chrono::seconds(3));
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.error().find("connection refused"), std::string::npos);
  // A failure is not remembered: the next pod tries again.
  transport_error = false;
  status = 201;
  EXPECT_TRUE(store.Ensure("down", four, std::chrono::seconds(4)).ok());
  const TemplateStoreStats stats = store.stats();
  EXPECT_EQ(stats.created, 2U);
  EXPECT_EQ(stats.existed, 2U);
  EXPECT_EQ(stats.failed, 2U);
  EXPECT_EQ(stats.cached, 1U);
}

}  // namespace
}  // namespace toposched::webhook
