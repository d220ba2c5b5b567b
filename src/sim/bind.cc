#include "sim/bind.h"

#include <fmt/format.h>

namespace toposched::sim {

tracker::Ranking ChooseNode(tracker::Tracker& tracker, const tracker::PodSpec& pod,
                            std::span<const std::string> nodes) {
  tracker.ObserveDemand(pod);
  return tracker.Rank(pod, nodes);
}

Result<tracker::PodAllocation> BindPod(tracker::Tracker& tracker, const tracker::PodSpec& pod,
                                       const std::string& node, int64_t now_ns) {
  auto reserved = tracker.Reserve(pod, node, now_ns + kBindWindowNs);
  if (!reserved.ok()) {
    return Error{
        fmt::format("internal error: the tracker refused {} on {} after Fit accepted it: {}",
                    pod.name, node, reserved.error())};
  }
  if (auto committed = tracker.Commit(pod.uid); !committed.ok()) {
    return Error{
        fmt::format("internal error: commit of {} failed: {}", pod.name, committed.error())};
  }
  return reserved;
}

}  // namespace toposched::sim
