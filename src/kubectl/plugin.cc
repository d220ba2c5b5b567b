#include "kubectl/plugin.h"

#include <memory>
#include <utility>

#include <fmt/format.h>

#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "kubectl/render.h"
#include "kubectl/views.h"

namespace toposched::kubectl {
namespace {

// `nodes` lists the pending pods without their reasons (each costs the extender a filter over
// the fleet); `why` asks for one.
constexpr int kExplainNone = 0;

Result<std::unique_ptr<kube::ApiClient>> ApiClientFor(const PluginOptions& options) {
  auto config = kube::ConfigFromEnvironment(options.kubeconfig);
  if (!config.ok()) return Error{fmt::format("cannot find the API server: {}", config.error())};
  config->request_timeout = options.request_timeout;
  config->connect_timeout = std::min(config->connect_timeout, options.request_timeout);
  config->user_agent = "kubectl-neuron";
  return kube::ApiClient::Create(std::move(config).value());
}

// The namespace a bare pod name or `pods` means: -n, else the kubeconfig context's (read here
// when no client was made: the extender alone answers), else default.
std::string NamespaceOf(const PluginOptions& options, const kube::ApiClient* client) {
  if (!options.ns.empty()) return options.ns;
  std::string context;
  if (client != nullptr) {
    context = client->config().default_namespace;
  } else if (auto config = kube::ConfigFromEnvironment(options.kubeconfig); config.ok()) {
    context = config->default_namespace;
  }
  return context.empty() ? "default" : context;
}

Result<std::string> ExtenderAnswer(const PluginOptions& options, bool fleet,
                                   const std::string& pod_key) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto extender, ExtenderClient::Create(options.extender));
  return fleet ? extender->Fleet(kExplainNone) : extender->Why(pod_key);
}

template <typename T>
Result<T> Parsed(Result<T> view, const std::string& url) {
  if (view.ok() || url.empty()) return view;
  return Error{
      fmt::format("extender {} answered something that is not its view: {}", url, view.error())};
}

Result<std::string> Nodes(const PluginOptions& options, const Rendering& how) {
  std::string text;
  if (!options.extender.url.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(text, ExtenderAnswer(options, true, ""));
  } else {
    TOPOSCHED_ASSIGN_OR_RETURN(auto client, ApiClientFor(options));
    TOPOSCHED_ASSIGN_OR_RETURN(Cluster cluster, ReadCluster(*client));
    text = LocalFleetJson(cluster, *options.catalog);
  }
  TOPOSCHED_ASSIGN_OR_RETURN(FleetView fleet, Parsed(ParseFleetView(text), options.extender.url));
  return RenderNodes(fleet, how);
}

Result<std::string> Pods(const PluginOptions& options, const Rendering& how) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto client, ApiClientFor(options));
  TOPOSCHED_ASSIGN_OR_RETURN(Cluster cluster, ReadCluster(*client));
  const std::string ns = options.all_namespaces ? "" : NamespaceOf(options, client.get());
  std::vector<PodRow> rows = PodRows(cluster.pods, ns);
  if (!options.extender.url.empty()) {
    // The extender knows which holds are still a bind in flight (reserved) or being released.
    TOPOSCHED_ASSIGN_OR_RETURN(std::string text, ExtenderAnswer(options, true, ""));
    TOPOSCHED_ASSIGN_OR_RETURN(FleetView fleet, Parsed(ParseFleetView(text), options.extender.url));
    for (PodRow& row : rows) {
      for (const NodeView& node : fleet.nodes) {
        for (const HoldView& hold : node.holds) {
          if (hold.pod == row.ns + "/" + row.name) row.state = hold.state;
        }
      }
    }
  }
  return RenderPods(rows, how);
}

Result<std::string> Why(const PluginOptions& options, const Rendering& how) {
  std::string key = options.pod;
  std::string text;
  if (!options.extender.url.empty()) {
    if (key.find('/') == std::string::npos) key = NamespaceOf(options, nullptr) + "/" + key;
    TOPOSCHED_ASSIGN_OR_RETURN(text, ExtenderAnswer(options, false, key));
  } else {
    TOPOSCHED_ASSIGN_OR_RETURN(auto client, ApiClientFor(options));
    if (key.find('/') == std::string::npos) key = NamespaceOf(options, client.get()) + "/" + key;
    TOPOSCHED_ASSIGN_OR_RETURN(Cluster cluster, ReadCluster(*client));
    TOPOSCHED_ASSIGN_OR_RETURN(text, LocalWhyJson(cluster, *options.catalog, key));
  }
  TOPOSCHED_ASSIGN_OR_RETURN(PodPlacementView why,
                             Parsed(ParsePodPlacement(text), options.extender.url));
  return RenderWhy(why, how);
}

}  // namespace

Result<std::string> RunPlugin(const PluginOptions& options) {
  const Rendering how{options.extender.url.empty() ? "api-server" : "extender", options.json};
  if (options.command == "nodes") return Nodes(options, how);
  if (options.command == "pods") return Pods(options, how);
  if (options.command == "why") {
    if (options.pod.empty()) return Error{"why: give the pod as NAME or NAMESPACE/NAME"};
    return Why(options, how);
  }
  return Error{
      fmt::format("unknown command '{}': the commands are nodes, pods, why", options.command)};
}

}  // namespace toposched::kubectl
