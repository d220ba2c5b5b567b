// The ClusterWriter that talks to the API server: Binding objects and Events.
#ifndef TOPOSCHED_EXTENDER_API_WRITER_H_
#define TOPOSCHED_EXTENDER_API_WRITER_H_

#include "extender/service.h"
#include "kube/client.h"

namespace toposched::extender {

class ApiClusterWriter final : public ClusterWriter {
 public:
  // The client must outlive the writer.
  explicit ApiClusterWriter(kube::ApiClient& client) : client_(client) {}

  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override;
  void Event(const std::string& ns, const std::string& name, const std::string& uid,
             std::string_view type, std::string_view reason, std::string_view message) override;

 private:
  kube::ApiClient& client_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_API_WRITER_H_
