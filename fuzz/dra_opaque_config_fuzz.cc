// libFuzzer target for the DRA driver's opaque config (draplugin::DecodeOpaqueConfig), the
// `parameters` a ResourceClaim or DeviceClass carries for neuron.aws.com: decoding never crashes,
// and what it accepts is one of the two kinds with its one field in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "draplugin/opaque_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::draplugin;  // NOLINT(google-build-using-namespace): a fuzz harness
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = DecodeOpaqueConfig(text);
  if (!config.ok()) {
    if (config.error().empty()) std::abort();
    return 0;
  }
  const OpaqueConfig& c = *config;
  if (c.kind == OpaqueConfig::Kind::kNeuronConfig) {
    if ((c.logical_neuron_core != 1 && c.logical_neuron_core != 2) || c.ultraserver_mode != 0) {
      std::abort();
    }
  } else if (c.ultraserver_mode != 1 && c.ultraserver_mode != 2 && c.ultraserver_mode != 4) {
    std::abort();
  } else if (c.logical_neuron_core != 0) {
    std::abort();
  }
  if (c.api_version.find("neuron.aws.com/") == std::string_view::npos) std::abort();
  if (DescribeOpaqueConfig(c).empty()) std::abort();
  return 0;
}
