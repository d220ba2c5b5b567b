// A node drawn as its topology (docs/observability.md, "The fleet page"): an inf2 ring as a circle,
// a chain (inf1, inf2.24xlarge) as a row, a trn 4x4 torus as its grid; each device a box split
// into its cores at the node's LNC, each core coloured by the pod holding it. The layout is read
// from the catalog's rule and adjacency, so a new instance type is drawn without code. One home for
// the drawing: the extender's fleet page and the simulator's report both call NodeSvg.
#ifndef TOPOSCHED_DRAW_NODE_SVG_H_
#define TOPOSCHED_DRAW_NODE_SVG_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "topology/catalog.h"

namespace toposched::draw {

// Whoever holds cores on a drawn node.
struct Owner {
  std::string key;     // written as data-owner on its boxes, e.g. "default/train-3"
  std::string name;    // shown on hover, e.g. "default/train-3 (main)"
  std::string colour;  // a CSS colour
  std::string href;    // where a click goes; empty: no link
};

struct NodePicture {
  std::string name;
  std::string caption;                           // one short line under the name
  const topology::InstanceType* type = nullptr;  // the layout; null: a row
  int devices = 0;
  int cores_per_device = 0;         // at the node's LNC
  std::vector<int> core_owner;      // per core: an index into the owners, -1 when free
  std::vector<int> marked_devices;  // drawn crossed out (unhealthy, or not offered)
};

inline constexpr std::string_view kFreeColour = "#eeeeee";

// An <svg> element, self-contained (no script, no external reference).
std::string NodeSvg(const NodePicture& node, std::span<const Owner> owners);

// A colour per owner index: golden-angle hues, so owners numbered one after the other are clearly
// apart; -1 (free) is kFreeColour.
std::string OwnerColour(int index);

// How a type's devices are laid out, from its rule and adjacency: a ring when device 0 and the last
// are neighbours in a contiguous rule, a grid of rows when the rule is aligned (rows of the size
// nearest the square root: trn's 4x4), else a row.
enum class Layout { kRow, kRing, kGrid };
struct DeviceLayout {
  Layout layout = Layout::kRow;
  int columns = 0;  // kGrid
};
DeviceLayout LayoutOf(const topology::InstanceType* type, int devices);

}  // namespace toposched::draw

#endif  // TOPOSCHED_DRAW_NODE_SVG_H_
