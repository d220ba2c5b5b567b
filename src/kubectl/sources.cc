#include "kubectl/sources.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "claims/keys.h"
#include "claims/resources.h"
#include "extender/offline.h"
#include "extender/service.h"
#include "kube/informer.h"
#include "kube/list.h"

namespace toposched::kubectl {
namespace {

// An answer bigger than this is not a view of any fleet we serve (5,000 nodes are ~7 MB).
constexpr size_t kMaxAnswerBytes = size_t{256} << 20;

bool IsNeuronNode(const kube::Node& node, const topology::Catalog& catalog,
                  const claims::ResourceSet& resources) {
  if (catalog.Find(node.instance_type) != nullptr) return true;
  if (node.labels.contains(claims::kPoolLabel)) return true;
  return std::any_of(node.allocatable.begin(), node.allocatable.end(), [&](const auto& entry) {
    return entry.second > 0 && resources.Manages(entry.first);
  });
}

// The extender's service over the cluster's records, in memory: nothing it does reaches out
// (binds would go to the offline writer; none is asked for).
class LocalExtender {
 public:
  LocalExtender(const Cluster& cluster, const topology::Catalog& catalog)
      : service_(
            catalog, extender::ExtenderOptions{}, writer_, metrics_, [] { return int64_t{0}; },
            [] { return int64_t{0}; }) {
    const claims::ResourceSet resources;
    std::vector<kube::Node> nodes;
    for (const kube::Node& node : cluster.nodes) {
      if (IsNeuronNode(node, catalog, resources)) nodes.push_back(node);
    }
    service_.ReplaceNodes(nodes);
    service_.ReplacePods(cluster.pods);
  }
  extender::ExtenderService& service() { return service_; }

 private:
  extender::OfflineClusterWriter writer_;
  extender::Metrics metrics_;
  extender::ExtenderService service_;
};

}  // namespace

Result<Cluster> ReadCluster(kube::ApiClient& client) {
  Cluster cluster;
  TOPOSCHED_ASSIGN_OR_RETURN(cluster.nodes, kube::ListNodes(client));
  TOPOSCHED_ASSIGN_OR_RETURN(cluster.pods, kube::ListPods(client, kube::kPodsPath));
  return cluster;
}

std::string LocalFleetJson(const Cluster& cluster, const topology::Catalog& catalog) {
  LocalExtender local(cluster, catalog);
  extender::FleetQuery query;
  query.explain_pending = 0;  // `nodes` lists the pending pods; `why` explains one
  return local.service().FleetView(query);
}

Result<std::string> LocalWhyJson(const Cluster& cluster, const topology::Catalog& catalog,
                                 std::string_view pod_key) {
  LocalExtender local(cluster, catalog);
  auto answer = local.service().WhyPending(pod_key);
  if (answer.ok()) return answer;
  const auto slash = pod_key.find('/');
  const bool exists = std::any_of(cluster.pods.begin(), cluster.pods.end(), [&](const auto& p) {
    return p.ns == pod_key.substr(0, slash) && p.name == pod_key.substr(slash + 1);
  });
  if (!exists) return Error{fmt::format("pod {} not found", pod_key)};
  return Error{fmt::format("pod {} asks for no Neuron resource (or is finished)", pod_key)};
}

Result<std::unique_ptr<ExtenderClient>> ExtenderClient::Create(const ExtenderEndpoint& endpoint) {
  TOPOSCHED_ASSIGN_OR_RETURN(net::UrlParts parts, net::SplitUrl(endpoint.url));
  if (parts.scheme != "http" && parts.scheme != "https") {
    return Error{fmt::format("--extender {}: expected an http:// or https:// URL", endpoint.url)};
  }
  if (parts.scheme == "http" &&
      !(endpoint.ca_file.empty() && endpoint.cert_file.empty() && endpoint.key_file.empty())) {
    return Error{fmt::format("--extender {}: the --extender-*-file flags need an https:// URL",
                             endpoint.url)};
  }
  if (endpoint.cert_file.empty() != endpoint.key_file.empty()) {
    return Error{"--extender-cert-file and --extender-key-file go together"};
  }
  return std::unique_ptr<ExtenderClient>(new ExtenderClient(endpoint));
}

ExtenderClient::ExtenderClient(const ExtenderEndpoint& endpoint)
    : endpoint_(endpoint), http_([&] {
        net::HttpClientOptions options;
        options.tls.ca_file = endpoint.ca_file;
        options.tls.client_cert_file = endpoint.cert_file;
        options.tls.client_key_file = endpoint.key_file;
        options.connect_timeout = endpoint.timeout;
        options.max_response_bytes = kMaxAnswerBytes;
        options.user_agent = "kubectl-neuron";
        return options;
      }()) {
  while (endpoint_.url.ends_with('/')) endpoint_.url.pop_back();
}

Result<std::string> ExtenderClient::Get(const std::string& path_and_query) {
  net::HttpClientRequest request;
  request.url = endpoint_.url + path_and_query;
  request.timeout = endpoint_.timeout;
  auto response = http_.Send(request);
  if (!response.ok()) {
    return Error{fmt::format("extender {} unreachable: {}", request.url, response.error())};
  }
  if (response->status != 200) {
    std::string body = response->body.substr(0, 300);
    std::replace(body.begin(), body.end(), '\n', ' ');
    return Error{fmt::format("extender {}: HTTP {}: {}", request.url, response->status, body)};
  }
  return std::move(response->body);
}

Result<std::string> ExtenderClient::Fleet(int explain) {
  return Get(fmt::format("/v1/fleet?explain={}", explain));
}

Result<std::string> ExtenderClient::Why(std::string_view pod_key) {
  return Get("/v1/why?pod=" + kube::EscapeUrlComponent(pod_key));
}

}  // namespace toposched::kubectl
