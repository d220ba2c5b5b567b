// The extender's Prometheus metrics, served as text on GET /metrics. Thread-safe.
#ifndef TOPOSCHED_EXTENDER_METRICS_H_
#define TOPOSCHED_EXTENDER_METRICS_H_

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "base/mutex.h"
#include "extender/fleet_history.h"
#include "net/http_server.h"

namespace toposched::extender {

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One served request: verb is filter, prioritize, bind, preempt, healthz, readyz or metrics;
  // any other path is counted as verb="other" (a label per path would grow without bound).
  void ObserveRequest(std::string_view verb, int http_status, double seconds);
  // The HTTP server's limits at work (net::HttpServerStats), read when /metrics is served.
  void SetHttpServerStats(const net::HttpServerStats& stats);
  // Binds waiting for or holding a bind thread (--bind-queue bounds them).
  void SetBindsPending(int count);
  void CountAllocation(std::string_view resource);
  void SetOutstandingReservations(int count);
  void CountRebuildConflicts(int count);
  void CountApiError(std::string_view operation);
  // A pod read back after a Binding whose outcome was unknown (or answered 409), by what it
  // showed: "committed" (bound as written), "released" (not bound, gone, or bound by another
  // write), "unknown" (unreadable, or the write may still land: the ids stay held).
  void CountBindReadBack(std::string_view outcome);
  // A tracker call that failed where it should not have (e.g. a commit after the reservation
  // expired); each is logged and reconciled where it happens.
  void CountTrackerError(std::string_view operation);
  // An object an informer skipped because it does not decode (kind: pods, nodes).
  void CountSkippedObject(std::string_view kind);
  // A filter or prioritize answered before the pod watch caught up with the scheduler's pod.
  void CountCatchUpTimeout();
  // A filter that let smaller pods go first (--hold-back-hours): the pod was refused every node.
  void CountHeldBack();
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

  // Each bind's end, by outcome: "bound" (the Binding is written), "failed" (answered with an
  // error: no legal set left, an API error, a gang member refused...), "refused" (not started:
  // shutting down, a lone extender's restart fence, or a wait for a bind thread past
  // --bind-wait-limit).
  void CountBind(std::string_view outcome);
  // The fleet's gauges from the history's newest sample (docs/observability.md, "Metrics").
  // Label sets are bounded: instance types and request classes the catalog knows, the fixed
  // reason kinds; a type or class gone from the fleet is removed.
  void SetFleet(const FleetSample& sample);

  // The Prometheus text exposition of every metric.
  std::string Serialize() const;

 private:
  void BuildFleetMetrics();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Counter>* allocations_;
  prometheus::Gauge* reservations_;
  prometheus::Counter* rebuild_conflicts_;
  prometheus::Family<prometheus::Counter>* api_errors_;
  prometheus::Family<prometheus::Counter>* bind_read_backs_;
  prometheus::Family<prometheus::Counter>* tracker_errors_;
  prometheus::Family<prometheus::Counter>* objects_skipped_;
  prometheus::Counter* catch_up_timeouts_;
  prometheus::Counter* held_back_;
  prometheus::Gauge* ready_;
  prometheus::Gauge* leader_;
  prometheus::Family<prometheus::Counter>* leader_transitions_;
  prometheus::Gauge* removals_pending_;
  prometheus::Gauge* gangs_held_;
  prometheus::Family<prometheus::Counter>* gang_outcomes_;
  prometheus::Gauge* http_connections_;
  prometheus::Gauge* http_bodies_in_flight_;
  prometheus::Gauge* http_requests_in_flight_;
  prometheus::Family<prometheus::Counter>* http_refused_;
  prometheus::Counter* http_accept_fd_exhausted_;
  prometheus::Gauge* binds_pending_;
  prometheus::Family<prometheus::Counter>* binds_;
  prometheus::Gauge* fleet_time_;
  prometheus::Gauge* fleet_allocated_share_;
  prometheus::Family<prometheus::Gauge>* fleet_nodes_;
  prometheus::Family<prometheus::Gauge>* fleet_devices_;
  prometheus::Family<prometheus::Gauge>* fleet_allocated_;
  prometheus::Family<prometheus::Gauge>* fleet_fragmented_;
  prometheus::Family<prometheus::Gauge>* fleet_free_sets_;
  prometheus::Family<prometheus::Gauge>* fleet_set_cost_;
  prometheus::Family<prometheus::Gauge>* fleet_pending_;
  Mutex fleet_mu_;  // one SetFleet at a time: the label sets it set last
  std::set<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Labels>> fleet_labels_
      TS_GUARDED_BY(fleet_mu_);
  Mutex http_mu_;
  net::HttpServerStats http_last_ TS_GUARDED_BY(http_mu_);  // counters already added
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_METRICS_H_
