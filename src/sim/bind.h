// kube-scheduler's part for one pod, shared by the simulator's replays: the simulated bind
// (Reserve, then Commit at once: the Binding always succeeds), with the tracker choosing the ids.
#ifndef TOPOSCHED_SIM_BIND_H_
#define TOPOSCHED_SIM_BIND_H_

#include <cstdint>
#include <span>
#include <string>

#include "base/result.h"
#include "tracker/tracker.h"

namespace toposched::sim {

// The simulated bind always succeeds at once, so the reservation only needs to outlive the
// decision; any positive window works.
inline constexpr int64_t kBindWindowNs = 30'000'000'000;

// The node for a pod that has just arrived: counts it into the expected demand (once per pod, as
// the extender counts a pod when it first filters it; a retry must not count it again) and ranks
// `nodes` by the tracker's policy, as the extender's prioritize does. `best` is the choice, -1
// when none fits.
tracker::Ranking ChooseNode(tracker::Tracker& tracker, const tracker::PodSpec& pod,
                            std::span<const std::string> nodes);

// Reserves the pod's ids on `node` and commits them at once. `node` must be one the tracker
// just said the pod fits on (Rank or Fit): an error here is an internal error, and says so.
Result<tracker::PodAllocation> BindPod(tracker::Tracker& tracker, const tracker::PodSpec& pod,
                                       const std::string& node, int64_t now_ns);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_BIND_H_
