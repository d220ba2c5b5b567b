// Gangs (claims/gang.h): which gang a pod belongs to, every precedence step and malformed key;
// the gang record's round trip and strict decoding; the runtime env for 1-, 2- and 4-node groups;
// the pod's host name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/gang.h"
#include "claims/keys.h"
#include "kube/decode.h"

namespace toposched::claims {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kServerId4[] = "neuron.amazonaws.com/ultraserver-server-id-4";
constexpr char kServerId2[] = "neuron.amazonaws.com/ultraserver-server-id-2";

kube::Pod PodIn(std::string ns = "default", std::string name = "p") {
  kube::Pod pod;
  pod.ns = std::move(ns);
  pod.name = std::move(name);
  return pod;
}

void Note(kube::Pod& pod, std::string_view key, std::string value) {
  pod.annotations[std::string(key)] = std::move(value);
}
void Label(kube::Pod& pod, std::string_view key, std::string value) {
  pod.labels[std::string(key)] = std::move(value);
}

// An MPIJob worker as the MPI operator labels it.
kube::Pod MpiWorker(std::string job, std::string index) {
  kube::Pod pod = PodIn("default", job + "-worker-" + index);
  Label(pod, kLabelMpiJobName, job);
  Label(pod, kLabelMpiJobRole, "worker");
  Label(pod, kLabelMpiReplicaIndex, index);
  pod.hostname = pod.name;
  pod.subdomain = job;
  return pod;
}

// A LeaderWorkerSet pod: group `group`, worker `worker` of a group of `size`.
kube::Pod LwsPod(std::string lws, std::string group, std::string worker, std::string size) {
  kube::Pod pod = PodIn("default", lws + "-" + group + "-" + worker);
  Label(pod, kLabelLwsName, lws);
  Label(pod, kLabelLwsGroupIndex, group);
  Label(pod, kLabelLwsWorkerIndex, worker);
  Note(pod, kAnnotationLwsSize, size);
  return pod;
}

GangMembership MustBeMember(const kube::Pod& pod) {
  auto gang = GangOf(pod);
  EXPECT_TRUE(gang.ok()) << gang.error();
  if (!gang.ok()) return {};
  EXPECT_TRUE(gang->has_value());
  return gang->value_or(GangMembership{});
}

std::string ErrorOf(const kube::Pod& pod) {
  auto gang = GangOf(pod);
  EXPECT_FALSE(gang.ok());
  return gang.ok() ? "" : gang.error();
}

TEST(GangOf, APodWithoutGangKeysIsNoMember) {
  kube::Pod pod = PodIn();
  Label(pod, "app", "x");  // the decoder drops it anyway
  auto gang = GangOf(pod);
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_FALSE(gang->has_value());
}

TEST(GangOf, OurAnnotationNamesAGang) {
  kube::Pod pod = PodIn("ml");
  Note(pod, kAnnotationGang, "my-gang");
  Note(pod, kAnnotationGangSize, "8");
  Note(pod, kAnnotationUltraServerNodes, "4");
  Note(pod, kAnnotationGangRank, "5");
  const GangMembership gang = MustBeMember(pod);
  EXPECT_EQ(gang.id, "ml/gang:my-gang");
  EXPECT_EQ(gang.source, "toposched.io/gang");
  EXPECT_EQ(gang.size, 8);
  EXPECT_EQ(gang.group_nodes, 4);
  EXPECT_EQ(gang.index, 5);
  EXPECT_EQ(gang.job_name, "");

  kube::Pod bare = PodIn();
  Note(bare, kAnnotationGang, "g");
  const GangMembership defaults = MustBeMember(bare);
  EXPECT_EQ(defaults.size, 0);
  EXPECT_EQ(defaults.group_nodes, 1);
  EXPECT_EQ(defaults.index, -1);
}

TEST(GangOf, OurAnnotationWinsOverTheJobsLabelsAndIgnoresTheirSizeAndIndex) {
  kube::Pod pod = LwsPod("serve", "2", "1", "4");
  Note(pod, kAnnotationLwsExclusiveTopology, kServerId4);
  Note(pod, kAnnotationGang, "both-groups");
  Note(pod, kAnnotationGangSize, "8");
  const GangMembership gang = MustBeMember(pod);
  EXPECT_EQ(gang.id, "default/gang:both-groups");
  EXPECT_EQ(gang.size, 8);         // not LeaderWorkerSet's 4: that is the group's size
  EXPECT_EQ(gang.index, -1);       // not the worker index within one group
  EXPECT_EQ(gang.group_nodes, 1);  // the group's exclusive topology is not this gang's

  kube::Pod mpi = MpiWorker("train-a", "3");
  Note(mpi, kAnnotationGang, "g");
  const GangMembership regrouped = MustBeMember(mpi);
  EXPECT_EQ(regrouped.id, "default/gang:g");
  EXPECT_EQ(regrouped.index, -1);
  EXPECT_EQ(regrouped.job_name, "");
}

TEST(GangOf, LeaderWorkerSetGroupIsAGang) {
  kube::Pod pod = LwsPod("serve", "2", "3", "4");
  const GangMembership gang = MustBeMember(pod);
  EXPECT_EQ(gang.id, "default/lws:serve/2");
  EXPECT_EQ(gang.source, "LeaderWorkerSet");
  EXPECT_EQ(gang.size, 4);
  EXPECT_EQ(gang.index, 3);
  EXPECT_EQ(gang.group_nodes, 1);

  // The job's own size wins over ours; our rank hint wins over the worker index.
  Note(pod, kAnnotationGangSize, "8");
  Note(pod, kAnnotationGangRank, "0");
  const GangMembership hinted = MustBeMember(pod);
  EXPECT_EQ(hinted.size, 4);
  EXPECT_EQ(hinted.index, 0);

  // Without LeaderWorkerSet's size annotation ours counts.
  kube::Pod no_size = LwsPod("serve", "0", "0", "4");
  no_size.annotations.erase(std::string(kAnnotationLwsSize));
  Note(no_size, kAnnotationGangSize, "2");
  EXPECT_EQ(MustBeMember(no_size).size, 2);
  no_size.annotations.erase(std::string(kAnnotationGangSize));
  EXPECT_EQ(MustBeMember(no_size).size, 0);
}

TEST(GangOf, LeaderWorkerSetNeedsBothLabels) {
  kube::Pod no_group = LwsPod("serve", "1", "0", "2");
  no_group.labels.erase(std::string(kLabelLwsGroupIndex));
  EXPECT_THAT(ErrorOf(no_group), HasSubstr("label leaderworkerset.sigs.k8s.io/name is set "
                                           "without leaderworkerset.sigs.k8s.io/group-index"));
  kube::Pod no_name = LwsPod("serve", "1", "0", "2");
  no_name.labels.erase(std::string(kLabelLwsName));
  EXPECT_THAT(ErrorOf(no_name), HasSubstr("label leaderworkerset.sigs.k8s.io/group-index is set "
                                          "without leaderworkerset.sigs.k8s.io/name"));
  EXPECT_THAT(ErrorOf(LwsPod("", "1", "0", "2")),
              HasSubstr("label leaderworkerset.sigs.k8s.io/name is empty"));
  EXPECT_THAT(ErrorOf(LwsPod("serve", "", "0", "2")),
              HasSubstr("label leaderworkerset.sigs.k8s.io/group-index is empty"));
}

TEST(GangOf, MpiJobWorkersAreAGangItsLauncherIsNot) {
  const GangMembership gang = MustBeMember(MpiWorker("train-a", "3"));
  EXPECT_EQ(gang.id, "default/mpijob:train-a");
  EXPECT_EQ(gang.source, "MPIJob");
  EXPECT_EQ(gang.job_name, "train-a");
  EXPECT_EQ(gang.size, 0);  // the job says how many workers; the pod does not
  EXPECT_EQ(gang.index, 3);
  EXPECT_EQ(gang.group_nodes, 1);

  kube::Pod launcher = MpiWorker("train-a", "0");
  Label(launcher, kLabelMpiJobRole, "launcher");
  auto none = GangOf(launcher);
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_FALSE(none->has_value());
  launcher.labels.erase(std::string(kLabelMpiJobRole));
  none = GangOf(launcher);
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_FALSE(none->has_value());

  kube::Pod unnamed = MpiWorker("", "0");
  EXPECT_THAT(ErrorOf(unnamed), HasSubstr("label training.kubeflow.org/job-name is empty"));
}

// AWS's UltraServer guide states the node config only through pod affinity on the server-id
// labels; its examples must work unchanged.
TEST(GangOf, AwsGuideAffinityGivesTheNodeConfig) {
  kube::Pod four = MpiWorker("train-a", "1");
  four.pod_affinity_topology_keys = {kServerId4};
  EXPECT_EQ(MustBeMember(four).group_nodes, 4);

  kube::Pod two = MpiWorker("train-a", "1");
  two.pod_affinity_topology_keys = {"kubernetes.io/hostname", kServerId2};
  EXPECT_EQ(MustBeMember(two).group_nodes, 2);

  // The first such key wins (required terms come before preferred ones).
  kube::Pod both = MpiWorker("train-a", "1");
  both.pod_affinity_topology_keys = {kServerId4, kServerId2};
  EXPECT_EQ(MustBeMember(both).group_nodes, 4);

  kube::Pod other = MpiWorker("train-a", "1");
  other.pod_affinity_topology_keys = {"topology.kubernetes.io/zone"};
  EXPECT_EQ(MustBeMember(other).group_nodes, 1);

  // The guide's 16-worker job: preferred affinity on server-id-4, size from our annotation.
  kube::Pod big = MpiWorker("big", "15");
  big.pod_affinity_topology_keys = {kServerId4};
  Note(big, kAnnotationGangSize, "16");
  const GangMembership gang = MustBeMember(big);
  EXPECT_EQ(gang.size, 16);
  EXPECT_EQ(gang.group_nodes, 4);
  EXPECT_EQ(gang.index, 15);
}

TEST(GangOf, AffinityAsDecodedFromAwsGuideYaml) {
  auto pod = kube::DecodePod(std::string_view(R"({
    "metadata": {"name": "w-0", "namespace": "default",
      "labels": {"training.kubeflow.org/job-name": "w", "training.kubeflow.org/job-role": "worker",
                 "training.kubeflow.org/replica-index": "0"}},
    "spec": {"hostname": "w-worker-0", "subdomain": "w", "affinity": {
      "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": "neuron.amazonaws.com/ultraserver-server-id-4"}]},
      "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": "neuron.amazonaws.com/ultraserver-server-id-2"}]}}}})"));
  ASSERT_TRUE(pod.ok()) << pod.error();
  const GangMembership gang = MustBeMember(*pod);
  EXPECT_EQ(gang.group_nodes, 2);  // the affinity's key, not the anti-affinity's
  EXPECT_EQ(PodHostName(*pod), "w-worker-0.w.default.svc");
}

TEST(GangOf, UpstreamPodGroupAsDecodedFromA137Pod) {
  // 1.36+: spec.schedulingGroup names a PodGroup; its size is read from the object (size 0 here).
  auto pod = kube::DecodePod(std::string_view(R"({
    "metadata": {"name": "w-0", "namespace": "ml", "annotations": {"toposched.io/gang-rank": "3"}},
    "spec": {"schedulingGroup": {"podGroupName": "train-0"}, "affinity": {"podAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": "neuron.amazonaws.com/ultraserver-server-id-4"}]}}}})"));
  ASSERT_TRUE(pod.ok()) << pod.error();
  const GangMembership gang = MustBeMember(*pod);
  EXPECT_EQ(gang.id, "ml/podgroup:train-0");
  EXPECT_EQ(gang.source, "PodGroup");
  EXPECT_EQ(gang.job_name, "train-0");
  EXPECT_EQ(gang.size, 0);
  EXPECT_EQ(gang.group_nodes, 4);
  EXPECT_EQ(gang.index, 3);
}

TEST(GangOf, UpstreamWorkloadRefAsDecodedFromA135Pod) {
  auto pod = kube::DecodePod(std::string_view(R"({
    "metadata": {"name": "w-0", "namespace": "ml"},
    "spec": {"workloadRef": {"name": "job", "podGroup": "workers", "podGroupReplicaKey": "1"}}})"));
  ASSERT_TRUE(pod.ok()) << pod.error();
  GangMembership gang = MustBeMember(*pod);
  EXPECT_EQ(gang.id, "ml/workload:job/workers/1");
  EXPECT_EQ(gang.source, "Workload");
  EXPECT_EQ(gang.job_name, "job");
  EXPECT_EQ(gang.pod_group, "workers");
  pod->workload_ref->pod_group_replica_key.clear();
  EXPECT_EQ(MustBeMember(*pod).id, "ml/workload:job/workers");
  pod->workload_ref->pod_group.clear();
  auto bad = GangOf(*pod);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "spec.workloadRef: podGroup is empty");
}

TEST(GangOf, PrecedenceOurAnnotationThenUpstreamThenJobLabels) {
  kube::Pod pod = MpiWorker("train-a", "1");
  Label(pod, kLabelLwsName, "serve");
  Label(pod, kLabelLwsGroupIndex, "0");
  pod.workload_ref = kube::Pod::WorkloadRef{"job", "workers", ""};
  EXPECT_EQ(MustBeMember(pod).source, "Workload");
  pod.scheduling_group = "pg";
  EXPECT_EQ(MustBeMember(pod).id, "default/podgroup:pg");
  // The MPIJob's replica index is not the PodGroup's rank.
  EXPECT_EQ(MustBeMember(pod).index, -1);
  Note(pod, kAnnotationGang, "mine");
  EXPECT_EQ(MustBeMember(pod).id, "default/gang:mine");
  // Our size annotation gives an upstream group its size without reading the object.
  kube::Pod sized = PodIn();
  sized.scheduling_group = "pg";
  Note(sized, kAnnotationGangSize, "8");
  EXPECT_EQ(MustBeMember(sized).size, 8);
}

TEST(GangOf, NodeConfigPrecedence) {
  kube::Pod pod = LwsPod("serve", "0", "0", "4");
  pod.pod_affinity_topology_keys = {kServerId2};
  EXPECT_EQ(MustBeMember(pod).group_nodes, 2);
  Note(pod, kAnnotationLwsExclusiveTopology, kServerId4);
  EXPECT_EQ(MustBeMember(pod).group_nodes, 4);  // exclusive-topology > affinity
  Note(pod, kAnnotationUltraServerNodes, "1");
  EXPECT_EQ(MustBeMember(pod).group_nodes, 1);  // ours > exclusive-topology

  // An exclusive topology on any other label says nothing about UltraServers.
  kube::Pod host = LwsPod("serve", "0", "0", "4");
  Note(host, kAnnotationLwsExclusiveTopology, "kubernetes.io/hostname");
  host.pod_affinity_topology_keys = {kServerId2};
  EXPECT_EQ(MustBeMember(host).group_nodes, 2);
  host.pod_affinity_topology_keys.clear();
  EXPECT_EQ(MustBeMember(host).group_nodes, 1);
}

TEST(GangOf, IndexPrecedence) {
  kube::Pod mpi = MpiWorker("j", "2");
  EXPECT_EQ(MustBeMember(mpi).index, 2);
  Note(mpi, kAnnotationGangRank, "7");
  EXPECT_EQ(MustBeMember(mpi).index, 7);
  // Another job's index label is not read.
  kube::Pod lws = LwsPod("serve", "0", "1", "2");
  Label(lws, kLabelMpiReplicaIndex, "x");
  EXPECT_EQ(MustBeMember(lws).index, 1);
}

TEST(GangOf, MalformedNumbersNameTheirKey) {
  struct Case {
    std::string_view key;
    std::string value;
    std::string message;
  };
  const Case cases[] = {
      {kAnnotationGangSize, "4x", "annotation toposched.io/gang-size: '4x' is not an integer"},
      {kAnnotationGangSize, "0", "annotation toposched.io/gang-size: '0' is not an integer from 1"},
      {kAnnotationGangSize, "-4", "'-4' is not an integer"},
      {kAnnotationGangSize, "+4", "'+4' is not an integer"},
      {kAnnotationGangSize, " 4", "' 4' is not an integer"},
      {kAnnotationGangSize, "", "annotation toposched.io/gang-size: '' is not an integer"},
      {kAnnotationGangSize, "4097", "to 4096"},
      {kAnnotationGangSize, "99999999999999999999", "is not an integer"},
      {kAnnotationUltraServerNodes, "3",
       "annotation toposched.io/ultraserver-nodes: '3' is not an UltraServer node config"},
      {kAnnotationUltraServerNodes, "04", "'04' is not an UltraServer node config"},
      {kAnnotationGangRank, "-1", "annotation toposched.io/gang-rank: '-1' is not an integer"},
      {kAnnotationGangRank, "1.5", "'1.5' is not an integer"},
      {kAnnotationGang, "", "annotation toposched.io/gang is empty"},
  };
  for (const Case& c : cases) {
    kube::Pod pod = PodIn();
    Note(pod, kAnnotationGang, "g");
    Note(pod, c.key, c.value);
    EXPECT_THAT(ErrorOf(pod), HasSubstr(c.message)) << c.key << "=" << c.value;
  }
  kube::Pod lws = LwsPod("serve", "0", "one", "4");
  EXPECT_THAT(ErrorOf(lws),
              HasSubstr("label leaderworkerset.sigs.k8s.io/worker-index: 'one' is not an integer"));
  kube::Pod lws_size = LwsPod("serve", "0", "0", "big");
  EXPECT_THAT(ErrorOf(lws_size),
              HasSubstr("annotation leaderworkerset.sigs.k8s.io/size: 'big' is not an integer"));
  // Ours is checked even when the job's own size wins.
  kube::Pod both = LwsPod("serve", "0", "0", "4");
  Note(both, kAnnotationGangSize, "four");
  EXPECT_THAT(ErrorOf(both), HasSubstr("annotation toposched.io/gang-size"));
  EXPECT_THAT(ErrorOf(MpiWorker("j", "x")),
              HasSubstr("label training.kubeflow.org/replica-index: 'x' is not an integer"));
}

TEST(GangOf, InconsistentSizeNodesAndIndexAreErrors) {
  kube::Pod pod = PodIn();
  Note(pod, kAnnotationGang, "g");
  Note(pod, kAnnotationGangSize, "6");
  Note(pod, kAnnotationUltraServerNodes, "4");
  EXPECT_THAT(ErrorOf(pod),
              HasSubstr("gang default/gang:g: size 6 (annotation toposched.io/gang-size) is not a "
                        "multiple of its 4 UltraServer nodes (annotation "
                        "toposched.io/ultraserver-nodes)"));

  kube::Pod lws = LwsPod("serve", "1", "0", "3");
  lws.pod_affinity_topology_keys = {kServerId2};
  EXPECT_THAT(ErrorOf(lws), HasSubstr("(pod affinity topologyKey " + std::string(kServerId2)));

  kube::Pod rank = LwsPod("serve", "1", "4", "4");
  EXPECT_THAT(ErrorOf(rank),
              HasSubstr("gang default/lws:serve/1: label leaderworkerset.sigs.k8s.io/worker-index "
                        "is 4, but the gang has 4 members"));

  // Unknown size: neither check applies.
  kube::Pod mpi = MpiWorker("j", "9");
  mpi.pod_affinity_topology_keys = {kServerId4};
  EXPECT_EQ(MustBeMember(mpi).index, 9);
}

TEST(GangOf, GangKeysWithoutAGangAreAnError) {
  for (std::string_view key :
       {kAnnotationGangSize, kAnnotationUltraServerNodes, kAnnotationGangRank}) {
    kube::Pod pod = PodIn();
    Note(pod, key, "2");
    EXPECT_THAT(ErrorOf(pod),
                HasSubstr("annotation " + std::string(key) + " is set, but the pod names no gang"));
  }
  // An MPIJob's launcher is simply no member, whatever it carries.
  kube::Pod launcher = MpiWorker("j", "0");
  Label(launcher, kLabelMpiJobRole, "launcher");
  Note(launcher, kAnnotationUltraServerNodes, "4");
  auto gang = GangOf(launcher);
  ASSERT_TRUE(gang.ok()) << gang.error();
  EXPECT_FALSE(gang->has_value());
}

GangRecord FourNodeRecord() {
  GangRecord record;
  record.gang = "default/mpijob:train-a";
  record.size = 8;
  record.group_nodes = 4;
  record.rank = 5;
  record.nodes = {"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"};
  record.server_id = "bog79p1y8tetj5uu";
  record.node_id = 1;
  record.rank0_host = "train-a-worker-0.train-a.default.svc";
  return record;
}

TEST(GangRecordTest, RoundTrips) {
  const GangRecord record = FourNodeRecord();
  const std::string json = EncodeGangRecord(record);
  EXPECT_EQ(json,
            R"({"gang":"default/mpijob:train-a","size":8,"groupNodes":4,"rank":5,)"
            R"("nodes":["n0","n1","n2","n3","n4","n5","n6","n7"],"serverId":"bog79p1y8tetj5uu",)"
            R"("nodeId":1,"rank0Host":"train-a-worker-0.train-a.default.svc"})");
  auto decoded = DecodeGangRecord(json);
  ASSERT_TRUE(decoded.ok()) << decoded.error();
  EXPECT_EQ(*decoded, record);

  GangRecord single;
  single.gang = "ns/gang:\"quoted\"\\";
  single.size = 1;
  single.nodes = {"only"};
  auto again = DecodeGangRecord(EncodeGangRecord(single));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(*again, single);

  // Optional fields may be left out; unknown ones are ignored.
  auto minimal = DecodeGangRecord(
      R"({"gang":"g","size":2,"groupNodes":1,"rank":1,"nodes":["a","b"],"future":{"x":[1]}})");
  ASSERT_TRUE(minimal.ok()) << minimal.error();
  EXPECT_EQ(minimal->node_id, -1);
  EXPECT_EQ(minimal->server_id, "");
  EXPECT_EQ(minimal->rank0_host, "");
}

TEST(GangRecordTest, DecodingIsStrict) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"", "invalid JSON"},
      {"[]", "expected an object"},
      {"null", "expected an object"},
      {R"({"gang":"g","size":2,"groupNodes":1,"rank":0})", "missing \"nodes\""},
      {R"({"size":1,"groupNodes":1,"rank":0,"nodes":["a"]})", "missing \"gang\""},
      {R"({"gang":"g","groupNodes":1,"rank":0,"nodes":["a"]})", "missing \"size\""},
      {R"({"gang":"g","size":1,"rank":0,"nodes":["a"]})", "missing \"groupNodes\""},
      {R"({"gang":"g","size":1,"groupNodes":1,"nodes":["a"]})", "missing \"rank\""},
      {R"({"gang":7,"size":1,"groupNodes":1,"rank":0,"nodes":["a"]})", "gang: expected a string"},
      {R"({"gang":null,"size":1,"groupNodes":1,"rank":0,"nodes":["a"]})",
       "gang: expected a string"},
      {R"({"gang":"g","size":"1","groupNodes":1,"rank":0,"nodes":["a"]})",
       "size: expected an integer"},
      {R"({"gang":"g","size":1.5,"groupNodes":1,"rank":0,"nodes":["a"]})",
       "size: expected an integer"},
      {R"({"gang":"g","size":1e9,"groupNodes":1,"rank":0,"nodes":["a"]})",
       "size: expected an integer"},
      {R"({"gang":"g","size":99999999999,"groupNodes":1,"rank":0,"nodes":["a"]})",
       "size: out of range"},
      {R"({"gang":"g","size":1,"groupNodes":1,"rank":0,"nodes":"a"})", "nodes: expected an array"},
      {R"({"gang":"g","size":1,"groupNodes":1,"rank":0,"nodes":[1]})",
       "nodes[0]: expected a string"},
      {R"({"gang":"g","size":2,"groupNodes":1,"rank":0,"nodes":["a",""]})",
       "nodes[1]: empty node name"},
      {R"({"gang":"","size":1,"groupNodes":1,"rank":0,"nodes":["a"]})", "empty \"gang\""},
      {R"({"gang":"g","size":0,"groupNodes":1,"rank":0,"nodes":[]})", "size 0 is below 1"},
      {R"({"gang":"g","size":3,"groupNodes":3,"rank":0,"nodes":["a","b","c"]})",
       "groupNodes 3 is not 1, 2 or 4"},
      {R"({"gang":"g","size":2,"groupNodes":4,"rank":0,"nodes":["a","b"]})",
       "size 2 is not a multiple of groupNodes 4"},
      {R"({"gang":"g","size":2,"groupNodes":1,"rank":2,"nodes":["a","b"]})",
       "rank 2 is not in 0..1"},
      {R"({"gang":"g","size":2,"groupNodes":1,"rank":-1,"nodes":["a","b"]})",
       "rank -1 is not in 0..1"},
      {R"({"gang":"g","size":2,"groupNodes":1,"rank":0,"nodes":["a"]})",
       "1 nodes for a gang of size 2"},
      {R"({"gang":"g","size":2,"groupNodes":2,"rank":0,"nodes":["a","b"],"nodeId":0})",
       "no serverId for groupNodes 2"},
      {R"({"gang":"g","size":2,"groupNodes":2,"rank":0,"nodes":["a","b"],"serverId":"s"})",
       "nodeId -1 is not in 0..1"},
      {R"({"gang":"g","size":2,"groupNodes":2,"rank":0,"nodes":["a","b"],"serverId":"s",
           "nodeId":2})",
       "nodeId 2 is not in 0..1"},
      {R"({"gang":"g","size":1,"groupNodes":1,"rank":0,"nodes":["a"],"nodeId":0})",
       "serverId and nodeId are set for groupNodes 1"},
      {R"({"gang":"g","size":1,"groupNodes":1,"rank":0,"nodes":["a"],"rank0Host":5})",
       "rank0Host: expected a string"},
      {R"({"gang":"g","size":1,"groupNodes":1,"rank":0,"nodes":["a"]} {})", "after"},
  };
  for (const Case& c : cases) {
    auto record = DecodeGangRecord(c.json);
    ASSERT_FALSE(record.ok()) << c.json;
    EXPECT_THAT(record.error(), HasSubstr("annotation toposched.io/gang-record: ")) << c.json;
    EXPECT_THAT(record.error(), HasSubstr(c.message)) << c.json;
  }
}

TEST(GangEnvTest, ModeForEachNodeConfig) {
  EXPECT_EQ(UltraServerModeFor(4), 1);
  EXPECT_EQ(UltraServerModeFor(2), 3);
  EXPECT_EQ(UltraServerModeFor(1), 4);
  EXPECT_EQ(UltraServerModeFor(3), 0);
}

TEST(GangEnvTest, FourNodeGroupGetsAllFive) {
  EXPECT_THAT(GangEnv(FourNodeRecord()),
              UnorderedElementsAre(
                  Pair("NEURON_RT_ULTRASERVER_MODE", "1"),
                  Pair("NEURON_RT_ULTRASERVER_SERVER_ID", "bog79p1y8tetj5uu"),
                  Pair("NEURON_RT_ULTRASERVER_NODE_ID", "1"), Pair("NEURON_GLOBAL_TOPOID", "5"),
                  Pair("NEURON_GLOBAL_TOPOID0_HOST", "train-a-worker-0.train-a.default.svc")));
}

TEST(GangEnvTest, TwoNodeGroup) {
  GangRecord record;
  record.gang = "default/lws:serve/0";
  record.size = 2;
  record.group_nodes = 2;
  record.rank = 0;
  record.nodes = {"a", "b"};
  record.server_id = "u5wy80u0o2saugxy";
  record.node_id = 0;
  EXPECT_THAT(GangEnv(record),
              UnorderedElementsAre(Pair("NEURON_RT_ULTRASERVER_MODE", "3"),
                                   Pair("NEURON_RT_ULTRASERVER_SERVER_ID", "u5wy80u0o2saugxy"),
                                   Pair("NEURON_RT_ULTRASERVER_NODE_ID", "0"),
                                   Pair("NEURON_GLOBAL_TOPOID", "0")));
}

TEST(GangEnvTest, OneNodeGroupsHaveNoServer) {
  GangRecord record;
  record.gang = "default/gang:g";
  record.size = 3;
  record.rank = 2;
  record.nodes = {"a", "b", "c"};
  record.rank0_host = "g-0.g.default.svc";
  EXPECT_THAT(GangEnv(record),
              UnorderedElementsAre(Pair("NEURON_RT_ULTRASERVER_MODE", "4"),
                                   Pair("NEURON_GLOBAL_TOPOID", "2"),
                                   Pair("NEURON_GLOBAL_TOPOID0_HOST", "g-0.g.default.svc")));
}

TEST(PodHostNameTest, NeedsASubdomain) {
  kube::Pod pod = MpiWorker("train-a", "0");
  EXPECT_EQ(PodHostName(pod), "train-a-worker-0.train-a.default.svc");
  pod.hostname.clear();
  pod.name = "pod-name";
  EXPECT_EQ(PodHostName(pod), "pod-name.train-a.default.svc");
  pod.subdomain.clear();
  EXPECT_EQ(PodHostName(pod), "");
  pod.hostname = "h";
  EXPECT_EQ(PodHostName(pod), "");
}

}  // namespace
}  // namespace toposched::claims
