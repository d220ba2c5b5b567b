// JSON in the exact shapes kube-scheduler sends an extender (k8s.io/kube-scheduler/extender/v1
// with core/v1 objects inside), for tests and benchmarks.
#ifndef TOPOSCHED_TEST_EXTENDER_FIXTURES_H_
#define TOPOSCHED_TEST_EXTENDER_FIXTURES_H_

#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/pods.h"

namespace toposched::testing {

// A Node shaped like a real EKS node: many labels, images, conditions, capacity and allocatable
// with Neuron resources. About 6 KB with 12 images (a long-lived node), 4 KB with 6.
inline std::string EksNodeJson(const std::string& name, const std::string& instance_type,
                               int devices, int cores, int image_count = 12) {
  std::string images;
  for (int i = 0; i < image_count; ++i) {
    if (i != 0) images += ',';
    images += fmt::format(
        R"({{"names":["123456789012.dkr.ecr.us-west-2.amazonaws.com/team/model-server@sha256:{:064x}","123456789012.dkr.ecr.us-west-2.amazonaws.com/team/model-server:v1.{}.0"],"sizeBytes":{}}})",
        i * 7919 + 17, i, 1000000000 + i * 1234567);
  }
  return fmt::format(
      R"({{"kind":"Node","apiVersion":"v1","metadata":{{"name":"{0}","uid":"{0}-uid","resourceVersion":"123456","creationTimestamp":"2026-01-02T03:04:05Z","labels":{{"beta.kubernetes.io/arch":"amd64","beta.kubernetes.io/instance-type":"{1}","beta.kubernetes.io/os":"linux","eks.amazonaws.com/capacityType":"ON_DEMAND","eks.amazonaws.com/nodegroup":"neuron-ng","eks.amazonaws.com/nodegroup-image":"ami-0123456789abcdef0","failure-domain.beta.kubernetes.io/region":"us-west-2","failure-domain.beta.kubernetes.io/zone":"us-west-2a","k8s.io/cloud-provider-aws":"a1b2c3d4e5f6","kubernetes.io/arch":"amd64","kubernetes.io/hostname":"{0}","kubernetes.io/os":"linux","node.kubernetes.io/instance-type":"{1}","topology.ebs.csi.aws.com/zone":"us-west-2a","topology.k8s.aws/zone-id":"usw2-az1","topology.kubernetes.io/region":"us-west-2","topology.kubernetes.io/zone":"us-west-2a"}},"annotations":{{"alpha.kubernetes.io/provided-node-ip":"10.0.1.5","node.alpha.kubernetes.io/ttl":"0","volumes.kubernetes.io/controller-managed-attach-detach":"true"}}}},"spec":{{"providerID":"aws:///us-west-2a/i-0123456789abcdef0","taints":[{{"key":"aws.amazon.com/neuron","value":"true","effect":"NoSchedule"}}]}},"status":{{"capacity":{{"aws.amazon.com/neuron":"{2}","aws.amazon.com/neuroncore":"{3}","cpu":"128","ephemeral-storage":"104845292Ki","hugepages-1Gi":"0","hugepages-2Mi":"0","memory":"527988148Ki","pods":"737","vpc.amazonaws.com/efa":"8"}},"allocatable":{{"aws.amazon.com/neuron":"{2}","aws.amazon.com/neuroncore":"{3}","cpu":"127610m","ephemeral-storage":"95551679124","hugepages-1Gi":"0","hugepages-2Mi":"0","memory":"521543092Ki","pods":"737","vpc.amazonaws.com/efa":"8"}},"conditions":[{{"type":"MemoryPressure","status":"False","lastHeartbeatTime":"2026-11-22T10:00:00Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"}},{{"type":"DiskPressure","status":"False","lastHeartbeatTime":"2026-11-22T10:00:00Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"KubeletHasNoDiskPressure","message":"kubelet has no disk pressure"}},{{"type":"PIDPressure","status":"False","lastHeartbeatTime":"2026-11-22T10:00:00Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"KubeletHasSufficientPID","message":"kubelet has sufficient PID available"}},{{"type":"Ready","status":"True","lastHeartbeatTime":"2026-11-22T10:00:00Z","lastTransitionTime":"2026-01-02T03:05:05Z","reason":"KubeletReady","message":"kubelet is posting ready status"}}],"addresses":[{{"type":"InternalIP","address":"10.0.1.5"}},{{"type":"InternalDNS","address":"ip-10-0-1-5.us-west-2.compute.internal"}},{{"type":"Hostname","address":"ip-10-0-1-5.us-west-2.compute.internal"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":10250}}}},"nodeInfo":{{"machineID":"ec2abcdef0123456789","systemUUID":"ec2abcde-f012-3456-789a-bcdef0123456","bootID":"01234567-89ab-cdef-0123-456789abcdef","kernelVersion":"6.1.112-122.189.amzn2023.x86_64","osImage":"Amazon Linux 2023.6.20241010","containerRuntimeVersion":"containerd://1.7.22","kubeletVersion":"v1.31.0-eks-a737599","kubeProxyVersion":"v1.31.0-eks-a737599","operatingSystem":"linux","architecture":"amd64"}},"images":[{4}]}}}})",
      name, instance_type, devices, cores, images);
}

// A pending pod asking for `count` of `resource` in one container (plus a sidecar-free init).
inline std::string PodJson(const std::string& name, const std::string& uid,
                           const std::string& resource, int count) {
  return PodJson(PodJsonSpec{.name = name,
                             .uid = uid,
                             .resource = resource,
                             .count = count,
                             .node = {},
                             .annotations = {{"k8s.ovn.org/pod-networks", "{}"}},
                             .resource_version = "42"});
}

inline std::string NamesArgs(const std::string& pod_json, const std::vector<std::string>& names) {
  std::string out = "{\"Pod\":" + pod_json + ",\"Nodes\":null,\"NodeNames\":[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i != 0) out += ',';
    out += "\"" + names[i] + "\"";
  }
  return out + "]}";
}

inline std::string NodesArgs(const std::string& pod_json,
                             const std::vector<std::string>& node_jsons) {
  std::string out = "{\"Pod\":" + pod_json + ",\"Nodes\":{\"metadata\":{},\"items\":[";
  for (size_t i = 0; i < node_jsons.size(); ++i) {
    if (i != 0) out += ',';
    out += node_jsons[i];
  }
  return out + "]},\"NodeNames\":null}";
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_EXTENDER_FIXTURES_H_
