// `toposched dra-plugin`: the kubelet DRA plugin for Neuron devices (driver neuron.aws.com).
// Builds the concrete objects (API client, host paths, the node's shape, the ResourceSlice
// publisher), refuses a node not labelled for DRA, and runs the plugin until SIGINT/SIGTERM.
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "draplugin/node_info.h"
#include "draplugin/plugin.h"
#include "draplugin/slice_publisher.h"
#include "kube/client.h"
#include "nodeagent/container_setup.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/probe.h"
#include "nodeagent/sysfs.h"

namespace toposched::cli {

struct DraPluginOptions {
  std::string node_name;
  std::string kubeconfig;
  std::string sysfs_root = "/sys";
  std::string dev_root = "/dev";
  std::string opt_aws_root = "/opt/aws";
  std::string instance_type;
  std::string cdi_root;
  std::string plugin_dir = "/var/lib/kubelet/plugins/neuron.aws.com";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string partitionable = "auto";
  bool core_offers = false;
  std::string set_offers = "auto";
  std::string order = "scarcity";
  std::string on_device_failure = "event";
  std::string device_taints = "auto";
  std::string visible_cores = "container";
  int health_interval_ms = 1000;
  int resync_interval_s = 60;
  std::string probe_listen;
  std::string log_level = "info";
};

namespace {

// Which node this is, and where its host paths are.
void AddNodeFlags(CLI::App* cmd, DraPluginOptions* o) {
  cmd->add_option("--node-name", o->node_name,
                  "This node's name: the pool name of its devices (default: $NODE_NAME, from the "
                  "downward API)");
  cmd->add_option("--kubeconfig", o->kubeconfig,
                  "Kubeconfig for the API server (default: $KUBECONFIG, then in-cluster, then "
                  "~/.kube/config)");
  cmd->add_option("--sysfs-root", o->sysfs_root,
                  "Where the host's /sys is (devices, health, module/neuron/version)")
      ->capture_default_str();
  cmd->add_option("--dev-root", o->dev_root,
                  "Where the host's /dev is, for discovery and health (CDI specs always name "
                  "/dev/neuronN)")
      ->capture_default_str();
  cmd->add_option("--opt-aws-root", o->opt_aws_root,
                  "Where the host's /opt/aws is (neuron/logical_nc_config sets the LNC)")
      ->capture_default_str();
  cmd->add_option("--instance-type", o->instance_type,
                  "Use this catalog instance type instead of the DMI product name");
}

// Where kubelet meets the plugin: the CDI specs, the sockets.
void AddKubeletFlags(CLI::App* cmd, DraPluginOptions* o) {
  cmd->add_option("--cdi-root", o->cdi_root,
                  "Directory of the CDI specs written for prepared claims, one "
                  "neuron.aws.com-<claimUID>.json each; they are also the plugin's checkpoint "
                  "(default: $CDI_ROOT, else /var/run/cdi)");
  cmd->add_option("--plugin-dir", o->plugin_dir,
                  "Directory of the DRA socket (dra.sock) kubelet calls")
      ->capture_default_str();
  cmd->add_option("--registry-dir", o->registry_dir,
                  "kubelet's plugin registry directory (neuron.aws.com-reg.sock is created there)")
      ->capture_default_str();
  cmd->add_option("--pod-resources-socket", o->pod_resources_socket,
                  "kubelet's PodResources socket: the devices containers outside DRA hold "
                  "(device-plugin pods still running on a node moved to DRA) are neither "
                  "published nor prepared; while kubelet does not answer on it nothing is "
                  "prepared and the plugin is not ready. Empty turns that check off")
      ->capture_default_str();
}

// What the node's ResourceSlices offer, and in which order.
void AddOfferFlags(CLI::App* cmd, DraPluginOptions* o) {
  cmd->add_option("--partitionable", o->partitionable,
                  "Publish device sets and core ranges with shared counters (partitionable "
                  "devices, Kubernetes 1.36+ or the DRAPartitionableDevices gate): on, off (whole "
                  "devices only), or auto (on if the API server keeps sharedCounters on a "
                  "created counter slice)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--core-offers", o->core_offers,
                "With --partitionable: also publish NeuronCore ranges inside one device "
                "(neuroncores-A-B, class neuroncores.toposched.io). Off by default: they are most "
                "of a node's offers (160 of 183 on a trn2.48xlarge at LNC 2), and kube-scheduler's "
                "allocator pays for every offer of every candidate node for every pod");
  cmd->add_option("--set-offers", o->set_offers,
                  "With --partitionable: publish each legal multi-device set as a device of its "
                  "own (neurondevices-A-B, class neurondevices.toposched.io, deviceCount == N). "
                  "auto: not on Trainium, whose whole devices carry AWS's group attributes "
                  "(claims ask N devices with matchAttribute resource.aws.com/devicegroupN_id, "
                  "at the cost of AWS's own slices), yes on Inferentia, where no attribute says "
                  "'consecutive'. on: everywhere (the allocator itself then never picks an "
                  "illegal set, at 1.4-1.6x its cost per pod); off: nowhere. --core-offers brings "
                  "the sets with it")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--order", o->order,
                  "Publish order, which is the order the allocator tries devices in: scarcity "
                  "(first the offer that takes least from the requests still expected) or index")
      ->check(CLI::IsMember({"scarcity", "index"}))
      ->capture_default_str();
}

// What a failed device does to the pods on it and to its offers.
void AddHealthFlags(CLI::App* cmd, DraPluginOptions* o) {
  cmd->add_option(
         "--on-device-failure", o->on_device_failure,
         "What a device that fails its health check (its /dev/neuronN or sysfs entry "
         "gone) does to the pods on it, where the cluster serves device taints "
         "(Kubernetes 1.37): its offers stay published with the device taint "
         "toposched.io/unhealthy, effect NoSchedule for event (new claims avoid it; pods "
         "already on it keep running) or NoExecute for evict (kube-controller-manager's "
         "device-taint eviction controller also evicts the pods whose claims use it, "
         "unless they tolerate the taint). Where it does not (1.34), either way its offers "
         "are withdrawn from the slices and running pods keep it. Either way the pods whose "
         "claims hold it get a Warning event NeuronDeviceFailed and the condition "
         "toposched.io/NeuronDevicesHealthy=False (True again when it recovers). Recovery "
         "removes the taint")
      ->check(CLI::IsMember({"event", "evict"}))
      ->capture_default_str();
  cmd->add_option("--device-taints", o->device_taints,
                  "Taint a failed device's offers (on) or withdraw them (off); auto: taint when "
                  "the API server keeps devices[].taints, asked with a dry-run create the first "
                  "time a device fails")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

}  // namespace

std::shared_ptr<DraPluginOptions> AddDraPluginCommand(CLI::App& app) {
  auto opts = std::make_shared<DraPluginOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dra-plugin",
      "Run the kubelet DRA plugin for Neuron devices (driver neuron.aws.com): publish every legal\n"
      "choice of this node (whole devices, legal device sets, core ranges) as ResourceSlices in\n"
      "the order kube-scheduler's allocator should take them, and prepare allocated\n"
      "ResourceClaims for containers through CDI. Runs only on nodes labelled\n"
      "toposched.io/neuron-management=dra; until SIGINT/SIGTERM. See docs/dra.md.");
  AddNodeFlags(cmd, opts.get());
  AddKubeletFlags(cmd, opts.get());
  AddOfferFlags(cmd, opts.get());
  AddHealthFlags(cmd, opts.get());
  cmd->add_option("--visible-cores", opts->visible_cores,
                  "NEURON_RT_VISIBLE_CORES numbering in the CDI specs: container (0-based over "
                  "the container's devices, Neuron K8s >= 2.16.18) or host (node-wide ids)")
      ->check(CLI::IsMember({"container", "host"}))
      ->capture_default_str();
  cmd->add_option("--health-interval-ms", opts->health_interval_ms,
                  "Device health poll period; a change republishes the slices (a failed device's "
                  "offers tainted or withdrawn: --on-device-failure)")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  cmd->add_option("--resync-interval-s", opts->resync_interval_s,
                  "How often the node's ResourceSlices are read back from the API server and "
                  "repaired (kubelet deletes them when it starts; it is also done at once when "
                  "kubelet registers the plugin)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cmd->add_option("--probe-listen", opts->probe_listen,
                  "Serve GET /healthz, /readyz and /metrics in plain HTTP on HOST:PORT (e.g. "
                  ":8081). /readyz answers 200 once kubelet has registered the plugin and the "
                  "first ResourceSlice publish succeeded. Empty: no probe endpoint");
  cmd->add_option("--log-level", opts->log_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  return opts;
}

namespace {

// The Neuron driver's version from sysfs; empty when unreadable.
std::string NeuronDriverVersion(const std::string& sysfs_root) {
  auto text = nodeagent::ReadSmallFile(sysfs_root + "/module/neuron/version");
  if (!text.ok()) return {};
  std::string version = *text;
  while (!version.empty() && std::isspace(static_cast<unsigned char>(version.back()))) {
    version.pop_back();
  }
  for (char c : version) {
    if (!std::isprint(static_cast<unsigned char>(c))) return {};
  }
  return version;
}

}  // namespace

namespace {

// The flags as the publisher's and the plugin's settings, checked together; the node's facts and
// shape are filled in once the node is read.
Status SettingsFromFlags(const DraPluginOptions& opts, draplugin::PublisherConfig& config,
                         draplugin::DraPluginOptions& options) {
  TOPOSCHED_ASSIGN_OR_RETURN(options.numbering, nodeagent::ParseCoreNumbering(opts.visible_cores));
  TOPOSCHED_ASSIGN_OR_RETURN(config.partitionable,
                             draplugin::ParsePartitionable(opts.partitionable));
  TOPOSCHED_ASSIGN_OR_RETURN(config.order, draplugin::ParsePublishOrder(opts.order));
  TOPOSCHED_ASSIGN_OR_RETURN(config.set_offers, dra::ParseSetOffers(opts.set_offers));
  TOPOSCHED_ASSIGN_OR_RETURN(config.failure_effect,
                             draplugin::ParseOnDeviceFailure(opts.on_device_failure));
  TOPOSCHED_ASSIGN_OR_RETURN(config.device_taints,
                             draplugin::ParseDeviceTaints(opts.device_taints));
  config.core_offers = opts.core_offers;
  if (config.set_offers == dra::SetOffers::kOff && opts.core_offers) {
    return Error{
        "--set-offers off and --core-offers together: core ranges need the shared counters "
        "that come with the set offers; drop one of them"};
  }
  options.node_name = opts.node_name;
  if (options.node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME")) options.node_name = env;
  }
  if (options.node_name.empty()) {
    return Error{
        "this node's name is unknown: set --node-name or NODE_NAME (downward API "
        "spec.nodeName); it is the pool name of the node's devices"};
  }
  options.cdi_root = opts.cdi_root;
  if (options.cdi_root.empty()) {
    const char* env = std::getenv("CDI_ROOT");
    options.cdi_root = env != nullptr && *env != '\0' ? env : "/var/run/cdi";
  }
  options.host.sysfs_root = opts.sysfs_root;
  options.host.dev_root = opts.dev_root;
  options.host.opt_aws_root = opts.opt_aws_root;
  options.plugin_dir = opts.plugin_dir;
  options.registry_dir = opts.registry_dir;
  options.pod_resources_socket = opts.pod_resources_socket;
  options.evict_on_device_failure = config.failure_effect == dra::TaintEffect::kNoExecute;
  options.health_interval = std::chrono::milliseconds(opts.health_interval_ms);
  options.resync_interval = std::chrono::seconds(opts.resync_interval_s);
  config.facts.node_name = options.node_name;
  return OkStatus();
}

// This node's Node object, read once: its uid, network layers and who manages it.
Result<draplugin::NodeInfo> ReadNode(kube::ApiClient& client, const std::string& node_name) {
  auto answer = client.Get("/api/v1/nodes/" + kube::EscapeUrlComponent(node_name));
  if (!answer.ok()) return Error{fmt::format("reading Node {}: {}", node_name, answer.error())};
  if (answer->status != 200) {
    return Error{fmt::format("reading Node {}: HTTP {}: {}", node_name, answer->status,
                             kube::StatusMessage(answer->body))};
  }
  auto node = draplugin::DecodeNodeInfo(answer->body);
  if (!node.ok()) return Error{fmt::format("Node {}: {}", node_name, node.error())};
  return node;
}

// What the plugin found and will offer, said once at start.
void LogNode(const draplugin::PublisherConfig& config) {
  const topology::NodeShape& shape = config.shape;
  spdlog::info(
      "node {} (uid {}): {} with {} devices, {} cores each{}; Neuron driver {}",
      config.facts.node_name, config.facts.node_uid, shape.type->name, shape.devices,
      shape.cores_per_device, shape.lnc != 0 ? fmt::format(" at LNC {}", shape.lnc) : std::string(),
      config.facts.neuron_driver_version.empty() ? "unknown" : config.facts.neuron_driver_version);
  if (dra::ScopeFor(shape, config.set_offers, config.core_offers) ==
      dra::OfferScope::kWholeDevices) {
    spdlog::info(
        "offers: whole devices only, no shared counters ({}); --set-offers on publishes each "
        "legal set as a device",
        config.set_offers == dra::SetOffers::kOff
            ? std::string("--set-offers off")
            : fmt::format("every legal set of {} is one aligned group, named by its devices' "
                          "resource.aws.com/devicegroupN_id: claims match on it, as AWS's do",
                          shape.type->name));
  }
}

}  // namespace

int RunDraPlugin(const DraPluginOptions& opts, const std::string& catalog_path) {
  spdlog::set_level(spdlog::level::from_str(opts.log_level));
  const StopSignals signals;  // before any thread starts
  auto fail = [](const std::string& message) {
    fmt::print(stderr, "error: {}\n", message);
    return kExitUsage;
  };
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) return fail(catalog.error());
  draplugin::PublisherConfig config;
  draplugin::DraPluginOptions options;
  if (Status s = SettingsFromFlags(opts, config, options); !s.ok()) return fail(s.error());
  const std::string& node_name = options.node_name;

  auto client = kube::ApiClient::FromEnvironment(opts.kubeconfig);
  if (!client.ok()) return fail("no access to the API server: " + client.error());
  auto node = ReadNode(**client, node_name);
  if (!node.ok()) return fail(node.error());
  if (node->management != draplugin::kManagementDra) {
    fmt::print(stderr,
               "error: node {} is not managed by DRA: its label {} is {}, not '{}'. The device "
               "plugin serves this node; to move it to the DRA driver (drain it first), run\n"
               "  kubectl label node {} {}={} --overwrite\n",
               node_name, draplugin::kManagementLabel,
               node->management.empty() ? std::string("absent") : "'" + node->management + "'",
               draplugin::kManagementDra, node_name, draplugin::kManagementLabel,
               draplugin::kManagementDra);
    return kExitRefused;
  }

  auto inventory = nodeagent::Discover(options.host);
  if (!inventory.ok()) return fail(inventory.error());
  for (const std::string& warning : inventory->warnings) spdlog::warn("{}", warning);
  auto topology = nodeagent::ResolveTopology(**catalog, *inventory, opts.instance_type);
  if (!topology.ok()) return fail(topology.error());
  for (const std::string& note : topology->notes) spdlog::info("{}", note);
  const topology::NodeShape& shape = topology->shape;
  config.facts.node_uid = node->uid;
  config.facts.neuron_driver_version = NeuronDriverVersion(opts.sysfs_root);
  config.facts.dra_driver_version = TOPOSCHED_VERSION;
  config.facts.network_node_layers = node->network_node_layers;
  config.shape = shape;
  LogNode(config);
  draplugin::SlicePublisher publisher(**client, config);

  draplugin::DraPlugin plugin(options, shape, **client, publisher);
  std::unique_ptr<net::HttpServer> probe;
  if (!opts.probe_listen.empty()) {
    auto listen = SplitListen(opts.probe_listen, "--probe-listen");
    if (!listen.ok()) return fail(listen.error());
    auto started = nodeagent::StartProbeServer(listen->first, listen->second, plugin.readiness());
    if (!started.ok())
      return fail(fmt::format("--probe-listen {}: {}", opts.probe_listen, started.error()));
    probe = std::move(started).value();
    spdlog::info("probe endpoint on {}:{} (/healthz, /readyz, /metrics)", listen->first,
                 probe->port());
  }
  if (Status started = plugin.Start(); !started.ok()) {
    plugin.Stop();
    return fail(started.error());
  }
  const int signal = signals.Wait();
  spdlog::info("signal {} received: removing the registration and DRA sockets", signal);
  plugin.Stop();
  probe.reset();
  return kExitOk;
}

}  // namespace toposched::cli
