// The HTTP server's connection slots: who holds them, and which may be taken back when a new
// connection needs one (issue 29: idle TCP connections and uncertified keep-alive probes held
// every slot, and the certified scheduler was refused). A connection that has not yet shown who it
// is may lose its slot to a newer one, in the order of least progress: one that has sent nothing
// yet, then one that finished TLS without a client certificate and waits for its request, then
// one in its TLS handshake; oldest first within each. A held slot (a client that authenticated, or
// a request being answered) is never taken back: only when every slot is held is a new
// connection refused.
#ifndef TOPOSCHED_NET_CONNECTION_SLOTS_H_
#define TOPOSCHED_NET_CONNECTION_SLOTS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "base/mutex.h"

namespace toposched::net {

class ConnectionSlots {
 public:
  // In the order slots are taken back.
  enum class Phase { kSilent = 0, kAnonymous = 1, kHandshaking = 2, kHeld = 3 };
  using Id = uint64_t;  // never 0

  explicit ConnectionSlots(int capacity) : capacity_(capacity) {}

  // A slot for a new connection, in phase kSilent; `close` closes that connection should its slot
  // be taken back. When none is free, the evictable connection of least progress loses its slot:
  // its `close` is moved to *evicted, for the caller to call (outside this lock). Nothing when
  // every slot is held: the caller refuses the connection.
  std::optional<Id> Take(std::function<void()> close, std::function<void()>* evicted)
      TS_EXCLUDES(mu_);
  // The connection moved on. Nothing if its slot was taken back already.
  void Enter(Id id, Phase phase) TS_EXCLUDES(mu_);
  // The connection closed. Nothing if its slot was taken back already.
  void Release(Id id) TS_EXCLUDES(mu_);

  int held() const TS_EXCLUDES(mu_);   // slots in phase kHeld
  int taken() const TS_EXCLUDES(mu_);  // slots in any phase

 private:
  // Takes `id` out of `phase`'s books; returns its close (empty for a held connection).
  std::function<void()> LeavePhaseLocked(Id id, Phase phase) TS_REQUIRES(mu_);
  static constexpr int kEvictablePhases = 3;

  const int capacity_;
  mutable Mutex mu_;
  Id next_id_ TS_GUARDED_BY(mu_) = 1;
  // The evictable slots by phase, each ordered oldest first (ids grow).
  std::array<std::map<Id, std::function<void()>>, kEvictablePhases> evictable_ TS_GUARDED_BY(mu_);
  std::map<Id, Phase> phase_ TS_GUARDED_BY(mu_);
  int held_ TS_GUARDED_BY(mu_) = 0;
};

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_CONNECTION_SLOTS_H_
