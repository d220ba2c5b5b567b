// Offline mode: nodes from a file instead of the API server, binds kept in memory. For demos, dry
// runs and tests; the HTTP API is the same.
#ifndef TOPOSCHED_EXTENDER_OFFLINE_H_
#define TOPOSCHED_EXTENDER_OFFLINE_H_

#include <map>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "extender/service.h"
#include "kube/objects.h"

namespace toposched::extender {

// Reads a Kubernetes NodeList (or a single Node, or a List of Nodes) from JSON or YAML text.
// `source` names the file in errors.
Result<std::vector<kube::Node>> ParseNodeFile(std::string_view text, std::string_view source);

// Converts YAML text to JSON (scalars become strings, except true/false/null), so one JSON
// decoder reads both. Errors carry the line.
Result<std::string> YamlToJson(std::string_view yaml, std::string_view source);

// Binds in memory: records each pod's node and annotations, refuses a second bind of a pod.
class OfflineClusterWriter final : public ClusterWriter {
 public:
  struct Binding {
    std::string node;
    std::map<std::string, std::string> annotations;
  };

  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override;
  void Event(const std::string& ns, const std::string& name, const std::string& uid,
             std::string_view type, std::string_view reason, std::string_view message) override;

  std::map<std::string, Binding> Bindings() const;  // by uid

 private:
  mutable Mutex mu_;
  std::map<std::string, Binding> bindings_ TS_GUARDED_BY(mu_);
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_OFFLINE_H_
