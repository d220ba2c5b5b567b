// The driver's opaque configuration: what a ResourceClaim (spec.devices.config[].opaque) or a
// DeviceClass puts in `parameters` for driver neuron.aws.com. The API server stores it unread, so
// this decoder is the only check it gets: strict, every unknown apiVersion, kind or field and
// every out-of-range value is an error that names it (the claim then fails to prepare with that
// message, instead of running with a setting silently ignored).
//
// Accepted (AWS's Neuron DRA driver's kinds, docs/dra.md):
//   apiVersion neuron.aws.com/v1 (also neuron.aws.com/v1alphav1, resource.neuron.aws.com/v1alphav1)
//   kind NeuronConfig       {logicalNeuronCore: 1|2}
//   kind UltraServerConfig  {ultraserverMode: 1|2|4}
#ifndef TOPOSCHED_DRAPLUGIN_OPAQUE_CONFIG_H_
#define TOPOSCHED_DRAPLUGIN_OPAQUE_CONFIG_H_

#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched::draplugin {

inline constexpr std::string_view kOpaqueApiVersion = "neuron.aws.com/v1";

struct OpaqueConfig {
  enum class Kind { kNeuronConfig, kUltraServerConfig };
  Kind kind = Kind::kNeuronConfig;
  std::string api_version;
  int logical_neuron_core = 0;  // kNeuronConfig: 1 or 2
  int ultraserver_mode = 0;     // kUltraServerConfig: nodes per UltraServer group, 1, 2 or 4
  bool operator==(const OpaqueConfig&) const = default;
};

// Decodes one `parameters` object (a whole JSON document).
Result<OpaqueConfig> DecodeOpaqueConfig(std::string_view json);

// "NeuronConfig{logicalNeuronCore: 2}", for logs.
std::string DescribeOpaqueConfig(const OpaqueConfig& config);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_OPAQUE_CONFIG_H_
