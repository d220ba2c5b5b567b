// `toposched device-plugin`: the kubelet device plugin for Neuron devices and cores. Builds the
// concrete I/O objects (API client, host paths) and runs the manager until SIGINT/SIGTERM.
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/keys.h"
#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/api_pod_source.h"
#include "deviceplugin/manager.h"
#include "nodeagent/probe.h"

namespace toposched::cli {

struct DevicePluginOptions {
  std::string node_name;
  std::string kubeconfig;
  bool watch_list = true;
  std::string sysfs_root = "/sys";
  std::string dev_root = "/dev";
  std::string opt_aws_root = "/opt/aws";
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string device_resource{claims::kResourceNeuron};
  std::string core_resource{claims::kResourceNeuronCore};
  std::string socket_prefix = "toposched";
  std::string instance_type;
  std::string visible_cores = "container";
  int health_interval_ms = 250;
  int health_recover_s = 30;
  int discovery_interval_s = 10;
  int reconcile_interval_s = 30;
  std::string probe_listen;
  std::string log_level = "info";
};

std::shared_ptr<DevicePluginOptions> AddDevicePluginCommand(CLI::App& app) {
  auto opts = std::make_shared<DevicePluginOptions>();
  CLI::App* cmd = app.add_subcommand(
      "device-plugin",
      "Run the kubelet device plugin: advertise Neuron devices (aws.amazon.com/neuron) and cores\n"
      "(aws.amazon.com/neuroncore), and at Allocate give each container the ids the toposched\n"
      "extender recorded on its pod. Runs until SIGINT/SIGTERM. See docs/device-plugin.md.");
  cmd->add_option("--node-name", opts->node_name,
                  "This node's name (default: $NODE_NAME, from the downward API)");
  cmd->add_option("--kubeconfig", opts->kubeconfig,
                  "Kubeconfig for the API server (default: $KUBECONFIG, then in-cluster, then "
                  "~/.kube/config)");
  cmd->add_option("--watch-list", opts->watch_list, kWatchListHelp)->default_str("true");
  cmd->add_option("--sysfs-root", opts->sysfs_root, "Where the host's /sys is")
      ->capture_default_str();
  cmd->add_option("--dev-root", opts->dev_root,
                  "Where the host's /dev is, for discovery and health (containers always get "
                  "/dev/neuronN)")
      ->capture_default_str();
  cmd->add_option("--opt-aws-root", opts->opt_aws_root,
                  "Where the host's /opt/aws is (neuron/logical_nc_config sets the LNC)")
      ->capture_default_str();
  cmd->add_option("--kubelet-dir", opts->kubelet_dir,
                  "kubelet's device-plugin directory (kubelet.sock and plugin sockets)")
      ->capture_default_str();
  cmd->add_option("--pod-resources-socket", opts->pod_resources_socket,
                  "kubelet's PodResources socket, to record the ids of pods that arrived without "
                  "an allocation; empty turns that off")
      ->capture_default_str();
  cmd->add_option("--device-resource", opts->device_resource,
                  "Resource name for whole devices; empty to not serve devices")
      ->capture_default_str();
  cmd->add_option("--core-resource", opts->core_resource,
                  "Resource name for cores; empty to not serve cores")
      ->capture_default_str();
  cmd->add_option("--socket-prefix", opts->socket_prefix,
                  "Socket files are <prefix>-neuron.sock and <prefix>-neuroncore.sock")
      ->capture_default_str();
  cmd->add_option("--instance-type", opts->instance_type,
                  "Use this catalog instance type instead of the DMI product name");
  cmd->add_option("--visible-cores", opts->visible_cores,
                  "NEURON_RT_VISIBLE_CORES numbering: container (0-based over the container's "
                  "devices, Neuron K8s >= 2.16.18) or host (node-wide ids)")
      ->check(CLI::IsMember({"container", "host"}))
      ->capture_default_str();
  cmd->add_option("--health-interval-ms", opts->health_interval_ms, "Device health poll period")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  cmd->add_option("--health-recover-s", opts->health_recover_s,
                  "A failed device is back in service only after passing every health check for "
                  "this long (a device that fails now and then stays out instead of flapping). "
                  "A failure takes it out at once; which devices are out is written on the Node "
                  "(annotation toposched.io/unhealthy-devices) for the extender")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  cmd->add_option("--discovery-interval-s", opts->discovery_interval_s,
                  "How often to look again for the driver while there are no devices")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->add_option("--reconcile-interval-s", opts->reconcile_interval_s,
                  "Period of the PodResources pass; 0 = only after a grant without annotation")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  cmd->add_option("--probe-listen", opts->probe_listen,
                  "Serve GET /healthz, /readyz and /metrics in plain HTTP on HOST:PORT (e.g. "
                  ":8081). /readyz answers 200 once every resource is registered and kubelet "
                  "holds the advertised devices (PodResources GetAllocatableResources; without "
                  "it, once registered). Empty: no probe endpoint");
  cmd->add_option("--log-level", opts->log_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  return opts;
}

namespace {

// Used when the API is out of reach: one-or-all requests still work, others get this reason.
class UnavailablePodSource : public nodeagent::PodSource {
 public:
  explicit UnavailablePodSource(std::string reason) : reason_(std::move(reason)) {}
  Result<std::vector<kube::Pod>> PodsOnNode() override { return Error{reason_}; }
  Status PatchAnnotations(const kube::Pod&,
                          const std::map<std::string, std::optional<std::string>>&) override {
    return Error{reason_};
  }

 private:
  std::string reason_;
};

}  // namespace

int RunDevicePlugin(const DevicePluginOptions& opts, const std::string& catalog_path) {
  spdlog::set_level(spdlog::level::from_str(opts.log_level));
  std::atomic<bool> stop{false};  // declared first: the signal waiter may set it until it is joined
  StopSignals signals;            // before any thread starts
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) {
    fmt::print(stderr, "error: {}\n", catalog.error());
    return kExitUsage;
  }
  auto numbering = nodeagent::ParseCoreNumbering(opts.visible_cores);
  if (!numbering.ok()) {
    fmt::print(stderr, "error: {}\n", numbering.error());
    return kExitUsage;
  }

  deviceplugin::PluginOptions options;
  options.host.sysfs_root = opts.sysfs_root;
  options.host.dev_root = opts.dev_root;
  options.host.opt_aws_root = opts.opt_aws_root;
  options.kubelet_dir = opts.kubelet_dir;
  options.pod_resources_socket = opts.pod_resources_socket;
  options.node_name = opts.node_name;
  if (options.node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME")) options.node_name = env;
  }
  options.instance_type_override = opts.instance_type;
  options.resources = deviceplugin::DefaultResources(opts.device_resource, opts.core_resource);
  options.socket_prefix = opts.socket_prefix;
  options.numbering = *numbering;
  options.health_interval = std::chrono::milliseconds(opts.health_interval_ms);
  options.health_recover = std::chrono::seconds(opts.health_recover_s);
  options.discovery_interval = std::chrono::seconds(opts.discovery_interval_s);
  options.reconcile_interval = std::chrono::seconds(opts.reconcile_interval_s);

  std::unique_ptr<kube::ApiClient> client;
  std::unique_ptr<nodeagent::PodSource> pods;
  if (options.node_name.empty()) {
    const std::string reason =
        "this node's name is unknown (set --node-name or NODE_NAME from the downward API), so "
        "the pods bound to it cannot be found";
    spdlog::warn("{}; only requests for one or all units will be served", reason);
    pods = std::make_unique<UnavailablePodSource>(reason);
  } else if (auto created = kube::ApiClient::FromEnvironment(opts.kubeconfig); created.ok()) {
    client = std::move(created).value();
    // A watch of this node's pods: GetPreferredAllocation and Allocate read it, not the API.
    kube::InformerOptions informer_options;
    informer_options.watch_list = opts.watch_list;
    pods = std::make_unique<deviceplugin::WatchedPodSource>(*client, options.node_name,
                                                            informer_options);
  } else {
    const std::string reason = "no access to the API server: " + created.error();
    spdlog::warn("{}; only requests for one or all units will be served", reason);
    pods = std::make_unique<UnavailablePodSource>(reason);
  }

  deviceplugin::DevicePluginManager manager(options, **catalog, *pods);
  std::unique_ptr<net::HttpServer> probe;
  if (!opts.probe_listen.empty()) {
    auto listen = SplitListen(opts.probe_listen, "--probe-listen");
    if (!listen.ok()) {
      fmt::print(stderr, "error: {}\n", listen.error());
      return kExitUsage;
    }
    auto started = nodeagent::StartProbeServer(listen->first, listen->second, manager.readiness());
    if (!started.ok()) {
      // A readinessProbe against a port we could not take would never pass: say so and stop.
      fmt::print(stderr, "error: --probe-listen {}: {}\n", opts.probe_listen, started.error());
      return kExitUsage;
    }
    probe = std::move(started).value();
    spdlog::info("probe endpoint on {}:{} (/healthz, /readyz, /metrics)", listen->first,
                 probe->port());
  }
  signals.SetOnSignal(stop);
  if (Status status = manager.Run(stop); !status.ok()) {
    fmt::print(stderr, "error: {}\n", status.error());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace toposched::cli
