// libFuzzer target for upstream's PodGroup and Workload objects and a discovery resource list
// read from the API server (kube/scheduling_groups.h): a gang's size. It never crashes, and what
// it accepts is 0 (basic policy) or a minCount >= 1.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/scheduling_groups.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto pod_group = toposched::kube::DecodePodGroupMinCount(text);
  if (pod_group.ok() && *pod_group < 0) std::abort();
  auto workload = toposched::kube::DecodeWorkloadMinCount(text, "workers");
  if (workload.ok() && *workload < 0) std::abort();
  (void)toposched::kube::DecodeResourceNames(text);
  return 0;
}
