// `toposched extender`: the kube-scheduler extender (filter, prioritize, bind, preempt) over
// HTTP(S), fed by list+watch of nodes and pods, or by a node file in offline mode.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "base/mutex.h"
#include "base/text.h"
#include "claims/gang.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "cli/allocator.h"
#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "extender/api_writer.h"
#include "extender/metrics.h"
#include "extender/offline.h"
#include "extender/router.h"
#include "extender/service.h"
#include "kube/client.h"
#include "kube/duration.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "kube/mpijob.h"
#include "kube/scheduling_groups.h"
#include "net/http_server.h"

namespace toposched::cli {

struct ExtenderOptions {
  std::string listen = "127.0.0.1:12345";
  std::string views_listen;  // empty: off
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string kubeconfig;
  std::string offline_nodes;
  std::vector<std::string> device_resources = claims::ResourceSet{}.device;
  std::vector<std::string> core_resources = claims::ResourceSet{}.core;
  std::string policy = "scarcity";
  double reservation_timeout_s = 30;
  double gang_timeout_s = 120;
  double hold_back_hours = 0;
  std::string on_device_failure = "event";
  std::string filter_answer = "best";
  double catch_up_wait_ms = 200;
  bool watch_list = true;
  size_t body_limit_mib = 256;
  int threads = 1;
  int bind_threads = 8;
  std::string bind_wait_limit = "9s";
  // The HTTP surface's bounds (net::HttpServerOptions) and who may call it.
  int max_connections = 256;
  int max_waiting_connections = 4096;
  int max_bodies_in_flight = 16;
  size_t body_memory_limit_mib = 512;
  double header_timeout_s = 30;
  double handshake_timeout_s = 5;
  double body_timeout_s = 30;
  int bind_queue = extender::Router::kDefaultBindQueue;
  bool allow_insecure_http = false;
  std::string log_level = "info";
  std::string pools_file;
  std::string partition_service;
  std::string partition_service_token_file;
  std::string partition_service_ca_file;
  double provision_timeout_s = 20;
  double provision_poll_s = 0.25;
  double partition_remove_timeout_s = 5;
  // Leader election, with kube-scheduler's flag names and duration syntax.
  bool leader_elect = false;
  std::string lease_duration = "15s";
  std::string renew_deadline = "10s";
  std::string retry_period = "2s";
  std::string lease_name = "k8s-neuron-scheduler";
  std::string lease_namespace = "kube-system";
  // Without leader election: every Binding's bound, and the wait at start (LoneWriteFence).
  std::string bind_write_timeout = "5s";
  std::string restart_settle = "10s";
  std::string restart_bind_hold = "8s";
  // The fleet history (GET /v1/history, the fleet gauges of /metrics).
  std::string history_interval = "30s";
};

namespace {

// How the extender serves: its addresses, TLS, and the limits that keep a slow or hostile client
// from holding it.
void AddServingFlags(CLI::App* cmd, ExtenderOptions* o) {
  cmd->add_option("--listen", o->listen,
                  "Address and port to serve on (HOST:PORT). Plain HTTP only on a loopback "
                  "address, unless --allow-insecure-http")
      ->capture_default_str();
  cmd->add_option("--views-listen", o->views_listen,
                  "Also serve the operators' views (the fleet page at /, /v1/fleet, /v1/why) as "
                  "plain HTTP on this loopback HOST:PORT, for `kubectl port-forward` (RBAC on "
                  "pods/portforward decides who may look); read-only, no verb. Off when empty. "
                  "The --listen port serves the same views behind its own authentication");
  cmd->add_option("--tls-cert-file", o->tls_cert_file, "Serve HTTPS with this certificate (PEM)");
  cmd->add_option("--tls-key-file", o->tls_key_file, "Private key for --tls-cert-file (PEM)");
  cmd->add_option("--tls-client-ca-file", o->tls_client_ca_file,
                  "Answer filter, prioritize, preempt and bind only to callers presenting a client "
                  "certificate signed by this CA (PEM; kube-scheduler's extender tlsConfig "
                  "certFile/keyFile); /healthz, /readyz and /metrics need none")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--allow-insecure-http", o->allow_insecure_http,
                "Serve plain HTTP on a non-loopback --listen address: anything that reaches the "
                "port could filter and bind. Without it, plain HTTP is refused there");
  cmd->add_option("--max-connections", o->max_connections,
                  "Connections that have sent a byte, at most. When all are taken, one that has "
                  "not authenticated (TLS handshake under way, or no client certificate and no "
                  "request being answered) is closed to make room for the new one, least progress "
                  "and oldest first; the new one is closed only when every one is held by a client "
                  "with a certificate or a request being answered")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-waiting-connections", o->max_waiting_connections,
                  "Accepted connections that have not sent a byte yet, at most (a descriptor each, "
                  "no TLS state); when the room is full its oldest is closed. Idle connections "
                  "thus never hold the scheduler in the kernel's accept queue. The open-file limit "
                  "is raised to fit, up to the hard limit, or the room shrinks with a warning")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-bodies-in-flight", o->max_bodies_in_flight,
                  "Requests with a body being received or handled at once; more are answered 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--body-memory-limit", o->body_memory_limit_mib,
                  "MiB of request bodies held at once, across connections (bodies grow as their "
                  "bytes arrive, never to the declared length up front); a body that would pass "
                  "it is answered 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--header-timeout", o->header_timeout_s,
                  "Seconds a connection may wait for a request's header (idle keep-alive included)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--handshake-timeout", o->handshake_timeout_s,
                  "Seconds from accepting a connection to the end of its TLS handshake (its first "
                  "byte included); a connection without a client certificate waits at most as "
                  "long for each request")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", o->body_timeout_s,
                  "Seconds a request's whole body may take to arrive; a trickling client is cut")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-limit", o->body_limit_mib,
                  "Largest request body accepted, in MiB (413 above)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--threads", o->threads,
                  "HTTP server threads. One is enough for kube-scheduler, which filters one pod at "
                  "a time (binds wait on their own threads); more add hand-offs between threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--bind-queue", o->bind_queue,
                  "Binds waiting for or holding a bind thread at most; more are answered 503 "
                  "(kube-scheduler retries the pod)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--bind-threads", o->bind_threads, "Threads for binds waiting on the API server")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--bind-wait-limit", o->bind_wait_limit,
                  "A bind that waited longer than this for a bind thread is answered 503 and not "
                  "written: kube-scheduler's httpTimeout for the extender (10s in the chart) has "
                  "passed or nearly, and a Binding landing later only makes it retry a pod that "
                  "is bound. Keep it under that httpTimeout; 0s never refuses")
      ->capture_default_str();
}

// Where the nodes and pods come from, and which resources are Neuron units.
void AddClusterFlags(CLI::App* cmd, ExtenderOptions* o) {
  cmd->add_option("--kubeconfig", o->kubeconfig,
                  "kubeconfig to reach the API server (default: $KUBECONFIG, in-cluster, "
                  "~/.kube/config)");
  cmd->add_option("--offline-nodes", o->offline_nodes,
                  "Serve against the nodes in this file (a NodeList, JSON or YAML) and bind in "
                  "memory; no API server is used")
      ->check(CLI::ExistingFile);
  cmd->add_option("--device-resource", o->device_resources,
                  "Extended resource(s) counted in whole devices (repeatable)")
      ->capture_default_str();
  cmd->add_option("--core-resource", o->core_resources,
                  "Extended resource(s) counted in cores (repeatable)")
      ->capture_default_str();
  cmd->add_option(
         "--catch-up-wait", o->catch_up_wait_ms,
         "Milliseconds filter and prioritize wait, at most, for the pod watch to reach the "
         "pod's resourceVersion as kube-scheduler sent it (its watch can be ahead of "
         "ours: a victim deleted, a pod gone); 0 never waits (docs/extender.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--watch-list", o->watch_list, kWatchListHelp)->default_str("true");
}

// How pods are placed, and what happens to them when a device fails.
void AddPlacementFlags(CLI::App* cmd, ExtenderOptions* o) {
  cmd->add_option("--policy", o->policy,
                  "How prioritize ranks nodes and bind picks ids: scarcity (take least from the "
                  "requests still expected, weighted by how few homes they have in the cluster; "
                  "docs/extender.md), best-fit (keep large free blocks whole, tightest node), "
                  "first-fit (lowest ids, as AWS), spread or binpack (lowest ids on the emptiest "
                  "or fullest node)")
      ->capture_default_str();
  cmd->add_option("--filter-answer", o->filter_answer,
                  "What filter passes for a Neuron pod that fits: best = only the node --policy "
                  "picks (kube-scheduler, left one feasible node, skips its own scoring and the "
                  "prioritize call: the fastest path, and the node is always ours); feasible = "
                  "every node that fits, ranked by prioritize beside kube-scheduler's own scores. "
                  "A pod that fits nowhere gets every node's reason either way")
      ->check(CLI::IsMember({"best", "feasible"}))
      ->capture_default_str();
  cmd->add_option("--reservation-timeout", o->reservation_timeout_s,
                  "Seconds a bind may hold ids before they are released if it never completes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--on-device-failure", o->on_device_failure,
                  "What happens to a pod when a Neuron device it holds fails (its node's device "
                  "plugin marks it out of service): event = an Event and the pod condition "
                  "toposched.io/NeuronDevicesHealthy=False, the pod keeps running; evict = the "
                  "same, then an eviction through the Eviction API (PodDisruptionBudgets are "
                  "honoured; retried every 5 s while one blocks it). Either way no new set "
                  "contains the device")
      ->check(CLI::IsMember({"event", "evict"}))
      ->capture_default_str();
  cmd->add_option("--hold-back-hours", o->hold_back_hours,
                  "Smaller pods first: filter refuses a Neuron pod (one container, no gang) that "
                  "has waited less than this many hours since its creationTimestamp while the "
                  "pods waiting now of smaller request classes that fit somewhere need more "
                  "devices than its start would leave free; its reason names them, and it is "
                  "tried again as they start. Past the age it goes in queue order. 0 = off. The "
                  "simulator's queue mode measures it (toposched simulate --hold-back-hours; "
                  "docs/extender.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 8760.0));
  cmd->add_option("--gang-timeout", o->gang_timeout_s,
                  "Seconds a multi-node gang's seats stay held without one of its members arriving "
                  "or binding; then the gang is released whole (docs/ultraserver.md)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
}

// Shared pools and the partition service that provisions them (docs/pools.md).
void AddPoolFlags(CLI::App* cmd, ExtenderOptions* o) {
  cmd->add_option("--pools", o->pools_file,
                  fmt::format("Shared accelerator pools (YAML; docs/pools.md): nodes labelled "
                              "{}=NAME share the pool NAME",
                              claims::kPoolLabel))
      ->check(CLI::ExistingFile);
  cmd->add_option("--partition-service", o->partition_service,
                  "URL of the partition service (V-IPU style) that creates a partition for each "
                  "bind into a shared pool, e.g. http://127.0.0.1:8191; none: no provisioning");
  cmd->add_option("--partition-service-token-file", o->partition_service_token_file,
                  "File holding the bearer token for --partition-service")
      ->check(CLI::ExistingFile);
  cmd->add_option("--partition-service-ca-file", o->partition_service_ca_file,
                  "CA (PEM) to trust for an https --partition-service")
      ->check(CLI::ExistingFile);
  cmd->add_option("--provision-timeout", o->provision_timeout_s,
                  "Seconds a bind waits for its partition to become active; keep it, plus "
                  "--partition-remove-timeout, under the scheduler's extender httpTimeout")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
  cmd->add_option("--provision-poll", o->provision_poll_s, "Seconds between partition status calls")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  cmd->add_option("--partition-remove-timeout", o->partition_remove_timeout_s,
                  "Seconds a failed bind waits for its partition to be gone before leaving the "
                  "removal to the background")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
}

// Who may bind: leader election among replicas, or a lone extender fenced from its previous
// process.
void AddFencingFlags(CLI::App* cmd, ExtenderOptions* o) {
  cmd->add_flag("--leader-elect", o->leader_elect,
                "Run as one of several replicas: only the holder of a coordination.k8s.io Lease "
                "answers filter, prioritize, preempt and bind and is Ready; the others keep their "
                "state warm and take over when the lease expires")
      ->capture_default_str();
  cmd->add_option("--leader-elect-lease-duration", o->lease_duration,
                  "How long a standby waits, after the lease last changed, before taking it over")
      ->capture_default_str();
  cmd->add_option("--leader-elect-renew-deadline", o->renew_deadline,
                  "How long the leader keeps serving without a successful renewal (shorter than "
                  "the lease duration)")
      ->capture_default_str();
  cmd->add_option("--leader-elect-retry-period", o->retry_period,
                  "How often to renew the lease, or try to take it")
      ->capture_default_str();
  cmd->add_option("--leader-elect-resource-name", o->lease_name, "Name of the Lease")
      ->capture_default_str();
  cmd->add_option("--leader-elect-resource-namespace", o->lease_namespace, "Namespace of the Lease")
      ->capture_default_str();
  cmd->add_option("--bind-write-timeout", o->bind_write_timeout,
                  "Without --leader-elect: how long a Binding may take; the API server is told "
                  "too (?timeout=), so it never lands later")
      ->capture_default_str();
  cmd->add_option("--restart-settle", o->restart_settle,
                  "Without --leader-elect: after start, binds wait (--restart-bind-hold) or are "
                  "refused (kube-scheduler retries the pod) until this has passed and pods are "
                  "listed afresh, so a Binding of the "
                  "previous process has landed or can no longer land; filter and prioritize are "
                  "answered at once. At least --bind-write-timeout + 1s")
      ->capture_default_str();
  cmd->add_option("--restart-bind-hold", o->restart_bind_hold,
                  "Without --leader-elect: a bind that arrives during --restart-settle waits up "
                  "to this long for binds to open before it is refused. Keep it under "
                  "kube-scheduler's httpTimeout for the extender (10s in the chart): a scheduler "
                  "older than ~1.27 parks a pod whose bind failed for up to 60 s or 5 min. 0s "
                  "refuses at once")
      ->capture_default_str();
}

}  // namespace

std::shared_ptr<ExtenderOptions> AddExtenderCommand(CLI::App& app) {
  auto o = std::make_shared<ExtenderOptions>();
  CLI::App* cmd = app.add_subcommand(
      "extender",
      "Serve kube-scheduler's extender API: POST /filter, /prioritize, /bind, /preempt; GET "
      "/healthz, /readyz, /metrics.\nOnline it lists and watches nodes and pods through the API "
      "server; with --offline-nodes it serves nodes from a file and binds in memory.");
  AddServingFlags(cmd, o.get());
  AddClusterFlags(cmd, o.get());
  AddPlacementFlags(cmd, o.get());
  AddPoolFlags(cmd, o.get());
  AddFencingFlags(cmd, o.get());
  cmd->add_option("--history-interval", o->history_interval,
                  "How often the fleet is sampled for GET /v1/history and the toposched_fleet_* "
                  "gauges of /metrics (1s to 1h); the last 6 hours are kept in memory, at most "
                  "4,320 samples (docs/observability.md)")
      ->capture_default_str();
  cmd->add_option("--log-level", o->log_level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  return o;
}

Result<std::pair<std::string, uint16_t>> SplitListen(const std::string& listen,
                                                     std::string_view flag) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos)
    return Error{fmt::format("{} must be HOST:PORT, e.g. 127.0.0.1:12345", flag)};
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::optional<int64_t> port =
      ParseDecimal(std::string_view(listen).substr(colon + 1), 0, 65535);
  if (!port) return Error{fmt::format("{}: bad port in '{}'", flag, listen)};
  if (host.empty()) host = "0.0.0.0";
  return std::pair{host, static_cast<uint16_t>(*port)};
}

namespace {

std::chrono::milliseconds Seconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The Lease settings from the flags; bad durations name their flag.
Result<kube::LeaderElectionConfig> LeaderElectionFromFlags(const ExtenderOptions& o) {
  kube::LeaderElectionConfig config;
  config.lease_name = o.lease_name;
  config.lease_namespace = o.lease_namespace;
  struct Flag {
    const char* name;
    const std::string& text;
    std::chrono::nanoseconds& out;
  };
  for (const Flag& f :
       {Flag{"--leader-elect-lease-duration", o.lease_duration, config.lease_duration},
        Flag{"--leader-elect-renew-deadline", o.renew_deadline, config.renew_deadline},
        Flag{"--leader-elect-retry-period", o.retry_period, config.retry_period}}) {
    auto parsed = kube::ParseDuration(f.text);
    if (!parsed.ok()) return Error{fmt::format("{}: {}", f.name, parsed.error())};
    f.out = *parsed;
  }
  // As kube-scheduler: the host name (a pod's name) and a random part, unique per process.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::random_device random;
  config.identity = fmt::format("{}_{:08x}{:08x}", host, random(), random());
  TOPOSCHED_RETURN_IF_ERROR(kube::ValidateLeaderElection(config));
  return config;
}

// Plain HTTP (no --tls-cert-file) is served on a loopback address only, unless
// --allow-insecure-http: anything that reaches the port could filter and bind.
Status CheckPlainHttp(const std::string& host, const ExtenderOptions& o) {
  if (!o.tls_cert_file.empty() || o.allow_insecure_http) return OkStatus();
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  if (ec) return Error{fmt::format("--listen: '{}' is not an IP address", host)};
  if (address.is_loopback()) return OkStatus();
  return Error{fmt::format(
      "--listen {}: plain HTTP on a non-loopback address would let anything that reaches the port "
      "filter and bind pods; serve TLS with client certificates (--tls-cert-file, --tls-key-file, "
      "--tls-client-ca-file), listen on 127.0.0.1, or pass --allow-insecure-http to accept that",
      o.listen)};
}

// The views' port is plain HTTP with no authentication of its own: loopback only, where only
// the pod itself (and `kubectl port-forward` into it) can reach it.
Result<std::pair<std::string, uint16_t>> ViewsListen(const ExtenderOptions& o) {
  auto listen = SplitListen(o.views_listen, "--views-listen");
  if (!listen.ok()) return listen;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(listen->first, ec);
  if (ec || !address.is_loopback()) {
    return Error{fmt::format(
        "--views-listen {}: the views' port is plain HTTP without authentication, so it listens "
        "on a loopback address only (e.g. 127.0.0.1:8090; reach it with kubectl port-forward); "
        "the --listen port serves the same views behind its TLS client certificates",
        o.views_listen)};
  }
  return listen;
}

// The service's settings from the flags (the pools, the provisioner, the gang-size reader and
// the reconcile gate are added once built).
Result<extender::ExtenderOptions> ServiceOptionsFromFlags(const ExtenderOptions& o) {
  auto policy = topology::ParsePolicy(o.policy);
  if (!policy.ok() || *policy == topology::Policy::kCountOnly) {
    return Error{
        fmt::format("--policy: {}", policy.ok() ? "count-only is for the simulator only: use "
                                                  "scarcity, best-fit, first-fit, spread or binpack"
                                                : policy.error())};
  }
  extender::ExtenderOptions options;
  options.resources.device = o.device_resources;
  options.resources.core = o.core_resources;
  options.policy = *policy;
  options.reservation_timeout = Seconds(o.reservation_timeout_s);
  options.gang_timeout = Seconds(o.gang_timeout_s);
  options.evict_on_device_failure = o.on_device_failure == "evict";
  options.filter_best_only = o.filter_answer == "best";
  options.hold_back_age =
      std::chrono::seconds(static_cast<int64_t>(std::llround(o.hold_back_hours * 3600)));
  return options;
}

net::HttpServerOptions HttpOptionsFromFlags(const ExtenderOptions& o,
                                            const std::pair<std::string, uint16_t>& listen) {
  net::HttpServerOptions http;
  http.address = listen.first;
  http.port = listen.second;
  http.threads = o.threads;
  http.body_limit = o.body_limit_mib << 20;
  http.tls_cert_file = o.tls_cert_file;
  http.tls_key_file = o.tls_key_file;
  http.tls_client_ca_file = o.tls_client_ca_file;
  http.anonymous_paths = {"/healthz", "/readyz", "/metrics"};
  http.max_connections = o.max_connections;
  http.max_waiting_connections = o.max_waiting_connections;
  http.max_bodies_in_flight = o.max_bodies_in_flight;
  http.body_memory_limit = o.body_memory_limit_mib << 20;
  http.header_timeout = Seconds(o.header_timeout_s);
  http.handshake_timeout = Seconds(o.handshake_timeout_s);
  http.body_timeout = Seconds(o.body_timeout_s);
  return http;
}

// A gang's size from its job object: an MPIJob's workers, upstream's PodGroup or Workload group
// (kube::SchedulingGroups finds the PodGroup version once).
decltype(extender::ExtenderOptions::gang_size) GangSizeFromApi(kube::ApiClient& api) {
  auto groups = std::make_shared<kube::SchedulingGroups>(
      [&api](std::string_view path) { return api.Get(path); });
  return [&api, groups](const std::string& ns, const claims::GangMembership& gang) -> Result<int> {
    if (gang.source == "PodGroup") return groups->PodGroupMinCount(ns, gang.job_name);
    if (gang.source == "Workload")
      return groups->WorkloadMinCount(ns, gang.job_name, gang.pod_group);
    TOPOSCHED_ASSIGN_OR_RETURN(auto response, api.Get(kube::MpiJobPath(ns, gang.job_name)));
    if (response.status != 200) {
      return Error{
          fmt::format("reading MPIJob {}/{}: HTTP {}", ns, gang.job_name, response.status)};
    }
    return kube::DecodeMpiJobWorkers(response.body);
  };
}

// Everything the extender runs. Members are destroyed bottom-up, so each goes before what it
// uses: the informers before the service they feed, the service before its writer and client.
struct ExtenderProcess {
  explicit ExtenderProcess(const ExtenderOptions& flags) : o(flags) {}

  // Each builder checks its flags before anything connects and says what is wrong.
  Status BuildPools(const topology::Catalog& catalog);
  Status BuildProvisioner();
  Status ConnectCluster();
  void BuildService(const topology::Catalog& catalog);
  Status FeedService();
  void BuildRouter();

  const ExtenderOptions& o;
  extender::ExtenderOptions service_options;
  extender::Metrics metrics;
  topology::PoolSet pools;
  std::unique_ptr<provision::PartitionService> partitions;
  std::unique_ptr<provision::Provisioner> provisioner;
  std::optional<kube::LeaderElectionConfig> election;
  std::unique_ptr<kube::ApiClient> client;
  std::unique_ptr<kube::ApiClient> election_client;
  std::unique_ptr<kube::LeaderElector> elector;
  std::unique_ptr<extender::LoneWriteFence> lone_fence;  // online without election
  std::unique_ptr<extender::ClusterWriter> writer;
  std::unique_ptr<extender::ExtenderService> service;
  // A new leader serves only from a pod list sent after it took the lease (a quorum read), not
  // from a watch that may lag: the ticket of that relist (kube::Informer::Relist).
  std::atomic<uint64_t> fresh_list_ticket{0};
  std::atomic<bool> shutting_down{false};
  std::unique_ptr<kube::Informer<kube::Node>> node_informer;
  std::unique_ptr<kube::Informer<kube::Pod>> pod_informer;
  std::unique_ptr<extender::Router> router;
};

Status ExtenderProcess::BuildPools(const topology::Catalog& catalog) {
  if (!o.pools_file.empty()) {
    auto parsed = topology::PoolSet::Parse(ReadWholeFile(o.pools_file), o.pools_file, catalog);
    if (!parsed.ok()) return Error{fmt::format("--pools: {}", parsed.error())};
    pools = std::move(parsed).value();
    spdlog::info("shared pools: {}", pools.Names());
  }
  service_options.pools = &pools;
  return OkStatus();
}

Status ExtenderProcess::BuildProvisioner() {
  if (o.partition_service.empty()) return OkStatus();
  provision::HttpServiceConfig config;
  config.url = o.partition_service;
  config.ca_file = o.partition_service_ca_file;
  if (!o.partition_service_token_file.empty()) {
    Result<std::string> token = ReadTokenFile(o.partition_service_token_file);
    if (!token.ok()) {
      return Error{fmt::format("--partition-service-token-file: {}", token.error())};
    }
    config.token = std::move(token).value();
  }
  auto made = provision::MakeHttpService(config);
  if (!made.ok()) return Error{fmt::format("--partition-service: {}", made.error())};
  partitions = std::move(made).value();
  provision::ProvisionOptions popts;
  popts.create_timeout = Seconds(o.provision_timeout_s);
  popts.poll_interval = Seconds(o.provision_poll_s);
  popts.remove_timeout = Seconds(o.partition_remove_timeout_s);
  provisioner = std::make_unique<provision::Provisioner>(
      *partitions, popts, SteadyNs,
      [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); });
  service_options.provisioner = provisioner.get();
  spdlog::info("binds into shared pools create partitions at {} (timeout {} s)",
               o.partition_service, o.provision_timeout_s);
  return OkStatus();
}

// The API client, the elector and the writer (or, offline, a writer that keeps binds in memory).
Status ExtenderProcess::ConnectCluster() {
  if (!o.offline_nodes.empty()) {
    if (o.leader_elect) {
      return Error{"--leader-elect needs the API server; it cannot be used with --offline-nodes"};
    }
    writer = std::make_unique<extender::OfflineClusterWriter>();
    return OkStatus();
  }
  if (o.leader_elect) {
    TOPOSCHED_ASSIGN_OR_RETURN(election, LeaderElectionFromFlags(o));
  }
  extender::LoneWriteFence::Options lone;
  if (!o.leader_elect) {
    for (auto [flag, text, out] :
         {std::tuple{"--bind-write-timeout", &o.bind_write_timeout, &lone.write_timeout},
          std::tuple{"--restart-settle", &o.restart_settle, &lone.settle},
          std::tuple{"--restart-bind-hold", &o.restart_bind_hold, &lone.hold}}) {
      auto parsed = kube::ParseDuration(*text);
      if (!parsed.ok()) return Error{fmt::format("{}: {}", flag, parsed.error())};
      *out = std::chrono::duration_cast<std::chrono::milliseconds>(*parsed);
    }
    TOPOSCHED_RETURN_IF_ERROR(extender::LoneWriteFence::Validate(lone));
  }
  auto made = kube::ApiClient::FromEnvironment(o.kubeconfig);
  if (!made.ok()) {
    return Error{
        fmt::format("cannot reach the API server: {} (or use --offline-nodes FILE)", made.error())};
  }
  client = std::move(made).value();
  service_options.gang_size = GangSizeFromApi(*client);
  if (!election) {
    // Nothing else fences a lone process from its previous incarnation's writes (a crash, a
    // restart): its clock starts here, before anything can be written.
    lone_fence = std::make_unique<extender::LoneWriteFence>(
        lone, SteadyNs, [this] { return pod_informer ? pod_informer->Relist() : UINT64_MAX; },
        [this] { return pod_informer ? pod_informer->RelistsDelivered() : 0; });
    extender::LoneWriteFence* fence = lone_fence.get();
    writer = std::make_unique<extender::ApiClusterWriter>(*client, nullptr,
                                                          [fence] { return fence->WriteBudget(); });
    service_options.bind_gate = [fence]() -> Status {
      fence->AwaitSettled();
      auto budget = fence->WriteBudget();
      return budget.ok() ? OkStatus() : Status(Error{budget.error()});
    };
    spdlog::info(
        "no leader election: binds wait {} after start (--restart-settle), each held up to {} "
        "(--restart-bind-hold); every Binding is cut at {} (--bind-write-timeout)",
        o.restart_settle, o.restart_bind_hold, o.bind_write_timeout);
    return OkStatus();
  }
  const kube::LeaderElectionConfig& config = *election;
  // Its own connections, with requests cut at one retry period: a hung renewal must not hold the
  // elector past its renew deadline.
  kube::ClientConfig election_config = client->config();
  election_config.request_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(config.retry_period);
  auto made_election = kube::ApiClient::Create(election_config);
  if (!made_election.ok()) return Error{fmt::format("leader election: {}", made_election.error())};
  election_client = std::move(made_election).value();
  if (client->config().request_timeout < config.min_write_budget) {
    return Error{fmt::format(
        "the API client's request timeout ({}) is shorter than the least time a Binding is "
        "given under leader election ({})",
        kube::FormatDuration(client->config().request_timeout),
        kube::FormatDuration(config.min_write_budget))};
  }
  // Runs before IsLeader() turns true (the elector's contract), so the serving gate is closed
  // until the fresh list is in.
  auto started_leading = [this] {
    metrics.CountLeaderTransition(true);
    if (service) service->RequireReconcile();
    if (pod_informer) {
      fresh_list_ticket = pod_informer->Relist();
      spdlog::info("leader: listing pods afresh before serving (a watch may lag)");
    }
  };
  elector = std::make_unique<kube::LeaderElector>(
      *election_client, config, SteadyNs, WallNs,
      kube::LeaderElector::Callbacks{started_leading,
                                     [this] { metrics.CountLeaderTransition(false); }});
  spdlog::info("leader election on lease {}/{} as {} (lease {}, renew deadline {}, retry {})",
               config.lease_namespace, config.lease_name, config.identity, o.lease_duration,
               o.renew_deadline, o.retry_period);
  kube::LeaderElector* leader = elector.get();
  // Every Binding ends by the renew deadline: a standby may lead a margin later at the soonest.
  writer = std::make_unique<extender::ApiClusterWriter>(
      *client, [leader] { return leader->IsLeader(); }, [leader] { return leader->WriteBudget(); });
  // Partitions are the leader's: a standby removing "orphans" could remove one the leader is
  // making.
  service_options.may_reconcile = [leader] { return leader->IsLeader(); };
  return OkStatus();
}

void ExtenderProcess::BuildService(const topology::Catalog& catalog) {
  service = std::make_unique<extender::ExtenderService>(catalog, service_options, *writer, metrics,
                                                        SteadyNs, WallNs);
}

// Nodes and pods into the service: from the node file offline, else by list+watch.
Status ExtenderProcess::FeedService() {
  extender::ExtenderService& svc = *service;
  if (!o.offline_nodes.empty()) {
    auto nodes = extender::ParseNodeFile(ReadWholeFile(o.offline_nodes), o.offline_nodes);
    if (!nodes.ok()) return Error{nodes.error()};
    svc.ReplaceNodes(*nodes);
    svc.ReplacePods({});
    spdlog::info("offline mode: {} nodes from {}; binds are kept in memory", nodes->size(),
                 o.offline_nodes);
    return OkStatus();
  }
  kube::InformerOptions informer_options;
  informer_options.watch_list = o.watch_list;
  node_informer = std::make_unique<kube::Informer<kube::Node>>(
      *client, "/api/v1/nodes",
      kube::InformerHandlers<kube::Node>{
          [&svc](const std::vector<kube::Node>& all) { svc.ReplaceNodes(all); },
          [&svc](const kube::Node& n) { svc.UpsertNode(n); },
          [&svc](const kube::Node& n) { svc.DeleteNode(n); }, nullptr,
          [this](const std::string&, const std::string&) { metrics.CountSkippedObject("nodes"); }},
      informer_options);
  node_informer->Start();
  // Pods are placed on nodes: the first rebuild waits until the nodes are known.
  if (!node_informer->WaitForSync(std::chrono::seconds(60))) {
    spdlog::warn("nodes not listed after 60 s; still trying (readyz stays 503 until then)");
  }
  pod_informer = std::make_unique<kube::Informer<kube::Pod>>(
      *client, "/api/v1/pods",
      kube::InformerHandlers<kube::Pod>{
          [&svc](std::vector<kube::Pod>&& all) { svc.ReplacePods(std::move(all)); },
          [&svc](const kube::Pod& p) { svc.UpsertPod(p); },
          [&svc](const kube::Pod& p) { svc.DeletePod(p); },
          // A relist merges: holds taken after this point are newer than the list.
          [&svc] { svc.BeginPodList(); },
          [this](const std::string&, const std::string&) { metrics.CountSkippedObject("pods"); }},
      informer_options);
  pod_informer->Start();
  return OkStatus();
}

void ExtenderProcess::BuildRouter() {
  router = std::make_unique<extender::Router>(*service, metrics, o.bind_threads, o.bind_queue);
  if (pod_informer && o.catch_up_wait_ms > 0) {
    // kube-scheduler retries a pod on its own watch's events; ours may trail by a few ms. A filter
    // answered from the older state refuses what the scheduler saw freed, and on 1.2x+ nothing
    // retries it before the 5-minute flush: answer from at least the state the scheduler had.
    const std::chrono::milliseconds wait(static_cast<int64_t>(o.catch_up_wait_ms));
    kube::Informer<kube::Pod>* pods = pod_informer.get();
    router->SetCatchUp([this, pods, wait](const kube::Pod& pod) {
      if (!pods->WaitForResourceVersion(pod.resource_version, wait)) {
        metrics.CountCatchUpTimeout();
        spdlog::debug(
            "pod {}: our pod watch is at resourceVersion {}, the scheduler sent {}; "
            "answering from ours after {} ms",
            pod.Key(), pods->DeliveredResourceVersion(), pod.resource_version, wait.count());
      }
    });
  }
  if (elector) {
    // The leader serves once the pods are listed afresh, and not once shutdown began.
    router->SetLeaderGate([this] {
      return !shutting_down && elector->IsLeader() &&
             pod_informer->RelistsDelivered() >= fresh_list_ticket.load();
    });
  }
}

// The fleet history's interval from --history-interval, and how many samples are kept: the last
// kHistorySpan, at most kMaxHistorySamples (a sample of a fleet of many types is a few KB).
constexpr std::chrono::hours kHistorySpan{6};
constexpr size_t kMaxHistorySamples = 4320;
Result<std::chrono::milliseconds> HistoryIntervalFromFlags(const ExtenderOptions& o) {
  auto parsed = kube::ParseDuration(o.history_interval);
  if (!parsed.ok()) return Error{fmt::format("--history-interval: {}", parsed.error())};
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(*parsed);
  if (interval < std::chrono::seconds(1) || interval > std::chrono::hours(1)) {
    return Error{fmt::format("--history-interval {}: give 1s to 1h", o.history_interval)};
  }
  return interval;
}

// Once a second: reservations that ran out, the campaign, partition reconciling, the Ready and
// leader gauges, API health. Stops at once when asked (no sleep to wait out).
class Housekeeping {
 public:
  explicit Housekeeping(ExtenderProcess& p) : p_(p), thread_([this] { Loop(); }) {}
  ~Housekeeping() { Stop(); }
  Housekeeping(const Housekeeping&) = delete;
  Housekeeping& operator=(const Housekeeping&) = delete;

  void Stop() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    wake_.NotifyAll();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    uint64_t last_errors = 0;
    while (true) {
      last_errors = RunOnce(last_errors);
      MutexLock lock(mu_);
      if (wake_.WaitFor(mu_, std::chrono::seconds(1), [this]() TS_REQUIRES(mu_) { return stop_; }))
        return;
    }
  }

  uint64_t RunOnce(uint64_t last_errors) {
    extender::ExtenderService& service = *p_.service;
    service.ExpireReservations();
    // Campaign only once warm (nodes and pods listed, tracker rebuilt), so a cold process never
    // takes the lease from a warm standby.
    if (p_.elector && p_.node_informer->Synced() && p_.pod_informer->Synced()) p_.elector->Start();
    // A lone process asks for its fresh pod list once settled, not at its first bind.
    if (p_.lone_fence) p_.lone_fence->Settled();
    // A new leader reconciles partitions before it turns Ready (the service skips it on a
    // standby), so a dead leader's half-made partition is removed then.
    if (!service.Ready()) {
      if (auto s = service.ReconcilePartitions(); !s.ok()) spdlog::warn("{}", s.error());
    }
    p_.metrics.SetLeader(!p_.elector || p_.elector->IsLeader());
    p_.metrics.SetReady(service.Ready());
    if (!p_.pod_informer) return last_errors;
    // Healthy while the informers' requests succeed; a down API server makes them fail.
    const uint64_t errors =
        p_.pod_informer->counters().request_errors + p_.node_informer->counters().request_errors;
    service.SetApiHealthy(errors == last_errors);
    return errors;
  }

  ExtenderProcess& p_;
  Mutex mu_;
  CondVar wake_;
  bool stop_ TS_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is initialised
};

// The order is the fence (docs/extender.md, "Leadership and fencing"): the Lease is handed over
// only once no Binding of this process can still land.
void ShutDown(ExtenderProcess& p, Housekeeping& housekeeping, net::HttpServer& server,
              net::HttpServer* views_server) {
  // 1. Stop accepting: verbs answer 503 and /readyz turns 503; binds not yet started are refused.
  p.shutting_down = true;
  p.service->StopBinds();
  // 2. Drain: the binds under way finish and answer kube-scheduler while the server still runs.
  //    The lease is still renewed meanwhile, so their writes keep their budget. No Binding
  //    outlasts the renew deadline (the fence), nor the writer's own timeouts without election.
  const auto drain_bound =
      p.election ? std::chrono::duration_cast<std::chrono::milliseconds>(p.election->renew_deadline)
                 : std::max(p.writer->MaxWriteTime(), std::chrono::milliseconds(1000));
  if (!p.service->WaitForBinds(drain_bound)) {
    spdlog::warn(
        "binds still running after {} ms (waiting on the partition service?); the server stops "
        "now and the lease is released once they return",
        drain_bound.count());
  }
  housekeeping.Stop();
  // 3. The servers: no new connection, open ones closed, their threads joined (the views' port
  //    before the router whose view thread answers it).
  server.Stop();
  if (views_server != nullptr) views_server->Stop();
  // 4. The bind pool: every bind has returned once it is joined (before the server is destroyed,
  //    so no bind answers into freed memory).
  p.router.reset();
  // 5. A Binding answered without a definite outcome (a 5xx, a cut reply) may land until its
  //    ?timeout= ends: wait it out (bounded by that timeout), so neither a standby nor the next
  //    process binds beside it.
  if (const auto left = p.writer->UnknownWritesSettleIn(); left.count() > 0) {
    spdlog::info("waiting {} ms for Bindings whose outcome is unknown to land or expire",
                 left.count());
    std::this_thread::sleep_for(left);
  }
  // 6. Only now hand the lease over: a standby takes over at its next retry, not after 15 s.
  if (p.elector) p.elector->Stop();
  if (p.pod_informer) p.pod_informer->Stop();
  if (p.node_informer) p.node_informer->Stop();
}

}  // namespace

int RunExtender(const ExtenderOptions& o, const std::string& catalog_path) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  auto usage_error = [](const std::string& message) {
    spdlog::error("{}", message);
    return kExitUsage;
  };
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) return usage_error(catalog.error());
  auto listen = SplitListen(o.listen, "--listen");
  if (!listen.ok()) return usage_error(listen.error());
  if (auto s = CheckPlainHttp(listen->first, o); !s.ok()) return usage_error(s.error());
  std::pair<std::string, uint16_t> views_listen;
  if (!o.views_listen.empty()) {
    auto parsed = ViewsListen(o);
    if (!parsed.ok()) return usage_error(parsed.error());
    views_listen = *parsed;
  }
  auto service_options = ServiceOptionsFromFlags(o);
  if (!service_options.ok()) return usage_error(service_options.error());

  auto history_interval = HistoryIntervalFromFlags(o);
  if (!history_interval.ok()) return usage_error(history_interval.error());
  auto bind_wait_limit = kube::ParseDuration(o.bind_wait_limit);
  if (!bind_wait_limit.ok()) {
    return usage_error(fmt::format("--bind-wait-limit: {}", bind_wait_limit.error()));
  }

  const StopSignals signals;  // before any thread starts
  // Before the process: the router's view thread reads it until the router is gone.
  extender::FleetHistory history(std::min(
      kMaxHistorySamples, extender::FleetHistory::CapacityFor(kHistorySpan, *history_interval)));
  ExtenderProcess process(o);
  process.service_options = std::move(service_options).value();
  // Each step only once the one before it succeeded.
  if (Status s = process.BuildPools(**catalog); !s.ok()) return usage_error(s.error());
  if (Status s = process.BuildProvisioner(); !s.ok()) return usage_error(s.error());
  if (Status s = process.ConnectCluster(); !s.ok()) return usage_error(s.error());
  process.BuildService(**catalog);
  if (Status fed = process.FeedService(); !fed.ok()) return usage_error(fed.error());
  process.BuildRouter();
  process.router->SetHistory(&history, *history_interval);
  process.router->SetBindWaitLimit(
      std::chrono::duration_cast<std::chrono::milliseconds>(*bind_wait_limit), SteadyNs);

  const net::HttpServerOptions http = HttpOptionsFromFlags(o, *listen);
  // /metrics reads the server's counters; set before serving, so no request races the setting.
  std::atomic<net::HttpServer*> serving{nullptr};
  process.router->SetServerStats([&serving] {
    net::HttpServer* s = serving.load();
    return s != nullptr ? s->stats() : net::HttpServerStats{};
  });
  auto server = net::HttpServer::Start(http, process.router->AsHandler());
  if (!server.ok()) {
    if (process.pod_informer) process.pod_informer->Stop();
    if (process.node_informer) process.node_informer->Stop();
    return usage_error(server.error());
  }
  serving = server->get();
  std::unique_ptr<net::HttpServer> views_server;
  if (!o.views_listen.empty()) {
    net::HttpServerOptions views = HttpOptionsFromFlags(o, views_listen);
    views.tls_cert_file.clear();
    views.tls_key_file.clear();
    views.tls_client_ca_file.clear();
    views.threads = 1;
    auto started = net::HttpServer::Start(views, process.router->AsViewsHandler());
    if (!started.ok()) {
      (*server)->Stop();
      if (process.pod_informer) process.pod_informer->Stop();
      if (process.node_informer) process.node_informer->Stop();
      return usage_error(started.error());
    }
    views_server = std::move(started).value();
    spdlog::info("fleet page and views served on http://{}:{}/ (loopback only)", views.address,
                 views_server->port());
  }
  spdlog::info(
      "extender serving {} on {}:{} (policy {}, resources: devices {}, cores {}; allocator {})",
      http.tls_cert_file.empty()        ? "HTTP"
      : http.tls_client_ca_file.empty() ? "HTTPS"
                                        : "HTTPS with client certificates",
      http.address, (*server)->port(), o.policy, fmt::join(o.device_resources, ","),
      fmt::join(o.core_resources, ","), AllocatorName());

  Housekeeping housekeeping(process);
  // The sample's time is the extender's wall clock (the service reads none).
  extender::FleetSampler sampler(history, *history_interval, [&process] {
    auto sample = process.service->SampleFleet(WallNs() / 1'000'000'000);
    if (sample) process.metrics.SetFleet(*sample);
    return sample;
  });
  const int signal = signals.Wait();
  spdlog::info("signal {} received: shutting down", signal);
  ShutDown(process, housekeeping, **server, views_server.get());
  return kExitOk;
}

}  // namespace toposched::cli
