// libFuzzer target for the device plugin's parsers of untrusted text: sysfs attributes
// (core_count, connected_devices), the LNC file, DMI product name, device ids kubelet sends, and
// the pod annotations Allocate reads (toposched.io/allocation, AWS_NEURON_IDS,
// NEURON_ALLOC_TIME, toposched.io/allocated-containers). The first byte picks the parser; the
// rest is the input. None may crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "claims/allocation_record.h"
#include "claims/keys.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/manager.h"
#include "nodeagent/device_ids.h"
#include "nodeagent/sysfs.h"
#include "topology/allocator.h"
#include "topology/catalog.h"

namespace {

using namespace toposched;

kube::Pod PodWith(std::string_view key, std::string_view value) {
  kube::Pod pod;
  pod.ns = "default";
  pod.name = "p";
  pod.uid = "u";
  for (const char* name : {"init", "a", "b"}) {
    kube::Container container;
    container.name = name;
    container.limits["aws.amazon.com/neuron"] = 2;
    container.limits["aws.amazon.com/neuroncore"] = 1;
    (name[0] == 'i' ? pod.init_containers : pod.containers).push_back(container);
  }
  pod.annotations[std::string(key)] = std::string(value);
  pod.annotations["NEURON_ALLOCATED"] = "false";
  return pod;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const std::vector<claims::ResourceSpec> resources =
      deviceplugin::DefaultResources("aws.amazon.com/neuron", "aws.amazon.com/neuroncore");
  switch (data[0] % 9) {
    case 0:
      (void)nodeagent::ParseCoreCount(text);
      break;
    case 1:
      (void)nodeagent::ParseConnectedDevices(text);
      break;
    case 2:
      (void)nodeagent::ParseLncConfig(text);
      break;
    case 3:
      (void)nodeagent::ParseProductName(text);
      (void)nodeagent::DeviceIndexFromName(text);
      break;
    case 4:
      (void)nodeagent::ParseUnitId(topology::Unit::kDevice, text, 16);
      (void)nodeagent::ParseUnitId(topology::Unit::kCore, text, 512);
      break;
    case 5:
      (void)deviceplugin::ReadPodClaims(PodWith(claims::kAnnotationRecord, text), resources, "n");
      break;
    case 6:
      (void)deviceplugin::ReadPodClaims(PodWith(claims::kAnnotationNeuronIds, text), resources,
                                        "n");
      break;
    case 7:
      (void)deviceplugin::ReadPodClaims(PodWith(claims::kAnnotationAllocTime, text), resources,
                                        "n");
      break;
    case 8:
      (void)deviceplugin::ReadPodClaims(PodWith(deviceplugin::kAnnotationAllocatedContainers, text),
                                        resources, "n");
      break;
  }
  return 0;
}
