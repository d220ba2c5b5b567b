// libFuzzer target for ParseFleetView and ParsePodPlacement (kubectl/views.h), which read what an
// extender answers `kubectl neuron`: never crashes, and what they accept is safe to draw (each
// unit's hold index inside its node's holds, each device inside the node, ids in range); the
// drawing itself runs on what is accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kubectl/render.h"
#include "kubectl/views.h"
#include "topology/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::kubectl;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto fleet = ParseFleetView(text); fleet.ok()) {
    for (const NodeView& node : fleet->nodes) {
      for (const UnitView& unit : node.units) {
        if (unit.device < 0 || unit.device >= node.devices) std::abort();
        for (int h : unit.holds) {
          if (h < 0 || static_cast<size_t>(h) >= node.holds.size()) std::abort();
        }
      }
      for (const HoldView& hold : node.holds) {
        for (int id : hold.ids) {
          if (id < 0 || id >= toposched::topology::kMaxCores) std::abort();
        }
      }
    }
    (void)RenderNodes(*fleet, {"extender", false});
    (void)RenderNodes(*fleet, {"extender", true});
  }
  if (auto why = ParsePodPlacement(text); why.ok()) {
    (void)RenderWhy(*why, {"extender", false});
    (void)RenderWhy(*why, {"extender", true});
  }
  return 0;
}
