#include "topology/queue.h"

namespace toposched::topology {

double QueueSize(const Request& request) {
  return request.unit == Unit::kDevice ? request.count : 0.5 * request.count;
}

HoldBack HoldsBack(const Request& request, int64_t waited_ns, std::span<const WaitingClass> waiting,
                   double free_devices, int64_t age_ns) {
  HoldBack out;
  out.free_devices = free_devices;
  if (waited_ns >= age_ns) return out;
  const double size = QueueSize(request);
  for (const WaitingClass& c : waiting) {
    if (c.fits && c.pods > 0 && QueueSize(c.request) < size) {
      out.smaller_pods += c.pods;
      out.smaller_devices += QueueSize(c.request) * c.pods;
    }
  }
  // When the smaller pods fit in what is left after this one starts, both go; a pod with no room
  // to start is not held back (it waits for room, and says so).
  out.held =
      out.smaller_pods > 0 && size <= free_devices && out.smaller_devices > free_devices - size;
  return out;
}

}  // namespace toposched::topology
