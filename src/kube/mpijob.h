// The one field toposched reads from a Kubeflow MPIJob (kubeflow.org/v2beta1): how many workers
// it runs, which is the size of its workers' gang (docs/ultraserver.md).
#ifndef TOPOSCHED_KUBE_MPIJOB_H_
#define TOPOSCHED_KUBE_MPIJOB_H_

#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched::kube {

// The API path of an MPIJob.
std::string MpiJobPath(std::string_view ns, std::string_view name);

// spec.mpiReplicaSpecs.Worker.replicas of an MPIJob's JSON (default 1 when the Worker spec omits
// it, as the MPI operator defaults it). Errors name the path of a missing or mistyped field.
Result<int> DecodeMpiJobWorkers(std::string_view json);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_MPIJOB_H_
