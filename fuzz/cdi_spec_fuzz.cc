// libFuzzer target for the DRA plugin's checkpoint: a CDI spec file read back at start
// (draplugin::DecodeCdiSpec), on an inf2.48xlarge and on a trn2.48xlarge at LNC 1 and at LNC 2 (a
// spec written at one LNC read at another). The files live on the host, where anyone with root
// may edit them. Never a crash, and the checkpoint fails closed: every device of an accepted
// claim that is not admin access holds units of this node (whole devices when its name cannot be
// read), the claim holds all of them, and a claim read by name reads back the same from the spec
// the plugin would write for it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "draplugin/cdi.h"
#include "draplugin/prepare.h"
#include "topology/catalog.h"

namespace {

using toposched::draplugin::PreparedClaim;
using toposched::draplugin::PreparedDevice;
using toposched::topology::NodeShape;

void Check(std::string_view text, const NodeShape& shape) {
  auto claim = toposched::draplugin::DecodeCdiSpec(text, shape);
  if (!claim.ok()) {
    if (claim.error().empty()) std::abort();
    return;
  }
  if (!toposched::draplugin::CheckClaimUid(claim->uid).ok()) std::abort();
  const int physical_cores = shape.devices * shape.type->physical_cores_per_device();
  for (const PreparedDevice& device : claim->devices) {
    if (device.admin_access) {
      if (!device.units.empty()) std::abort();  // monitoring holds nothing
      continue;
    }
    if (device.units.empty() || (device.units.devices & ~shape.AllDevices()) != 0) std::abort();
    if ((device.units.cores & ~claim->held.cores).any()) std::abort();
    for (int c = physical_cores; c < static_cast<int>(device.units.cores.size()); ++c) {
      if (device.units.cores.test(static_cast<size_t>(c))) std::abort();
    }
  }
  if (!claim->held_because.empty()) return;
  auto again =
      toposched::draplugin::DecodeCdiSpec(toposched::draplugin::CdiSpecJson(*claim), shape);
  if (!again.ok() || !(again->held == claim->held) || !again->held_because.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const toposched::topology::Catalog& catalog = toposched::topology::Catalog::Embedded();
  static const NodeShape inf2 = NodeShape::Make(*catalog.Find("inf2.48xlarge"), 0).value();
  static const NodeShape trn2_lnc1 = NodeShape::Make(*catalog.Find("trn2.48xlarge"), 1).value();
  static const NodeShape trn2_lnc2 = NodeShape::Make(*catalog.Find("trn2.48xlarge"), 2).value();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Check(text, inf2);
  Check(text, trn2_lnc1);
  Check(text, trn2_lnc2);
  return 0;
}
