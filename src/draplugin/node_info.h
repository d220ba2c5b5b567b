// What the DRA plugin reads from its own Node object at start: the uid (the ResourceSlices'
// owner), who manages the node's Neuron devices, and AWS's EC2 instance-topology labels.
#ifndef TOPOSCHED_DRAPLUGIN_NODE_INFO_H_
#define TOPOSCHED_DRAPLUGIN_NODE_INFO_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "claims/keys.h"

namespace toposched::draplugin {

// Who manages the node's Neuron devices: claims/keys.h is the label's home.
inline constexpr std::string_view kManagementLabel = claims::kLabelNeuronManagement;
inline constexpr std::string_view kManagementDra = claims::kNeuronManagementDra;
// topology.k8s.aws/network-node-layer-1..3.
inline constexpr std::string_view kNetworkNodeLayerPrefix = "topology.k8s.aws/network-node-layer-";

struct NodeInfo {
  std::string name;
  std::string uid;
  std::string management;  // the label's value; empty when absent
  // The values of network-node-layer-1..3 in order, up to the first missing one.
  std::vector<std::string> network_node_layers;
};

Result<NodeInfo> DecodeNodeInfo(std::string_view json);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_NODE_INFO_H_
