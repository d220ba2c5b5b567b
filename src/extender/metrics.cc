#include "extender/metrics.h"

#include <algorithm>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace toposched::extender {

namespace {
// From 50 us to 5 s: filter answers in well under a millisecond, bind waits on the API server.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0};

// The verbs with a label of their own; any other path is "other".
std::string_view VerbLabel(std::string_view verb) {
  for (std::string_view known : {"filter", "prioritize", "bind", "preempt", "healthz", "readyz",
                                 "metrics", "fleet", "why", "history"}) {
    if (verb == known) return known;
  }
  return "other";
}
}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("toposched_extender_requests_total")
                   .Help("HTTP requests served, by verb and status code")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("toposched_extender_request_duration_seconds")
                  .Help("Time to answer a request, by verb")
                  .Register(*registry_);
  allocations_ = &prometheus::BuildCounter()
                      .Name("toposched_allocations_total")
                      .Help("Containers given ids at bind, by resource")
                      .Register(*registry_);
  reservations_ = &prometheus::BuildGauge()
                       .Name("toposched_reservations_outstanding")
                       .Help("Ids reserved by a bind in flight, not yet committed")
                       .Register(*registry_)
                       .Add({});
  removals_pending_ = &prometheus::BuildGauge()
                           .Name("toposched_partition_removals_pending")
                           .Help("Partitions being removed; their devices are held until gone")
                           .Register(*registry_)
                           .Add({});
  gangs_held_ = &prometheus::BuildGauge()
                     .Name("toposched_gangs_held")
                     .Help("Multi-node gangs holding seats for members not yet bound")
                     .Register(*registry_)
                     .Add({});
  gang_outcomes_ = &prometheus::BuildCounter()
                        .Name("toposched_gang_outcomes_total")
                        .Help(
                            "Gang reservations ended (bound, expired, deleted) and gang "
                            "members refused by filter (refused)")
                        .Register(*registry_);
  rebuild_conflicts_ = &prometheus::BuildCounter()
                            .Name("toposched_rebuild_conflicts_total")
                            .Help("Pods whose recorded ids conflicted with another pod's")
                            .Register(*registry_)
                            .Add({});
  api_errors_ = &prometheus::BuildCounter()
                     .Name("toposched_api_errors_total")
                     .Help("Failed calls to the Kubernetes API server, by operation")
                     .Register(*registry_);
  bind_read_backs_ = &prometheus::BuildCounter()
                          .Name("toposched_bind_read_backs_total")
                          .Help(
                              "Pods read back after a Binding whose outcome was unknown, by "
                              "what they showed (committed, released, unknown)")
                          .Register(*registry_);
  tracker_errors_ = &prometheus::BuildCounter()
                         .Name("toposched_tracker_errors_total")
                         .Help(
                             "Tracker calls that failed where they should not have, by operation "
                             "(commit: a reservation lost during a slow Binding write)")
                         .Register(*registry_);
  objects_skipped_ = &prometheus::BuildCounter()
                          .Name("toposched_informer_objects_skipped_total")
                          .Help(
                              "Objects from the API server skipped because they do not decode, by "
                              "kind (pods, nodes); each is logged with its namespace/name")
                          .Register(*registry_);
  catch_up_timeouts_ =
      &prometheus::BuildCounter()
           .Name("toposched_catch_up_timeouts_total")
           .Help(
               "filter and prioritize calls answered before the pod watch reached the pod's "
               "resourceVersion as kube-scheduler sent it, after --catch-up-wait")
           .Register(*registry_)
           .Add({});
  held_back_ = &prometheus::BuildCounter()
                    .Name("toposched_filter_held_back_total")
                    .Help(
                        "filter calls that refused a pod every node so that smaller pods waiting "
                        "now go first (--hold-back-hours)")
                    .Register(*registry_)
                    .Add({});
  ready_ = &prometheus::BuildGauge()
                .Name("toposched_ready")
                .Help("1 once the first full sync and rebuild are done")
                .Register(*registry_)
                .Add({});
  leader_ = &prometheus::BuildGauge()
                 .Name("toposched_leader")
                 .Help(
                     "1 while this extender holds the leader lease (always 1 without "
                     "--leader-elect)")
                 .Register(*registry_)
                 .Add({});
  leader_transitions_ = &prometheus::BuildCounter()
                             .Name("toposched_leader_transitions_total")
                             .Help("Changes of this extender's role, by the role it took")
                             .Register(*registry_);
  // Both roles from the start: a takeover shows as an increase, not as a series appearing.
  for (const char* to : {"leader", "standby"}) leader_transitions_->Add({{"to", to}});
  http_connections_ = &prometheus::BuildGauge()
                           .Name("toposched_http_connections")
                           .Help("Open connections to the extender (--max-connections)")
                           .Register(*registry_)
                           .Add({});
  http_bodies_in_flight_ =
      &prometheus::BuildGauge()
           .Name("toposched_http_bodies_in_flight")
           .Help("Request bodies being received or handled (--max-bodies-in-flight)")
           .Register(*registry_)
           .Add({});
  http_requests_in_flight_ = &prometheus::BuildGauge()
                                  .Name("toposched_http_requests_in_flight")
                                  .Help("Requests handed to a verb whose answer is not written yet")
                                  .Register(*registry_)
                                  .Add({});
  http_refused_ = &prometheus::BuildCounter()
                       .Name("toposched_http_refused_total")
                       .Help(
                           "Connections and requests the HTTP server refused or cut, by reason: "
                           "connections (--max-connections), bodies (--max-bodies-in-flight, "
                           "--body-memory-limit), too_large (--body-limit), read_timeout "
                           "(--header-timeout, --handshake-timeout, --body-timeout), evicted "
                           "(not yet authenticated, closed to give its slot to a newer "
                           "connection)")
                       .Register(*registry_);
  http_accept_fd_exhausted_ =
      &prometheus::BuildCounter()
           .Name("toposched_http_accept_fd_exhausted_total")
           .Help(
               "accept() failures for want of file descriptors (EMFILE, ENFILE); accepting "
               "pauses after each")
           .Register(*registry_)
           .Add({});
  binds_pending_ = &prometheus::BuildGauge()
                        .Name("toposched_extender_binds_pending")
                        .Help("Binds waiting for or holding a bind thread (--bind-queue)")
                        .Register(*registry_)
                        .Add({});
  binds_ = &prometheus::BuildCounter()
                .Name("toposched_binds_total")
                .Help(
                    "Binds ended, by outcome: bound (the Binding is written), failed (answered "
                    "with an error), refused (not started: shutting down, restart fence)")
                .Register(*registry_);
  for (const char* outcome : {"bound", "failed", "refused"}) binds_->Add({{"outcome", outcome}});
  BuildFleetMetrics();
}

void Metrics::BuildFleetMetrics() {
  auto gauge = [this](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  };
  fleet_time_ = &gauge("toposched_fleet_sample_timestamp_seconds",
                       "Unix time of the fleet history's newest sample (--history-interval)")
                     ->Add({});
  fleet_allocated_share_ =
      &gauge("toposched_fleet_allocated_share",
             "Share (0-1) of the fleet's Neuron devices held, cores as their share of a device")
           ->Add({});
  fleet_nodes_ = gauge("toposched_fleet_nodes", "Neuron nodes the extender places on, by type");
  fleet_devices_ = gauge("toposched_fleet_devices", "Neuron devices, by instance type");
  fleet_allocated_ = gauge("toposched_fleet_allocated_devices",
                           "Devices held, by instance type (cores as their share of a device)");
  fleet_fragmented_ = gauge(
      "toposched_fleet_fragmented_devices",
      "Free devices no free legal set of an expected request class can use, weighted by the "
      "class's share (FGD's measure, as /v1/fleet's per-node fragmentation), by instance type");
  fleet_free_sets_ = gauge(
      "toposched_fleet_free_sets",
      "Legal sets free now, by instance type and request class (only classes the type can serve)");
  fleet_set_cost_ = gauge("toposched_fleet_set_cost",
                          "What taking one more free set of a request class costs in the "
                          "scarcity scorer's terms (higher: scarcer), by request class");
  fleet_pending_ = gauge(
      "toposched_fleet_pending_pods",
      "Pods asking for Neuron resources with no node, by the closest reason any node gives them "
      "(fits, no-legal-set, too-few-free, reserved-for-gang, never-on-this-type, not-managed; "
      "unclassified: beyond what one sample works out)");
}

void Metrics::SetFleet(const FleetSample& s) {
  MutexLock lock(fleet_mu_);
  std::set<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Labels>> now;
  auto set = [&now](prometheus::Family<prometheus::Gauge>* family, prometheus::Labels labels,
                    double value) {
    family->Add(labels).Set(value);
    now.emplace(family, std::move(labels));
  };
  fleet_time_->Set(static_cast<double>(s.time));
  fleet_allocated_share_->Set(s.allocated_share);
  for (const TypeSample& t : s.types) {
    const prometheus::Labels type = {{"instance_type", t.instance_type}};
    set(fleet_nodes_, type, t.nodes);
    set(fleet_devices_, type, static_cast<double>(t.devices));
    set(fleet_allocated_, type, t.allocated_devices);
    set(fleet_fragmented_, type, t.fragmentation);
    for (size_t c = 0; c < t.free_sets.size() && c < s.classes.size(); ++c) {
      if (!t.free_sets[c]) continue;
      set(fleet_free_sets_, {{"instance_type", t.instance_type}, {"request", s.classes[c].request}},
          static_cast<double>(*t.free_sets[c]));
    }
  }
  for (const ClassSample& c : s.classes)
    set(fleet_set_cost_, {{"request", c.request}}, c.cost_per_set);
  for (size_t k = 0; k < kWhyKinds.size(); ++k) {
    set(fleet_pending_, {{"reason", std::string(kWhyKinds[k])}}, s.pending_by_kind[k]);
  }
  set(fleet_pending_, {{"reason", "unclassified"}}, s.pending_unclassified);
  for (const auto& [family, labels] : fleet_labels_) {
    if (!now.contains({family, labels})) family->Remove(&family->Add(labels));
  }
  fleet_labels_ = std::move(now);
}

void Metrics::CountBind(std::string_view outcome) {
  binds_->Add({{"outcome", std::string(outcome)}}).Increment();
}

void Metrics::SetHttpServerStats(const net::HttpServerStats& stats) {
  http_connections_->Set(static_cast<double>(stats.connections));
  http_bodies_in_flight_->Set(static_cast<double>(stats.bodies_in_flight));
  http_requests_in_flight_->Set(static_cast<double>(stats.requests_in_flight));
  MutexLock lock(http_mu_);
  auto add = [](prometheus::Counter& counter, uint64_t now, uint64_t& last) {
    if (now > last) counter.Increment(static_cast<double>(now - last));
    last = std::max(last, now);
  };
  add(http_refused_->Add({{"reason", "connections"}}), stats.connections_refused,
      http_last_.connections_refused);
  add(http_refused_->Add({{"reason", "bodies"}}), stats.bodies_refused, http_last_.bodies_refused);
  add(http_refused_->Add({{"reason", "too_large"}}), stats.bodies_too_large,
      http_last_.bodies_too_large);
  add(http_refused_->Add({{"reason", "read_timeout"}}), stats.read_timeouts,
      http_last_.read_timeouts);
  add(http_refused_->Add({{"reason", "evicted"}}), stats.connections_evicted,
      http_last_.connections_evicted);
  add(*http_accept_fd_exhausted_, stats.accept_fd_exhausted, http_last_.accept_fd_exhausted);
}

void Metrics::SetBindsPending(int count) { binds_pending_->Set(count); }

void Metrics::ObserveRequest(std::string_view verb, int http_status, double seconds) {
  const std::string v(VerbLabel(verb));
  requests_->Add({{"verb", v}, {"code", std::to_string(http_status)}}).Increment();
  latency_->Add({{"verb", v}}, kLatencyBuckets).Observe(seconds);
}

void Metrics::CountAllocation(std::string_view resource) {
  allocations_->Add({{"resource", std::string(resource)}}).Increment();
}

void Metrics::SetOutstandingReservations(int count) { reservations_->Set(count); }

void Metrics::SetGangsHeld(int count) { gangs_held_->Set(count); }

void Metrics::CountGangOutcome(std::string_view outcome) {
  gang_outcomes_->Add({{"outcome", std::string(outcome)}}).Increment();
}

void Metrics::SetPartitionRemovalsPending(int count) { removals_pending_->Set(count); }

void Metrics::CountRebuildConflicts(int count) { rebuild_conflicts_->Increment(count); }

void Metrics::CountApiError(std::string_view operation) {
  api_errors_->Add({{"operation", std::string(operation)}}).Increment();
}

void Metrics::CountBindReadBack(std::string_view outcome) {
  bind_read_backs_->Add({{"outcome", std::string(outcome)}}).Increment();
}

void Metrics::CountTrackerError(std::string_view operation) {
  tracker_errors_->Add({{"operation", std::string(operation)}}).Increment();
}

void Metrics::CountSkippedObject(std::string_view kind) {
  objects_skipped_->Add({{"kind", std::string(kind)}}).Increment();
}

void Metrics::CountCatchUpTimeout() { catch_up_timeouts_->Increment(); }

void Metrics::CountHeldBack() { held_back_->Increment(); }

void Metrics::SetReady(bool ready) { ready_->Set(ready ? 1 : 0); }

void Metrics::SetLeader(bool leader) { leader_->Set(leader ? 1 : 0); }

void Metrics::CountLeaderTransition(bool to_leader) {
  leader_transitions_->Add({{"to", to_leader ? "leader" : "standby"}}).Increment();
}

std::string Metrics::Serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace toposched::extender
