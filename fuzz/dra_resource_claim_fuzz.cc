// libFuzzer target for the ResourceClaim NodePrepareResources reads from the API server
// (draplugin::DecodeResourceClaim), and what the plugin makes of it for a trn2.48xlarge node
// (draplugin::PlanClaim: device names, opaque configs, env): never a crash; a claim it prepares
// has devices, each a legal offer of the node with its device nodes, and the cores env.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "draplugin/prepare.h"
#include "draplugin/resource_claim.h"
#include "topology/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched;  // NOLINT(google-build-using-namespace): a fuzz harness
  static const topology::NodeShape shape =
      topology::NodeShape::Make(*topology::Catalog::Embedded().Find("trn2.48xlarge"), 2).value();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto claim = draplugin::DecodeResourceClaim(text);
  if (!claim.ok()) return 0;
  if (claim->uid.empty()) std::abort();
  draplugin::PrepareContext context{&shape, "node-a", nodeagent::CoreNumbering::kContainer};
  auto prepared = draplugin::PlanClaim(context, *claim, claim->uid);
  if (!prepared.ok()) {
    if (prepared.error().empty()) std::abort();
    return 0;
  }
  if (prepared->devices.empty() || prepared->env.count("NEURON_RT_VISIBLE_CORES") != 1) {
    std::abort();
  }
  for (const draplugin::PreparedDevice& device : prepared->devices) {
    if (device.pool != "node-a" || device.device_nodes.empty() || device.requests.empty()) {
      std::abort();
    }
    auto again = dra::OfferFromName(shape, device.device);
    if (!again.ok() || !(*again == device.offer)) std::abort();
  }
  return 0;
}
