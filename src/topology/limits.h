#pragma once

// Bounds that several modules check and so must agree on. Here, in topology, because every module
// that checks them may depend on topology (claims, tracker, extender, sim) and no lower one.

namespace toposched::topology {

// The most members a gang may count, and so the most ranks. The tracker searches node groups up
// to this size; claims refuses a larger gang-size annotation at once (a bigger number is a typo,
// not a job), so a pod never passes GangOf only to fail every filter.
inline constexpr int kMaxGangSize = 4096;

}  // namespace toposched::topology
