// The HTTP server's connection slots: who holds them, and which may be taken back when a new
// connection needs one (issue 29: idle TCP connections and uncertified keep-alive probes held
// every slot, and the certified scheduler was refused).
//
// Two budgets. A connection that has sent nothing yet waits in the waiting room (kSilent): it
// costs a descriptor and a timer, no TLS session, so the room is large, and when it is full the
// oldest waiting connection is closed. Accepting therefore never stalls behind idle connections,
// and a caller that speaks is served at once instead of queueing in the kernel's backlog. Its
// first bytes move it into one of the slots (kHandshaking). When the slots are full, one that has
// not shown who it is gives its slot up, in the order of least progress: one that finished TLS
// without a client certificate and waits for its next request (kAnonymous), then one in its TLS
// handshake; oldest first within each. A held slot (a client that authenticated, or a request
// being answered) is never taken back: only when every slot is held is the speaking connection
// refused.
#ifndef TOPOSCHED_NET_CONNECTION_SLOTS_H_
#define TOPOSCHED_NET_CONNECTION_SLOTS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>

#include "base/mutex.h"

namespace toposched::net {

class ConnectionSlots {
 public:
  // kSilent is the waiting room; the others hold a slot, in the order slots are taken back.
  enum class Phase { kSilent = 0, kAnonymous = 1, kHandshaking = 2, kHeld = 3 };
  using Id = uint64_t;  // never 0
  using Close = std::function<void()>;

  // `capacity` slots and a waiting room of `waiting_capacity` (both at least 1).
  ConnectionSlots(int capacity, int waiting_capacity);

  // A place in the waiting room for a new connection; `close` closes it should it be taken
  // back. When the room is full its oldest connection loses its place: that one's close is
  // moved to *evicted, for the caller to call (outside this lock).
  Id Wait(Close close, Close* evicted) TS_EXCLUDES(mu_);
  enum class Spoke { kAdmitted, kRefused, kGone };
  // The waiting connection `id` spoke: a slot, in phase kHandshaking, closed from now on by
  // `close` (kAdmitted). When none is free, the evictable slot of least progress is taken back
  // (its close moved to *evicted). kRefused when every slot is held, kGone when `id` lost its
  // place in the waiting room already: the caller closes the connection; `id` is forgotten.
  Spoke Speak(Id id, Close close, Close* evicted) TS_EXCLUDES(mu_);
  // The connection holding a slot moved on (never back to kSilent). Nothing if its slot was
  // taken back already.
  void Enter(Id id, Phase phase) TS_EXCLUDES(mu_);
  // The connection closed. Nothing if its place was taken back already.
  void Release(Id id) TS_EXCLUDES(mu_);

  int held() const TS_EXCLUDES(mu_);     // slots in phase kHeld
  int taken() const TS_EXCLUDES(mu_);    // slots in any phase but kSilent
  int waiting() const TS_EXCLUDES(mu_);  // connections in the waiting room

 private:
  struct Entry {
    Phase phase;
    Close close;
  };
  // Forgets `id` and moves its close out.
  Close ForgetLocked(std::map<Id, Entry>::iterator it) TS_REQUIRES(mu_);

  const int capacity_;
  const int waiting_capacity_;
  mutable Mutex mu_;
  Id next_id_ TS_GUARDED_BY(mu_) = 1;
  std::map<Id, Entry> entries_ TS_GUARDED_BY(mu_);
  // Per phase but kHeld, the ids in it, oldest first (ids grow).
  std::array<std::set<Id>, 3> by_phase_ TS_GUARDED_BY(mu_);
  int held_ TS_GUARDED_BY(mu_) = 0;
};

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_CONNECTION_SLOTS_H_
