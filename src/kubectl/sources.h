// Where `kubectl neuron` learns the fleet: the API server alone (nodes and pods, their
// allocation records), from which the extender's own views are worked out here by the
// extender's code over the records; or the extender's live views (/v1/fleet, /v1/why), which
// also know reservations in flight and gang seats.
#ifndef TOPOSCHED_KUBECTL_SOURCES_H_
#define TOPOSCHED_KUBECTL_SOURCES_H_

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "net/http_client.h"
#include "topology/catalog.h"

namespace toposched::kubectl {

// What the API server says: every node and every pod (the holds on a node are every
// namespace's, whatever namespace the output shows).
struct Cluster {
  std::vector<kube::Node> nodes;
  std::vector<kube::Pod> pods;
};

Result<Cluster> ReadCluster(kube::ApiClient& client);

// The JSON the extender would answer (kinds FleetView and PodPlacement) for a cluster in this
// state: an extender in memory learns the nodes that are Neuron nodes (a type in the catalog, a
// Neuron resource or a shared pool) and the pods, holding each bound pod's recorded ids, then
// answers as the live one does. It knows no bind in flight and no gang's seats.
std::string LocalFleetJson(const Cluster& cluster, const topology::Catalog& catalog);
// An error when the pod does not exist or asks for no Neuron resource.
Result<std::string> LocalWhyJson(const Cluster& cluster, const topology::Catalog& catalog,
                                 std::string_view pod_key);

struct ExtenderEndpoint {
  std::string url;  // http://HOST:PORT or https://HOST:PORT, no path
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

// GETs the extender's views. Errors name the URL; a non-200 answer is an error with the
// beginning of its body (the extender's message).
class ExtenderClient {
 public:
  static Result<std::unique_ptr<ExtenderClient>> Create(const ExtenderEndpoint& endpoint);
  // explain: how many pending pods the fleet view explains.
  Result<std::string> Fleet(int explain);
  Result<std::string> Why(std::string_view pod_key);

 private:
  explicit ExtenderClient(const ExtenderEndpoint& endpoint);
  Result<std::string> Get(const std::string& path_and_query);

  ExtenderEndpoint endpoint_;
  net::HttpClient http_;
};

}  // namespace toposched::kubectl

#endif  // TOPOSCHED_KUBECTL_SOURCES_H_
