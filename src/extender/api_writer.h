// The ClusterWriter that talks to the API server: Binding objects and Events.
#ifndef TOPOSCHED_EXTENDER_API_WRITER_H_
#define TOPOSCHED_EXTENDER_API_WRITER_H_

#include <functional>

#include "extender/service.h"
#include "kube/client.h"

namespace toposched::extender {

class ApiClusterWriter final : public ClusterWriter {
 public:
  // The client must outlive the writer.
  // `may_write` (with leader election): a Binding is written only while it returns true, checked
  // right before the write, so a leader that lost its lease never binds. Null: always.
  // `fence` (with leader election, LeaderElector::WriteBudget): the Binding's time budget, read
  // right before it is sent; it is cut at the budget, and not sent when the fence refuses.
  explicit ApiClusterWriter(kube::ApiClient& client, std::function<bool()> may_write = nullptr,
                            kube::WriteFence fence = nullptr)
      : client_(client), may_write_(std::move(may_write)), fence_(std::move(fence)) {}

  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override;
  // The Binding, classified by kube::WriteBinding; a gate that refuses is "not applied".
  kube::WriteResult BindWithOutcome(const std::string& ns, const std::string& name,
                                    const std::string& uid, const std::string& node,
                                    const std::map<std::string, std::string>& annotations) override;
  Result<std::optional<kube::Pod>> ReadPod(const std::string& ns, const std::string& name) override;
  void Event(const std::string& ns, const std::string& name, const std::string& uid,
             std::string_view type, std::string_view reason, std::string_view message) override;
  std::chrono::milliseconds MaxWriteTime() const override {
    return client_.config().connect_timeout + client_.config().request_timeout;
  }

 private:
  kube::ApiClient& client_;
  std::function<bool()> may_write_;
  kube::WriteFence fence_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_API_WRITER_H_
