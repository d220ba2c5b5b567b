// Upstream Kubernetes' workload-aware scheduling objects (group scheduling.k8s.io, KEP-4671), read
// for one thing: a gang's size (docs/ultraserver.md, "Gangs").
//   1.36+: a pod's spec.schedulingGroup.podGroupName names a standalone PodGroup in its namespace
//          (v1alpha2 on 1.36; v1beta1, or v1alpha3, on 1.37); its size is
//          spec.schedulingPolicy.gang.minCount.
//   1.35:  a pod's spec.workloadRef names a Workload (v1alpha1) and one of its spec.podGroups[],
//          whose policy.gang.minCount is the size.
// A group whose policy is `basic` is scheduled pod by pod upstream: size 0 here, not a gang.
#ifndef TOPOSCHED_KUBE_SCHEDULING_GROUPS_H_
#define TOPOSCHED_KUBE_SCHEDULING_GROUPS_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "kube/client.h"

namespace toposched::kube {

// The scheduling.k8s.io versions that may serve PodGroups, in the order they are tried: the beta
// (1.37), then the alphas (1.36's v1alpha2, 1.37's v1alpha3).
inline constexpr std::string_view kPodGroupVersions[] = {"v1beta1", "v1alpha2", "v1alpha3"};
// The only version that served Workloads with spec.podGroups (1.35).
inline constexpr std::string_view kWorkloadVersion = "v1alpha1";

std::string PodGroupPath(std::string_view version, std::string_view ns, std::string_view name);
std::string WorkloadPath(std::string_view ns, std::string_view name);

// A PodGroup's JSON (any of kPodGroupVersions: the fields read are the same): its gang minCount,
// or 0 for the basic policy. Strict: a missing spec or schedulingPolicy, neither or both of
// basic and gang, a minCount that is not an integer >= 1, another kind: errors starting
// "PodGroup: " and naming the JSON path.
Result<int> DecodePodGroupMinCount(std::string_view json);

// A 1.35 Workload's JSON: the minCount of spec.podGroups[] entry `pod_group` (0 for basic), with
// the same checks per group; a group that is not listed is an error. Errors start "Workload: ".
Result<int> DecodeWorkloadMinCount(std::string_view json, std::string_view pod_group);

// The resource names of an APIResourceList (discovery of one group version).
Result<std::vector<std::string>> DecodeResourceNames(std::string_view json);

// Reads PodGroups and Workloads through `get` (an ApiClient's Get, or a test's). Which version
// serves PodGroups is found once through discovery (/apis/scheduling.k8s.io/<version>) and kept;
// a failed discovery is retried on the next call. Thread-safe.
class SchedulingGroups {
 public:
  using Getter = std::function<Result<HttpResponse>(std::string_view path)>;
  explicit SchedulingGroups(Getter get) : get_(std::move(get)) {}

  // The PodGroup `ns`/`name`'s gang minCount; 0 for the basic policy.
  Result<int> PodGroupMinCount(std::string_view ns, std::string_view name);
  // The Workload `ns`/`workload`'s pod group `pod_group`'s gang minCount; 0 for basic.
  Result<int> WorkloadMinCount(std::string_view ns, std::string_view workload,
                               std::string_view pod_group);
  // The version found to serve PodGroups; "" before one was found.
  std::string PodGroupVersion() const;

 private:
  Result<std::string> FindPodGroupVersion();
  Result<std::string> GetObject(std::string_view kind, std::string_view path, std::string_view ns,
                                std::string_view name);

  Getter get_;
  mutable Mutex mu_;
  std::string version_ TS_GUARDED_BY(mu_);
};

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_SCHEDULING_GROUPS_H_
