// The extender's Prometheus metrics, served as text on GET /metrics. Thread-safe.
#ifndef TOPOSCHED_EXTENDER_METRICS_H_
#define TOPOSCHED_EXTENDER_METRICS_H_

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace toposched::extender {

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One served request: verb is filter, prioritize, bind, preempt (or another path).
  void ObserveRequest(std::string_view verb, int http_status, double seconds);
  void CountAllocation(std::string_view resource);
  void SetOutstandingReservations(int count);
  void CountRebuildConflicts(int count);
  void CountApiError(std::string_view operation);
  // A tracker call that failed where it should not have (e.g. a commit after the reservation
  // expired); each is logged and reconciled where it happens.
  void CountTrackerError(std::string_view operation);
  // An object an informer skipped because it does not decode (kind: pods, nodes).
  void CountSkippedObject(std::string_view kind);
  void SetReady(bool ready);
  // Leader election: 1 while this process holds the lease; each change of role, by the new role.
  void SetLeader(bool leader);
  void CountLeaderTransition(bool to_leader);
  // Shared pools: partitions being removed, whose devices stay held until they are gone.
  void SetPartitionRemovalsPending(int count);
  // Gangs: how many hold seats now; each gang reservation's end, by outcome ("bound": every
  // member bound, "expired": --gang-timeout, "deleted": its last pod deleted) and each refusal of
  // a gang member's filter ("refused": the gang cannot be placed whole, or its size is unknown).
  void SetGangsHeld(int count);
  void CountGangOutcome(std::string_view outcome);

  // The Prometheus text exposition of every metric.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Counter>* allocations_;
  prometheus::Gauge* reservations_;
  prometheus::Counter* rebuild_conflicts_;
  prometheus::Family<prometheus::Counter>* api_errors_;
  prometheus::Family<prometheus::Counter>* tracker_errors_;
  prometheus::Family<prometheus::Counter>* objects_skipped_;
  prometheus::Gauge* ready_;
  prometheus::Gauge* leader_;
  prometheus::Family<prometheus::Counter>* leader_transitions_;
  prometheus::Gauge* removals_pending_;
  prometheus::Gauge* gangs_held_;
  prometheus::Family<prometheus::Counter>* gang_outcomes_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_METRICS_H_
