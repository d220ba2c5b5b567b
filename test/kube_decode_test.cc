// Decoding of Pod, Node, lists and watch events from API JSON (kube/decode.h).
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/decode.h"
#include "kube/objects.h"
#include "support/fake_apiserver.h"

namespace toposched::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using toposched::testing::ReadSourceFile;

std::string EksNodeJson() { return ReadSourceFile("test/support/testdata/eks_trn1_node.json"); }
std::string SidecarPodJson() {
  return ReadSourceFile("test/support/testdata/pod_with_sidecar.json");
}

// Replaces the first occurrence of `from` (which must exist) with `to`.
std::string Replace(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(KubeDecodeTest, EksNodeKeepsExtendedResourcesAndInstanceType) {
  Result<Node> node = DecodeNode(EksNodeJson());
  ASSERT_TRUE(node.ok()) << node.error();
  EXPECT_EQ(node->name, "ip-10-0-12-34.us-west-2.compute.internal");
  EXPECT_EQ(node->resource_version, "48213377");
  EXPECT_EQ(node->instance_type, "trn1.32xlarge");
  // Only the labels toposched reads are kept (the other 17 are checked, then dropped).
  EXPECT_THAT(node->labels, ElementsAre(Pair("beta.kubernetes.io/instance-type", "trn1.32xlarge"),
                                        Pair("node.kubernetes.io/instance-type", "trn1.32xlarge")));
  EXPECT_TRUE(IsNodeLabelWeRead("toposched.io/ipu-pool"));
  EXPECT_FALSE(IsNodeLabelWeRead("topology.k8s.aws/zone-id"));
  EXPECT_FALSE(node->unschedulable);
  // cpu, memory, pods, hugepages and ephemeral-storage are skipped.
  EXPECT_THAT(
      node->allocatable,
      ElementsAre(Pair("aws.amazon.com/neuron", 16), Pair("aws.amazon.com/neuroncore", 32),
                  Pair("aws.amazon.com/neurondevice", 16), Pair("vpc.amazonaws.com/efa", 8)));
  EXPECT_EQ(node->capacity, node->allocatable);
}

TEST(KubeDecodeTest, InstanceTypeFallsBackToBetaLabel) {
  const std::string json =
      Replace(EksNodeJson(), "\"node.kubernetes.io/instance-type\": \"trn1.32xlarge\",", "");
  Result<Node> node =
      DecodeNode(Replace(json, "\"beta.kubernetes.io/instance-type\": \"trn1.32xlarge\"",
                         "\"beta.kubernetes.io/instance-type\": \"inf2.48xlarge\""));
  ASSERT_TRUE(node.ok()) << node.error();
  EXPECT_EQ(node->instance_type, "inf2.48xlarge");

  Result<Node> bare = DecodeNode(R"({"metadata":{"name":"n"},"spec":{"unschedulable":true}})");
  ASSERT_TRUE(bare.ok()) << bare.error();
  EXPECT_EQ(bare->instance_type, "");
  EXPECT_TRUE(bare->unschedulable);
}

TEST(KubeDecodeTest, PodWithInitContainersSidecarAndAnnotations) {
  Result<Pod> pod = DecodePod(SidecarPodJson());
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_EQ(pod->ns, "ml");
  EXPECT_EQ(pod->name, "llama-train-0");
  EXPECT_EQ(pod->Key(), "ml/llama-train-0");
  EXPECT_EQ(pod->uid, "8c1d7f2e-3b4a-4c5d-9e6f-7a8b9c0d1e2f");
  EXPECT_EQ(pod->resource_version, "48215002");
  EXPECT_EQ(pod->node_name, "ip-10-0-12-34.us-west-2.compute.internal");
  EXPECT_EQ(pod->scheduler_name, "my-scheduler");
  EXPECT_EQ(pod->phase, "Running");
  EXPECT_EQ(pod->creation_timestamp, "2025-04-02T06:50:11Z");
  EXPECT_FALSE(pod->deleting);
  EXPECT_FALSE(pod->Terminated());
  ASSERT_EQ(pod->annotations.size(), 3u);
  EXPECT_EQ(pod->annotations.at("note"), "quotes \" and \\ and <tags> <escaped>");

  ASSERT_EQ(pod->containers.size(), 2u);
  EXPECT_EQ(pod->containers[0].name, "train");
  EXPECT_THAT(pod->containers[0].requests,
              ElementsAre(Pair("aws.amazon.com/neuron", 8), Pair("vpc.amazonaws.com/efa", 4)));
  EXPECT_THAT(pod->containers[0].limits,
              ElementsAre(Pair("aws.amazon.com/neuron", 8), Pair("vpc.amazonaws.com/efa", 4)));
  EXPECT_EQ(pod->containers[1].name, "metrics");
  EXPECT_TRUE(pod->containers[1].requests.empty());
  EXPECT_FALSE(pod->containers[0].sidecar);

  ASSERT_EQ(pod->init_containers.size(), 2u);
  EXPECT_EQ(pod->init_containers[0].name, "fetch-weights");
  EXPECT_FALSE(pod->init_containers[0].sidecar);
  EXPECT_TRUE(pod->init_containers[0].requests.empty());
  EXPECT_EQ(pod->init_containers[1].name, "log-shipper");
  EXPECT_TRUE(pod->init_containers[1].sidecar);
  EXPECT_THAT(pod->init_containers[1].requests, ElementsAre(Pair("aws.amazon.com/neuroncore", 1)));
}

TEST(KubeDecodeTest, DeletionTimestampMarksDeleting) {
  Result<Pod> pod = DecodePod(
      R"({"metadata":{"name":"p","namespace":"d","deletionTimestamp":"2025-04-02T07:00:00Z"},
          "status":{"phase":"Succeeded"}})");
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_TRUE(pod->deleting);
  EXPECT_TRUE(pod->Terminated());
}

// An MPIJob worker as the MPI operator makes it, with the affinity rules AWS's UltraServer guide
// asks for (anti-affinity and affinity on the server-id-4 label) and a node affinity.
constexpr char kMpiWorkerJson[] = R"({
  "metadata": {"name": "train-a-worker-1", "namespace": "default",
    "labels": {"training.kubeflow.org/job-name": "train-a", "training.kubeflow.org/job-role": "worker",
               "training.kubeflow.org/replica-index": "1", "training.kubeflow.org/operator-name": "mpi-operator",
               "leaderworkerset.sigs.k8s.io/name": "serve", "toposched.io/gang": "g",
               "app": "train", "kubernetes.io/hostname": "x"}},
  "spec": {
    "hostname": "train-a-worker-1", "subdomain": "train-a",
    "affinity": {
      "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["trn2u.48xlarge"]}]}]}},
      "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "training.kubeflow.org/job-name", "operator": "NotIn", "values": ["train-a"]}]},
         "topologyKey": "neuron.amazonaws.com/ultraserver-server-id-2"}]},
      "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
          {"labelSelector": {"matchLabels": {"training.kubeflow.org/job-role": "worker"}},
           "topologyKey": "neuron.amazonaws.com/ultraserver-server-id-4"},
          {"labelSelector": {}, "topologyKey": "topology.kubernetes.io/zone"}],
        "preferredDuringSchedulingIgnoredDuringExecution": [
          {"weight": 100, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}},
          {"weight": 1, "podAffinityTerm": null}]}},
    "containers": [{"name": "worker"}]}
})";

TEST(KubeDecodeTest, PodKeepsGangLabelsHostnameAndPodAffinityKeys) {
  Result<Pod> pod = DecodePod(std::string_view(kMpiWorkerJson));
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_THAT(pod->labels, ElementsAre(Pair("leaderworkerset.sigs.k8s.io/name", "serve"),
                                       Pair("toposched.io/gang", "g"),
                                       Pair("training.kubeflow.org/job-name", "train-a"),
                                       Pair("training.kubeflow.org/job-role", "worker"),
                                       Pair("training.kubeflow.org/operator-name", "mpi-operator"),
                                       Pair("training.kubeflow.org/replica-index", "1")));
  EXPECT_EQ(pod->hostname, "train-a-worker-1");
  EXPECT_EQ(pod->subdomain, "train-a");
  // Anti-affinity and node affinity are not pod affinity; required terms come first in spec order.
  EXPECT_THAT(pod->pod_affinity_topology_keys,
              ElementsAre("neuron.amazonaws.com/ultraserver-server-id-4",
                          "topology.kubernetes.io/zone", "kubernetes.io/hostname"));

  EXPECT_TRUE(IsPodLabelWeRead("training.kubeflow.org/replica-index"));
  EXPECT_TRUE(IsPodLabelWeRead("leaderworkerset.sigs.k8s.io/group-index"));
  EXPECT_TRUE(IsPodLabelWeRead("toposched.io/gang"));
  EXPECT_FALSE(IsPodLabelWeRead("app"));
  EXPECT_FALSE(IsPodLabelWeRead("trainer.kubeflow.org/job-role"));

  // The sample pod's labels (app, apps.kubernetes.io/pod-index) are not ours.
  Result<Pod> sidecar = DecodePod(SidecarPodJson());
  ASSERT_TRUE(sidecar.ok()) << sidecar.error();
  EXPECT_TRUE(sidecar->labels.empty());
  EXPECT_TRUE(sidecar->pod_affinity_topology_keys.empty());
  EXPECT_EQ(sidecar->hostname, "");
}

TEST(KubeDecodeTest, PodUpstreamSchedulingGroupAndWorkloadRef) {
  Result<Pod> pod = DecodePod(std::string_view(
      R"({"metadata":{"name":"p"},"spec":{"schedulingGroup":{"podGroupName":"train-0"},)"
      R"("workloadRef":{"name":"job","podGroup":"workers","podGroupReplicaKey":"2"}}})"));
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_EQ(pod->scheduling_group, "train-0");
  ASSERT_TRUE(pod->workload_ref.has_value());
  EXPECT_EQ(*pod->workload_ref, (Pod::WorkloadRef{"job", "workers", "2"}));
  // Absent (1.20) or null: nothing.
  Result<Pod> none = DecodePod(std::string_view(
      R"({"metadata":{"name":"p"},"spec":{"schedulingGroup":null,"workloadRef":null}})"));
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->scheduling_group, "");
  EXPECT_FALSE(none->workload_ref.has_value());
  Result<Pod> bad =
      DecodePod(std::string_view(R"({"spec":{"schedulingGroup":{"podGroupName":4}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("spec.schedulingGroup.podGroupName"));
}

TEST(KubeDecodeTest, NullAffinityPartsAreEmpty) {
  const char* const docs[] = {
      R"({"metadata":{"labels":null},"spec":{"affinity":null,"hostname":null,"subdomain":null}})",
      R"({"spec":{"affinity":{"podAffinity":null,"podAntiAffinity":null}}})",
      R"({"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":null,
          "preferredDuringSchedulingIgnoredDuringExecution":[]}}}})",
      R"({"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
          {"topologyKey":null},{"topologyKey":""},{}]}}}})",
      R"({"spec":{"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
          {"weight":1},{"weight":2,"podAffinityTerm":{"topologyKey":null}}]}}}})",
  };
  for (const char* json : docs) {
    Result<Pod> pod = DecodePod(std::string_view(json));
    ASSERT_TRUE(pod.ok()) << json << ": " << pod.error();
    EXPECT_TRUE(pod->labels.empty()) << json;
    EXPECT_TRUE(pod->pod_affinity_topology_keys.empty()) << json;
    EXPECT_EQ(pod->hostname, "") << json;
    EXPECT_EQ(pod->subdomain, "") << json;
  }
}

TEST(KubeDecodeTest, GangFieldsOfTheWrongTypeNameTheJsonPath) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"metadata":{"labels":["a"]}})", "metadata.labels: expected an object, got an array"},
      {R"({"metadata":{"labels":{"training.kubeflow.org/job-name":1}}})",
       "metadata.labels[\"training.kubeflow.org/job-name\"]: expected a string, got a number"},
      // A label we do not keep is still checked, as node labels are.
      {R"({"metadata":{"labels":{"app":false}}})",
       "metadata.labels[\"app\"]: expected a string, got a boolean"},
      {R"({"spec":{"hostname":3}})", "spec.hostname: expected a string, got a number"},
      {R"({"spec":{"subdomain":{}}})", "spec.subdomain: expected a string, got an object"},
      {R"({"spec":{"affinity":"x"}})", "spec.affinity: expected an object, got a string"},
      {R"({"spec":{"affinity":{"podAffinity":[]}}})",
       "spec.affinity.podAffinity: expected an object, got an array"},
      {R"({"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{}}}}})",
       "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: expected an "
       "array, got an object"},
      {R"({"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[null]}}}})",
       "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]: expected an "
       "object, got null"},
      {R"({"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
          {"topologyKey":"a"},{"topologyKey":7}]}}}})",
       "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[1].topologyKey: "
       "expected a string, got a number"},
      {R"({"spec":{"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
          {"weight":1,"podAffinityTerm":[]}]}}}})",
       "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
       "podAffinityTerm: expected an object, got an array"},
      {R"({"spec":{"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
          {"podAffinityTerm":{"topologyKey":true}}]}}}})",
       "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
       "podAffinityTerm.topologyKey: expected a string, got a boolean"},
  };
  for (const Case& c : cases) {
    Result<Pod> pod = DecodePod(std::string_view(c.json));
    ASSERT_FALSE(pod.ok()) << c.json;
    EXPECT_THAT(pod.error(), HasSubstr(c.message)) << c.json;
  }
  // Anti-affinity and node affinity are skipped without being read, like any unread field.
  Result<Pod> skipped = DecodePod(
      std::string_view(R"({"spec":{"affinity":{"podAntiAffinity":"x","nodeAffinity":7}}})"));
  ASSERT_TRUE(skipped.ok()) << skipped.error();
}

TEST(KubeDecodeTest, MissingAndNullFieldsAreEmpty) {
  // Pods from the scheduler's cache have no kind or apiVersion; the API nulls empty fields.
  Result<Pod> pod = DecodePod(
      R"({"metadata":{"name":"a","namespace":null,"annotations":null,"deletionTimestamp":null},
          "spec":{"containers":[{"name":"c","resources":{"requests":null,"limits":{}}}],
                  "initContainers":null,"nodeName":null},
          "status":null})");
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_EQ(pod->name, "a");
  EXPECT_EQ(pod->ns, "");
  EXPECT_FALSE(pod->deleting);
  ASSERT_EQ(pod->containers.size(), 1u);
  EXPECT_TRUE(pod->containers[0].requests.empty());

  Result<Pod> empty = DecodePod("{}");
  ASSERT_TRUE(empty.ok()) << empty.error();
  EXPECT_TRUE(empty->containers.empty());
}

TEST(KubeDecodeTest, WrongTypesNameTheJsonPath) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"spec":{"containers":[{"name":"a"},{"name":"b","resources":{"requests":"4"}}]}})",
       "spec.containers[1].resources.requests: expected an object, got a string"},
      {R"({"metadata":{"name":7}})", "metadata.name: expected a string, got a number"},
      {R"({"metadata":{"annotations":{"k":true}}})",
       "metadata.annotations[\"k\"]: expected a string, got a boolean"},
      {R"({"spec":{"initContainers":{}}})",
       "spec.initContainers: expected an array, got an object"},
      {R"({"spec":{"containers":[null]}})", "spec.containers[0]: expected an object, got null"},
      {R"({"spec":[]})", "spec: expected an object, got an array"},
      {R"([])", "document: expected an object, got an array"},
      {R"("pod")", "document: expected an object"},
  };
  for (const Case& c : cases) {
    Result<Pod> pod = DecodePod(std::string_view(c.json));
    ASSERT_FALSE(pod.ok()) << c.json;
    EXPECT_THAT(pod.error(), HasSubstr(c.message)) << c.json;
  }
  Result<Node> node = DecodeNode(R"({"status":{"allocatable":{"aws.amazon.com/neuron":[1]}}})");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.error(), HasSubstr("status.allocatable[\"aws.amazon.com/neuron\"]"));
  Result<Node> unschedulable = DecodeNode(R"({"spec":{"unschedulable":"yes"}})");
  ASSERT_FALSE(unschedulable.ok());
  EXPECT_THAT(unschedulable.error(), HasSubstr("spec.unschedulable: expected a boolean"));
}

TEST(KubeDecodeTest, ExtendedQuantitiesMustBeWholeOthersAreSkipped) {
  Result<Pod> pod = DecodePod(
      R"({"spec":{"containers":[{"name":"main","resources":{
          "requests":{"cpu":"500m","memory":"1Gi","aws.amazon.com/neuroncore":"2000m",
                      "aws.amazon.com/neuron":4,"example.com/big":"1k"}}}]}})");
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_THAT(pod->containers[0].requests,
              ElementsAre(Pair("aws.amazon.com/neuron", 4), Pair("aws.amazon.com/neuroncore", 2),
                          Pair("example.com/big", 1000)));

  // The container's name comes after its resources here; the error still names it.
  Result<Pod> bad = DecodePod(
      R"({"spec":{"containers":[{"resources":{"limits":{"aws.amazon.com/neuron":"500m"}},
                                 "name":"train"}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(),
              HasSubstr("spec.containers[0].resources.limits[\"aws.amazon.com/neuron\"]"));
  EXPECT_THAT(bad.error(), HasSubstr("container \"train\""));
  EXPECT_THAT(bad.error(), HasSubstr("aws.amazon.com/neuron"));
  EXPECT_THAT(bad.error(), HasSubstr("not a whole number"));

  Result<Node> node = DecodeNode(
      R"({"metadata":{"name":"n1"},"status":{"capacity":{"aws.amazon.com/neuron":"-1"}}})");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.error(), HasSubstr("node \"n1\""));
  EXPECT_THAT(node.error(), HasSubstr("negative"));
}

TEST(KubeDecodeTest, MalformedAndTruncatedJsonIsAnErrorNotACrash) {
  const std::string pod_json = SidecarPodJson();
  const std::string node_json = EksNodeJson();
  // Every strict prefix of the object (the files end with a newline) is incomplete JSON.
  const size_t pod_end = pod_json.find_last_of('}') + 1;
  const size_t node_end = node_json.find_last_of('}') + 1;
  for (size_t length = 0; length < pod_end; length += 7) {
    EXPECT_FALSE(DecodePod(std::string_view(pod_json).substr(0, length)).ok()) << length;
  }
  EXPECT_FALSE(DecodePod(std::string_view(pod_json).substr(0, pod_end - 1)).ok());
  for (size_t length = 0; length < node_end; length += 13) {
    EXPECT_FALSE(DecodeNode(std::string_view(node_json).substr(0, length)).ok()) << length;
  }
  const char* const junk[] = {
      "",         " ",
      "null",     "{",
      "}",        "{\"metadata\":}",
      "{} {}",    "{}}",
      "{} x",     "{\"a\" 1}",
      "[1,2",     "{\"spec\":{\"containers\":[}}",
      "\xff\xfe", "{\"metadata\":{\"name\":\"a\"}} trailing",
  };
  for (const char* text : junk) {
    EXPECT_FALSE(DecodePod(std::string_view(text)).ok()) << text;
    EXPECT_FALSE(DecodeNodeList(std::string_view(text)).ok()) << text;
    EXPECT_FALSE(DecodePodWatchEvent(std::string_view(text)).ok()) << text;
  }
  // Strings that are read are validated; skipped ones are not looked at (On-Demand).
  EXPECT_FALSE(DecodePod(std::string_view(R"({"metadata":{"name":"\x"}})")).ok());
  EXPECT_FALSE(DecodePod(std::string_view("{\"metadata\":{\"name\":\"\xff\"}}")).ok());
  Result<Pod> trailing = DecodePod(pod_json + "{}");
  ASSERT_FALSE(trailing.ok());
  EXPECT_THAT(trailing.error(), HasSubstr("after the top-level value"));
}

TEST(KubeDecodeTest, PodAndNodeLists) {
  Result<ObjectList<Pod>> pods = DecodePodList(
      R"({"kind":"PodList","apiVersion":"v1",
          "metadata":{"resourceVersion":"812","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
          "items":[{"metadata":{"name":"a","namespace":"x"}},{"metadata":{"name":"b"}}]})");
  ASSERT_TRUE(pods.ok()) << pods.error();
  EXPECT_EQ(pods->resource_version, "812");
  EXPECT_EQ(pods->continue_token, "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ");
  ASSERT_EQ(pods->items.size(), 2u);
  EXPECT_EQ(pods->items[1].name, "b");

  Result<ObjectList<Node>> nodes =
      DecodeNodeList(R"({"kind":"NodeList","metadata":{"resourceVersion":"9"},"items":null})");
  ASSERT_TRUE(nodes.ok()) << nodes.error();
  EXPECT_TRUE(nodes->items.empty());
  EXPECT_EQ(nodes->continue_token, "");

  Result<ObjectList<Node>> bad = DecodeNodeList(R"({"items":[{"metadata":{"labels":[]}}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("items[0].metadata.labels: expected an object"));
  EXPECT_FALSE(DecodeNodeList("null").ok());
}

TEST(KubeDecodeTest, PaddedInputIsDecodedInPlace) {
  const simdjson::padded_string padded(EksNodeJson());
  Result<Node> node = DecodeNode(padded);
  ASSERT_TRUE(node.ok()) << node.error();
  EXPECT_EQ(node->instance_type, "trn1.32xlarge");
}

TEST(KubeDecodeTest, WatchEvents) {
  Result<WatchEvent<Pod>> added = DecodePodWatchEvent(
      R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"41"}}})");
  ASSERT_TRUE(added.ok()) << added.error();
  EXPECT_EQ(added->type, WatchEventType::kAdded);
  EXPECT_EQ(added->object.name, "p");
  EXPECT_EQ(added->resource_version, "41");

  Result<WatchEvent<Node>> deleted = DecodeNodeWatchEvent(
      R"({"type":"DELETED","object":{"metadata":{"name":"n","resourceVersion":"42"}}})");
  ASSERT_TRUE(deleted.ok()) << deleted.error();
  EXPECT_EQ(deleted->type, WatchEventType::kDeleted);
  EXPECT_EQ(deleted->object.name, "n");

  Result<WatchEvent<Pod>> bookmark = DecodePodWatchEvent(
      R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{
          "resourceVersion":"12746","annotations":{"k8s.io/initial-events-end":"true"}}}})");
  ASSERT_TRUE(bookmark.ok()) << bookmark.error();
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_EQ(bookmark->resource_version, "12746");

  Result<WatchEvent<Pod>> error = DecodePodWatchEvent(
      R"json({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},
          "status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired",
          "code":410}})json");
  ASSERT_TRUE(error.ok()) << error.error();
  EXPECT_EQ(error->type, WatchEventType::kError);
  EXPECT_EQ(error->error_code, 410);
  EXPECT_EQ(error->error_message, "too old resource version: 1 (2)");

  // A writer that puts the object first still decodes.
  Result<WatchEvent<Pod>> reversed = DecodePodWatchEvent(
      R"({"object":{"metadata":{"name":"q","resourceVersion":"7"}},"type":"MODIFIED"})");
  ASSERT_TRUE(reversed.ok()) << reversed.error();
  EXPECT_EQ(reversed->type, WatchEventType::kModified);
  EXPECT_EQ(reversed->object.name, "q");
  EXPECT_EQ(reversed->resource_version, "7");
  Result<WatchEvent<Pod>> reversed_error =
      DecodePodWatchEvent(R"({"object":{"code":410,"message":"gone"},"type":"ERROR"})");
  ASSERT_TRUE(reversed_error.ok()) << reversed_error.error();
  EXPECT_EQ(reversed_error->error_code, 410);

  const char* const bad[] = {
      R"({"type":"UPSERTED","object":{}})",
      R"({"type":"ADDED"})",
      R"({"object":{}})",
      R"({"type":3,"object":{}})",
      R"({"type":"ADDED","object":"pod"})",
      R"({"type":"ADDED","object":{"spec":{"containers":{}}}})",
      R"({"type":"ERROR","object":{"code":"410"}})",
  };
  for (const char* line : bad) {
    EXPECT_FALSE(DecodePodWatchEvent(std::string_view(line)).ok()) << line;
  }
}

TEST(KubeDecodeTest, ValueLevelDecodersReadEmbeddedObjects) {
  // The shape of the scheduler's ExtenderArgs: a pod, then a NodeList (or null).
  const std::string args = "{\"pod\":" + SidecarPodJson() +
                           ",\"nodes\":{\"metadata\":{},\"items\":[" + EksNodeJson() + "," +
                           EksNodeJson() + "]},\"nodenames\":null}";
  const simdjson::padded_string padded(args);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  ASSERT_EQ(parser.iterate(padded).get(document), simdjson::SUCCESS);
  simdjson::ondemand::object root;
  ASSERT_EQ(document.get_object().get(root), simdjson::SUCCESS);
  int seen = 0;
  for (auto field_result : root) {
    simdjson::ondemand::field field;
    ASSERT_EQ(std::move(field_result).get(field), simdjson::SUCCESS);
    std::string_view key;
    ASSERT_EQ(field.unescaped_key().get(key), simdjson::SUCCESS);
    if (key == "pod") {
      Result<Pod> pod = DecodePod(field.value(), "pod");
      ASSERT_TRUE(pod.ok()) << pod.error();
      EXPECT_EQ(pod->name, "llama-train-0");
      ++seen;
    } else if (key == "nodes") {
      Result<std::vector<Node>> nodes = DecodeNodeListItems(field.value(), "nodes");
      ASSERT_TRUE(nodes.ok()) << nodes.error();
      ASSERT_EQ(nodes->size(), 2u);
      EXPECT_EQ((*nodes)[1].allocatable.at("aws.amazon.com/neuron"), 16);
      ++seen;
    } else if (key == "nodenames") {
      Result<std::vector<Node>> none = DecodeNodeListItems(field.value());
      ASSERT_TRUE(none.ok()) << none.error();
      EXPECT_TRUE(none->empty());
      ++seen;
    }
  }
  EXPECT_EQ(seen, 3);

  const simdjson::padded_string bad(
      std::string(R"({"nodes":{"items":[{"metadata":{"labels":{"a":1}}}]}})"));
  ASSERT_EQ(parser.iterate(bad).get(document), simdjson::SUCCESS);
  simdjson::ondemand::value nodes;
  ASSERT_EQ(document.find_field("nodes").get(nodes), simdjson::SUCCESS);
  Result<std::vector<Node>> result = DecodeNodeListItems(nodes, "nodes");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.error(),
              HasSubstr("nodes.items[0].metadata.labels[\"a\"]: expected a string"));
}

TEST(KubeDecodeTest, LargeNodeListDecodesQuickly) {
  // 5,000 realistic nodes (~30 MB), the size of list the extender may handle on its hot path.
  const std::string node = EksNodeJson();
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
  constexpr int kNodes = 1000;  // sanitizer and debug builds check correctness, not speed
#else
  constexpr int kNodes = 5000;
#endif
  std::string list =
      R"({"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[)";
  list.reserve(node.size() * kNodes + 200);
  for (int i = 0; i < kNodes; ++i) {
    if (i > 0) list += ',';
    list += Replace(node, "ip-10-0-12-34.us-west-2.compute.internal\",\n    \"uid\"",
                    "node-" + std::to_string(i) + "\",\n    \"uid\"");
  }
  list += "]}";
  const simdjson::padded_string padded(list);
  // The first call also grows this thread's parser; the extender's later calls reuse it.
  for (const char* pass : {"first", "warm"}) {
    const auto start = std::chrono::steady_clock::now();
    Result<ObjectList<Node>> nodes = DecodeNodeList(padded);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(nodes.ok()) << nodes.error();
    ASSERT_EQ(nodes->items.size(), static_cast<size_t>(kNodes));
    EXPECT_EQ(nodes->items[kNodes - 7].name, "node-" + std::to_string(kNodes - 7));
    EXPECT_EQ(nodes->items[kNodes - 7].allocatable.at("aws.amazon.com/neuroncore"), 32);
    const double ms = std::chrono::duration<double, std::milli>(elapsed).count();
    std::printf("%s: decoded %d nodes (%.1f MB) in %.1f ms (%.0f MB/s)\n", pass, kNodes,
                static_cast<double>(list.size()) / 1e6, ms,
                static_cast<double>(list.size()) / 1e3 / ms);
    RecordProperty(std::string(pass) + "_decode_ms", std::to_string(ms));
  }
}

}  // namespace
}  // namespace toposched::kube
