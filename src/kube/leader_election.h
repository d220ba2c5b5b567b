// Leader election on a coordination.k8s.io/v1 Lease, with kube-scheduler's semantics and flag
// names (--leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
// --leader-elect-retry-period 2s): a candidate takes the lease when it is free or when its record
// has not changed for the lease duration *as measured on the candidate's own clock* (clocks of
// different machines are never compared); the leader renews it every retry period, and stops
// being the leader once it has not renewed for the renew deadline, which is shorter than the lease
// duration, so it has stopped before anyone else can take over. Every write is conditional on the
// resourceVersion read (409 on a race), so two candidates never both win.
//
// Fencing (docs/extender.md, "Leadership and fencing"): a standby stamps a record when its read
// returned; a Lease that vanished while another held it is taken only a lease duration after it
// was first seen gone; and WriteBudget() bounds every write of the leader by its renew deadline,
// the margin (lease duration - renew deadline) before any standby may lead.
//
// Clocks are injected: `steady_ns` measures every interval, `wall_ns` only stamps the Lease's
// acquireTime and renewTime for humans. Tests drive Step() with fake clocks.
#ifndef TOPOSCHED_KUBE_LEADER_ELECTION_H_
#define TOPOSCHED_KUBE_LEADER_ELECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "base/clock.h"
#include "base/mutex.h"
#include "base/result.h"
#include "kube/client.h"

namespace toposched::kube {

struct LeaderElectionConfig {
  std::string lease_namespace = "kube-system";
  std::string lease_name;
  std::string identity;  // unique per process: hostname (the pod's name) + "_" + random
  std::chrono::nanoseconds lease_duration = std::chrono::seconds(15);
  std::chrono::nanoseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::nanoseconds retry_period = std::chrono::seconds(2);
  // The least time a write is given (WriteBudget): with less left before the renew deadline, the
  // leader sends nothing rather than a write cut short.
  std::chrono::nanoseconds min_write_budget = std::chrono::seconds(1);
};

// The least margin between the renew deadline and the lease duration: it covers the difference
// between the replicas' clock rates over one lease and the travel time of the leader's last write.
inline constexpr std::chrono::seconds kMinFenceMargin{1};

// The rules kube-scheduler applies: all positive, lease duration > renew deadline > retry period
// × 1.2 (the jitter of a retry), and a name and an identity; and toposched's fence: lease
// duration ≥ renew deadline + kMinFenceMargin, and renew deadline − 1.2 × retry period ≥ the
// least write budget, so a leader renewing on time can always write.
Status ValidateLeaderElection(const LeaderElectionConfig& config);

// The spec of a Lease and its resourceVersion.
struct LeaseRecord {
  std::string holder;
  int64_t lease_duration_seconds = 0;
  std::string acquire_time;  // RFC 3339 with microseconds, as the API writes MicroTime
  std::string renew_time;
  int64_t transitions = 0;
  std::string resource_version;
};

Result<LeaseRecord> DecodeLease(std::string_view json);
// A Lease object; metadata.resourceVersion is included when the record has one.
std::string EncodeLease(std::string_view ns, std::string_view name, const LeaseRecord& record);
// MicroTime text of a Unix time in nanoseconds: 2024-05-01T12:00:00.123456Z.
std::string FormatMicroTime(int64_t unix_ns);

class LeaderElector {
 public:
  struct Callbacks {
    // Called on the electing thread, no lock held, *before* IsLeader() turns true: a gate it
    // closes (e.g. "serve only from a fresh list") is closed before the first request as leader.
    std::function<void()> started_leading;
    std::function<void()> stopped_leading;
  };

  // The client must outlive the elector; give it a request timeout below the retry period, so one
  // hung request does not outlast the renew deadline.
  LeaderElector(ApiClient& client, LeaderElectionConfig config, NanoClock steady_ns,
                NanoClock wall_ns, Callbacks callbacks = {});
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // One round: read the lease, then take or renew it if allowed. Returns IsLeader() after it.
  bool Step();
  // True while this process holds the lease and its last renewal is younger than the renew
  // deadline. Reads the clock, so it turns false on time even while a renewal hangs.
  bool IsLeader() const;
  // The fence of every write this leader makes: how long a write sent now may take so that it
  // has ended (client and API server both cut it) by the renew deadline, i.e. at least the margin
  // before any standby may take over. An error, naming why, when this process does not lead or
  // has less than min_write_budget left: the write must not be sent. Call right before sending.
  Result<std::chrono::milliseconds> WriteBudget() const;
  // Gives the lease up (holder "", duration 1 s) if this process holds it, so a standby takes
  // over at its next retry instead of after the lease duration.
  Status Release();

  // Runs Step() every retry period on a thread of its own, until Stop().
  void Start();
  // Stops the thread, then releases the lease. Call it only once no write of this process can
  // still be in flight: a standby takes over at its next retry.
  void Stop();

  std::string ObservedHolder() const;
  // Times this process became leader or stopped being leader.
  uint64_t transitions() const { return transitions_.load(); }
  const LeaderElectionConfig& config() const { return config_; }

 private:
  // Settles the round that started at `started_ns`; calls the callbacks on a change.
  bool Finish(bool renewed, int64_t started_ns, bool other_holds);
  // Remembers a record just read or written; the observation time moves when it changed.
  void Observe(const LeaseRecord& record, int64_t now_ns);
  std::string LeasePath() const;
  // The record's lease duration in nanoseconds (ours when it names none).
  int64_t DurationOf(const LeaseRecord& record) const;

  ApiClient& client_;
  const LeaderElectionConfig config_;
  NanoClock steady_ns_;
  NanoClock wall_ns_;
  Callbacks callbacks_;

  mutable Mutex mu_;
  LeaseRecord observed_ TS_GUARDED_BY(mu_);        // the last record read
  int64_t observed_at_ns_ TS_GUARDED_BY(mu_) = 0;  // when a read first returned it
  // When a read first found the Lease gone (0: it exists).
  int64_t absent_since_ns_ TS_GUARDED_BY(mu_) = 0;
  bool leader_ TS_GUARDED_BY(mu_) = false;
  int64_t renewed_at_ns_ TS_GUARDED_BY(mu_) = 0;  // start of the last successful round
  std::atomic<uint64_t> transitions_{0};

  std::thread thread_;
  Mutex wait_mu_;
  CondVar wake_;
  bool stop_ TS_GUARDED_BY(wait_mu_) = false;
};

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_LEADER_ELECTION_H_
