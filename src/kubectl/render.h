// What `kubectl neuron` prints: the nodes with their units drawn by topology, who holds what,
// and why a pod waits, as text for an 80-column terminal or as JSON (apiVersion toposched.io/v1,
// kinds NeuronNodeList, NeuronPodList, NeuronPodWhy: docs/observability.md). Pure: views in,
// text out.
#ifndef TOPOSCHED_KUBECTL_RENDER_H_
#define TOPOSCHED_KUBECTL_RENDER_H_

#include <string>
#include <string_view>
#include <vector>

#include "kube/objects.h"
#include "kubectl/views.h"

namespace toposched::kubectl {

inline constexpr size_t kTerminalWidth = 80;

// "api-server" (views worked out from the records) or "extender" (its live views).
struct Rendering {
  std::string source;
  bool json = false;
};

std::string RenderNodes(const FleetView& fleet, const Rendering& how);

// One pod that asks for Neuron resources or holds ids, as `pods` lists it.
struct PodRow {
  std::string ns;
  std::string name;
  std::string node;
  std::string phase;  // "Terminating" while being deleted
  std::vector<RequestView> requests;
  std::vector<HoldView> allocation;  // from its record; empty while it waits
  std::string state;                 // the extender's hold state, when asked
  std::string error;                 // a record that cannot be read
};
// The pods (every namespace's when `ns` is empty) that ask for `resources`, sorted.
std::vector<PodRow> PodRows(const std::vector<kube::Pod>& pods, std::string_view ns);
std::string RenderPods(const std::vector<PodRow>& rows, const Rendering& how);

std::string RenderWhy(const PodPlacementView& why, const Rendering& how);

// Breaks `text` at spaces into lines of at most `width` columns, each after the first indented
// by `indent` spaces; a word longer than a line is cut.
std::vector<std::string> Wrap(std::string_view text, size_t width, size_t indent);

}  // namespace toposched::kubectl

#endif  // TOPOSCHED_KUBECTL_RENDER_H_
