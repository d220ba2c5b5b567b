// The partition step of binds into shared pools (docs/pools.md) and the state it needs: which
// binds are between reserve and commit, and the background removal of partitions. A bind marks
// itself before it reserves; a pod deleted meanwhile is then cleaned up by its bind, never by the
// deletion, so a partition is removed exactly once and its devices freed only when it is gone.
//
// Lock order: PartitionSteps::mu_, then the tracker's own lock (Commit and BeginRelease run
// under mu_, so that a deletion and a bind agree on who cleans up).
#ifndef TOPOSCHED_EXTENDER_PARTITION_STEPS_H_
#define TOPOSCHED_EXTENDER_PARTITION_STEPS_H_

#include <chrono>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "provision/reaper.h"
#include "provision/service.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// How far a failed bind got with its partition; decides what undoing it takes.
enum class PartitionMade {
  kNone,        // none was made (or the create call confirmed its removal): free the ids
  kLeftBehind,  // it may exist: hold the ids until the background removal confirms it gone
  kActive,      // it exists: remove it (briefly here, else in the background), then free the ids
};

// How a pool bind's commit ended (issue 18 row 1).
enum class PoolCommit {
  kCommitted,        // the reservation became the pod's hold
  kAdoptedByWatch,   // the pod watch saw the Binding first and committed the same ids: success
  kDeleted,          // the pod was deleted while binding (PodDeleted ran): the bind cleans up
  kReservationLost,  // neither: the reservation is gone (e.g. expired); the pod is bound anyway
};

class PartitionSteps {
 public:
  PartitionSteps(provision::Provisioner& provisioner, tracker::Tracker& tracker,
                 std::chrono::milliseconds removal_retry);

  const provision::ProvisionOptions& options() const { return provisioner_.options(); }

  // Marks the pod's bind as in progress; false when another bind of it already is.
  bool Begin(const std::string& uid) TS_EXCLUDES(mu_);
  // Creates the partition over the allocation's devices and waits until it is active.
  Status Create(const std::string& key, const std::string& pool, const std::string& partition,
                const tracker::PodAllocation& allocation, PartitionMade* made);
  // Commits the pod's hold and ends its bind. Only a deletion seen by PodDeleted is kDeleted
  // (the caller then abandons the bind); the watch having committed `written` first is success.
  PoolCommit Commit(const std::string& uid, const tracker::PodAllocation& written, std::string* why)
      TS_EXCLUDES(mu_);
  // Ends a failed bind and gives back what it held (see PartitionMade). `reserved` is false when
  // the bind failed before the tracker reserved anything.
  void Abandon(const std::string& uid, bool reserved, const std::string& partition,
               PartitionMade made) TS_EXCLUDES(mu_);
  // A pod was deleted. One holding ids in a shared pool keeps them until its partition is gone
  // (a bind in progress cleans up after itself): true. False when it holds none there.
  bool PodDeleted(const std::string& uid) TS_EXCLUDES(mu_);
  // Whether PodDeleted saw the pod deleted during its bind (between Begin and the bind's end).
  bool DeletedWhileBinding(const std::string& uid) const TS_EXCLUDES(mu_);
  // A partition no live pod owns (found at a restart): holds its devices until it is removed.
  void RemoveOrphan(const provision::Partition& partition);
  // Removals still in progress in the background.
  size_t PendingRemovals() const { return reaper_.Pending(); }
  provision::PartitionService& service() { return provisioner_.service(); }

 private:
  // Removes the partition (briefly in the caller's thread, else in the background), then frees
  // the pod's ids.
  void Release(const std::string& uid, const std::string& partition);

  provision::Provisioner& provisioner_;
  tracker::Tracker& tracker_;
  mutable Mutex mu_;
  std::unordered_set<std::string> binding_ TS_GUARDED_BY(mu_);  // uids between Begin and end
  std::unordered_set<std::string> deleted_ TS_GUARDED_BY(mu_);  // of those, deleted meanwhile
  provision::Reaper reaper_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_PARTITION_STEPS_H_
