#include "topology/queue.h"

namespace toposched::topology {

double QueueSize(const Request& request) {
  return request.unit == Unit::kDevice ? request.count : 0.5 * request.count;
}

bool HoldsBack(const Request& request, int64_t waited_ns, std::span<const WaitingClass> waiting,
               double free_devices, int64_t age_ns) {
  if (waited_ns >= age_ns) return false;
  const double size = QueueSize(request);
  double smaller = 0;
  for (const WaitingClass& c : waiting) {
    if (c.fits && c.pods > 0 && QueueSize(c.request) < size)
      smaller += QueueSize(c.request) * c.pods;
  }
  // When the smaller pods fit in what is left after this one starts, both go.
  return smaller > free_devices - size;
}

}  // namespace toposched::topology
