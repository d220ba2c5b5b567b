// `kubectl neuron` (issue 31): nodes, pods, why, from the API server alone or with the
// extender's live views. The flags are parsed by cli/kubectl_neuron_command.cc; this runs one
// command and returns what to print.
#ifndef TOPOSCHED_KUBECTL_PLUGIN_H_
#define TOPOSCHED_KUBECTL_PLUGIN_H_

#include <chrono>
#include <string>

#include "base/result.h"
#include "kubectl/sources.h"
#include "topology/catalog.h"

namespace toposched::kubectl {

struct PluginOptions {
  std::string command;  // nodes, pods or why
  std::string pod;      // why: NAME or NAMESPACE/NAME
  std::string kubeconfig;
  std::string ns;  // -n; empty: the kubeconfig context's, else "default"
  bool all_namespaces = false;
  ExtenderEndpoint extender;  // url empty: the API server alone
  bool json = false;
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  const topology::Catalog* catalog = &topology::Catalog::Embedded();
};

// What to print on stdout, or the message for stderr.
Result<std::string> RunPlugin(const PluginOptions& options);

}  // namespace toposched::kubectl

#endif  // TOPOSCHED_KUBECTL_PLUGIN_H_
