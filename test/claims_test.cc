// The pod/annotation contract (src/claims): the keys, the one counting rule, AWS_NEURON_IDS in
// kubelet's container order both ways, and a multi-container pod's annotations read back alike by
// a restarted extender and by the device plugin.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "deviceplugin/allocation.h"

namespace toposched::claims {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using topology::Unit;

kube::Container Asking(std::string name, std::string_view resource, int64_t n) {
  kube::Container c;
  c.name = std::move(name);
  c.limits[std::string(resource)] = n;
  c.requests[std::string(resource)] = n;
  return c;
}

claims::AllocationRecord SampleRecord() {
  claims::AllocationRecord record;
  record.node = "ip-10-0-12-34.us-west-2.compute.internal";
  record.instance_type = "trn1.32xlarge";
  record.containers = {{"train", "aws.amazon.com/neuron", {4, 5, 6, 7}},
                       {"log-shipper", "aws.amazon.com/neuroncore", {16}}};
  return record;
}

TEST(ClaimsKeysTest, KeysAreTheOnesAwsAndOurPluginRead) {
  EXPECT_EQ(kAnnotationNeuronIds, "AWS_NEURON_IDS");
  EXPECT_EQ(kAnnotationAllocated, "NEURON_ALLOCATED");
  EXPECT_EQ(kAnnotationAllocTime, "NEURON_ALLOC_TIME");
  EXPECT_EQ(kAnnotationRecord, "toposched.io/allocation");
  EXPECT_EQ(kAnnotationPartition, "toposched.io/partition");
  EXPECT_EQ(kAnnotationAllocatedContainers, "toposched.io/allocated-containers");
  EXPECT_EQ(kPoolLabel, "toposched.io/ipu-pool");
  EXPECT_EQ(kKeyPrefix, "toposched.io/");
}

TEST(ClaimsAnnotationsTest, AnnotationsForAwsPluginAndOurRecord) {
  const auto annotations = AllocationAnnotations(SampleRecord(), 1743574052764891534);
  ASSERT_EQ(annotations.size(), 4u);
  EXPECT_EQ(annotations.at("AWS_NEURON_IDS"), "4,5,6,7,16");
  EXPECT_EQ(annotations.at("NEURON_ALLOCATED"), "false");
  EXPECT_EQ(annotations.at("NEURON_ALLOC_TIME"), "1743574052764891534");
  EXPECT_EQ(annotations.at("toposched.io/allocation"),
            R"({"node":"ip-10-0-12-34.us-west-2.compute.internal","instanceType":"trn1.32xlarge",)"
            R"("containers":[{"name":"train","resource":"aws.amazon.com/neuron","ids":[4,5,6,7]},)"
            R"({"name":"log-shipper","resource":"aws.amazon.com/neuroncore","ids":[16]}]})");
}

TEST(ClaimsResourcesTest, LimitElseRequestSummedOverTheNames) {
  kube::Container both;
  both.limits["aws.amazon.com/neuron"] = 2;
  both.requests["aws.amazon.com/neuron"] = 5;  // the API server forbids it; the limit wins
  both.requests["aws.amazon.com/neurondevice"] = 3;
  EXPECT_EQ(Asks(both, "aws.amazon.com/neuron"), 2);
  EXPECT_EQ(Asks(both, "aws.amazon.com/neurondevice"), 3);
  EXPECT_EQ(Asks(both, "aws.amazon.com/neuroncore"), 0);

  const auto resources = DefaultResources(std::string(kResourceNeuron), "");
  ASSERT_EQ(resources.size(), 1u);
  EXPECT_THAT(resources[0].aliases, ElementsAre("aws.amazon.com/neurondevice"));
  std::string asked_as;
  EXPECT_EQ(AsksWithAliases(both, resources[0], &asked_as), 5);
  EXPECT_EQ(asked_as, "aws.amazon.com/neuron");

  kube::Container old_name = Asking("old", kResourceNeuronDevice, 1);
  EXPECT_EQ(AsksWithAliases(old_name, resources[0], &asked_as), 1);
  EXPECT_EQ(asked_as, "aws.amazon.com/neurondevice");
}

TEST(ClaimsResourcesTest, TheExtenderSetAsSpecs) {
  ResourceSet set;
  EXPECT_TRUE(set.Manages("aws.amazon.com/neurondevice"));
  EXPECT_FALSE(set.Manages("nvidia.com/gpu"));
  auto specs = set.Specs();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "aws.amazon.com/neuron");
  EXPECT_EQ(specs[0].unit, Unit::kDevice);
  EXPECT_THAT(specs[0].aliases, ElementsAre("aws.amazon.com/neurondevice"));
  EXPECT_EQ(specs[1].name, "aws.amazon.com/neuroncore");
  EXPECT_EQ(specs[1].unit, Unit::kCore);
  set.device.clear();
  specs = set.Specs();
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].unit, Unit::kCore);
}

TEST(ClaimsResourcesTest, AsksInKubeletOrder) {
  kube::Pod pod;
  kube::Container app = Asking("app", kResourceNeuron, 2);
  app.limits[std::string(kResourceNeuronCore)] = 1;
  app.requests[std::string(kResourceNeuronCore)] = 1;
  kube::Container sidecar = Asking("proxy", kResourceNeuronCore, 1);
  sidecar.sidecar = true;
  kube::Container none;
  none.name = "none";
  pod.containers = {app, none};
  pod.init_containers = {Asking("init", kResourceNeuron, 1), sidecar};
  auto asks = ListAsks(pod, ResourceSet{}.Specs());
  ASSERT_TRUE(asks.ok()) << asks.error();
  ASSERT_EQ(asks->size(), 4u);
  const auto& a = *asks;
  EXPECT_EQ(a[0].container, "init");
  EXPECT_TRUE(a[0].init);
  EXPECT_EQ(a[0].order, 0);
  EXPECT_EQ(a[1].container, "proxy");
  EXPECT_FALSE(a[1].init);  // a sidecar runs beside the apps
  EXPECT_EQ(a[1].unit, Unit::kCore);
  EXPECT_EQ(a[2].container, "app");  // devices before cores within a container
  EXPECT_EQ(a[2].unit, Unit::kDevice);
  EXPECT_EQ(a[2].count, 2);
  EXPECT_EQ(a[2].order, 2);
  EXPECT_EQ(a[3].container, "app");
  EXPECT_EQ(a[3].unit, Unit::kCore);

  pod.containers[1] = Asking("huge", kResourceNeuron, int64_t{1} << 40);
  auto bad = ListAsks(pod, ResourceSet{}.Specs());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("not a usable count"));
}

TEST(ClaimsAnnotationsTest, AwsIdsSplitInTheOrderWritten) {
  claims::AllocationRecord record;
  record.containers = {{"init", "r", {8}}, {"a", "r", {7, 4, 5, 6}}, {"b", "r", {8}}};
  EXPECT_EQ(FormatAwsIds(record), "8,7,4,5,6,8");
  auto groups = SplitAwsIds(FormatAwsIds(record), {1, 4, 1});
  ASSERT_TRUE(groups.ok()) << groups.error();
  EXPECT_THAT(*groups, ElementsAre(ElementsAre(8), ElementsAre(7, 4, 5, 6), ElementsAre(8)));
  auto bad = SplitAwsIds("1,2", {1});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("annotation AWS_NEURON_IDS"));
  EXPECT_FALSE(SplitAwsIds("512", {1}).ok());  // beyond topology::kMaxCores
}

TEST(ClaimsAnnotationsTest, RecordFromPodPrefersOurRecord) {
  kube::Pod pod;
  pod.node_name = "n";
  pod.containers = {Asking("main", kResourceNeuron, 2)};
  const auto resources = ResourceSet{}.Specs();
  EXPECT_FALSE(HasAllocation(pod));
  auto none = RecordFromPod(pod, resources);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error(), "no allocation record");

  pod.annotations[std::string(kAnnotationNeuronIds)] = "3,2";
  EXPECT_TRUE(HasAllocation(pod));
  auto aws = RecordFromPod(pod, resources);
  ASSERT_TRUE(aws.ok()) << aws.error();
  EXPECT_EQ(aws->node, "n");
  ASSERT_EQ(aws->containers.size(), 1u);
  EXPECT_EQ(aws->containers[0],
            (claims::ContainerIds{"main", "aws.amazon.com/neuron", std::vector<int>{3, 2}}));

  claims::AllocationRecord ours{"n", "t", {{"main", "aws.amazon.com/neuron", {0, 1}}}};
  pod.annotations[std::string(kAnnotationRecord)] = claims::AllocationRecordJson(ours);
  auto record = RecordFromPod(pod, resources);
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(*record, ours);

  pod.annotations[std::string(kAnnotationRecord)] = "{";
  auto broken = RecordFromPod(pod, resources);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error(), HasSubstr("annotation toposched.io/allocation"));
}

// Issue 18: what the device plugin read from kubelet's books (toposched.io/granted) is what the
// containers hold; it wins over the bind-time record for every reader (the extender's rebuild and
// watch, the plugin itself).
TEST(ClaimsAnnotationsTest, RecordFromPodPrefersTheGrantedTruth) {
  kube::Pod pod;
  pod.node_name = "n";
  pod.containers = {Asking("main", kResourceNeuron, 2)};
  const auto resources = ResourceSet{}.Specs();
  claims::AllocationRecord bound{"n", "t", {{"main", "aws.amazon.com/neuron", {0, 1}}}};
  claims::AllocationRecord got{"n", "t", {{"main", "aws.amazon.com/neuron", {4, 5}}}};
  pod.annotations[std::string(kAnnotationRecord)] = claims::AllocationRecordJson(bound);
  pod.annotations["toposched.io/granted"] = claims::AllocationRecordJson(got);
  auto record = RecordFromPod(pod, resources);
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(*record, got);

  pod.annotations["toposched.io/granted"] = "[1]";
  auto broken = RecordFromPod(pod, resources);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error(), HasSubstr("annotation toposched.io/granted"));

  // A pod placed without a record whose truth the plugin wrote still has an allocation.
  pod.annotations.clear();
  pod.annotations["toposched.io/granted"] = claims::AllocationRecordJson(got);
  EXPECT_TRUE(HasAllocation(pod));
}

// Issue 12: an init container, a sidecar and two apps, as bind writes them (kubelet's container
// order, devices before cores in a container), read back from AWS_NEURON_IDS alone by a restarted
// extender (RecordFromPod over the extender's ResourceSet) and by the device plugin
// (ReadPodClaims), each container getting back exactly its own ids.
TEST(ClaimsRoundTripTest, MultiContainerAwsIdsReadBackAlikeByExtenderAndDevicePlugin) {
  kube::Pod pod;
  pod.ns = "ml";
  pod.name = "multi";
  pod.uid = "uid-multi";
  pod.node_name = "trn-a";
  kube::Container sidecar = Asking("proxy", kResourceNeuronCore, 1);
  sidecar.sidecar = true;
  pod.init_containers = {Asking("init", kResourceNeuron, 4), sidecar};
  kube::Container small = Asking("small", kResourceNeuron, 1);
  small.limits[std::string(kResourceNeuronCore)] = 2;
  pod.containers = {small, Asking("big", kResourceNeuron, 4)};

  // Bind's record: the init container reuses the big app's devices; kubelet's order.
  claims::AllocationRecord written;
  written.node = "trn-a";
  written.instance_type = "trn1.32xlarge";
  written.containers = {{"init", "aws.amazon.com/neuron", {4, 5, 6, 7}},
                        {"proxy", "aws.amazon.com/neuroncore", {2}},
                        {"small", "aws.amazon.com/neuron", {3}},
                        {"small", "aws.amazon.com/neuroncore", {0, 1}},
                        {"big", "aws.amazon.com/neuron", {7, 6, 5, 4}}};
  for (auto& [key, value] : AllocationAnnotations(written, 42)) {
    if (key != kAnnotationRecord) pod.annotations[key] = value;  // AWS's annotations only
  }
  EXPECT_EQ(pod.annotations.at("AWS_NEURON_IDS"), "4,5,6,7,2,3,0,1,7,6,5,4");

  // A restarted extender.
  auto record = RecordFromPod(pod, ResourceSet{}.Specs());
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(record->node, "trn-a");
  ASSERT_EQ(record->containers.size(), written.containers.size());
  for (size_t i = 0; i < written.containers.size(); ++i) {
    EXPECT_EQ(record->containers[i], written.containers[i]) << i;
  }

  // The device plugin, serving both resources.
  auto plugin = deviceplugin::ReadPodClaims(
      pod, DefaultResources(std::string(kResourceNeuron), std::string(kResourceNeuronCore)),
      "trn-a");
  ASSERT_TRUE(plugin.ok()) << plugin.error();
  EXPECT_FALSE(plugin->from_record);
  EXPECT_EQ(plugin->alloc_time, 42);
  ASSERT_EQ(plugin->claims.size(), written.containers.size());
  for (size_t i = 0; i < written.containers.size(); ++i) {
    const deviceplugin::Claim& claim = plugin->claims[i];
    std::vector<int> want = written.containers[i].ids;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(claim.container, written.containers[i].container) << i;
    EXPECT_EQ(claim.resource, written.containers[i].resource) << i;
    EXPECT_EQ(claim.ids, want) << claim.container;
    EXPECT_EQ(claim.requested, static_cast<int>(want.size())) << claim.container;
    EXPECT_FALSE(claim.served);
  }
}

}  // namespace
}  // namespace toposched::claims
