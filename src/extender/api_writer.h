// The ClusterWriter that talks to the API server: Binding objects and Events; and the fence of a
// lone extender's writes (LoneWriteFence).
#ifndef TOPOSCHED_EXTENDER_API_WRITER_H_
#define TOPOSCHED_EXTENDER_API_WRITER_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "base/clock.h"
#include "base/mutex.h"
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
  Status SetCondition(const std::string& ns, const std::string& name, const std::string& uid,
                      const kube::PodCondition& condition) override;
  Status Evict(const std::string& ns, const std::string& name, const std::string& uid) override;
  std::chrono::milliseconds MaxWriteTime() const override {
    return client_.config().connect_timeout + client_.config().request_timeout;
  }
  // Each Binding answered with an unknown outcome may land until its budget (the fence's, sent
  // as ?timeout=) has passed since the answer; without a fence, kube-apiserver's own 60 s.
  std::chrono::milliseconds UnknownWritesSettleIn() const override;

 private:
  kube::ApiClient& client_;
  std::function<bool()> may_write_;
  kube::WriteFence fence_;
  std::atomic<int64_t> unknown_until_ns_{0};  // steady time; 0: none
};

// The fence of a lone extender (no --leader-elect; docs/reliability.md, "A lone extender"). No
// Lease tells a restarted process that its previous incarnation's last Binding is over, so every
// Binding is bounded (`write_timeout`: the client cuts it and, through ?timeout=, so does the API
// server) and a new process sends none until `settle` (at least write_timeout + 1 s) has passed
// on its steady clock since the fence was made, and a pod list asked for after that point has
// been delivered: a Binding of the previous incarnation has then landed, and is in that list, or
// can never land. The margin covers the old request's travel and the clocks' rates, as the
// leader's fence does.
class LoneWriteFence {
 public:
  struct Options {
    std::chrono::milliseconds write_timeout{5000};
    std::chrono::milliseconds settle{10000};
    // How long a bind that arrives before the settle ends waits for it (AwaitSettled) before it
    // is refused: kube-scheduler before ~1.27 parks a pod whose bind failed for up to 60 s (1.20)
    // or 5 min, so a bind held under its httpTimeout costs less than one refused.
    std::chrono::milliseconds hold{8000};
  };
  // write_timeout >= 1 s and settle >= write_timeout + 1 s, else an error naming the rule.
  static Status Validate(const Options& options);

  // `relist` asks for a fresh (quorum) pod list and returns its ticket; `relists_delivered`
  // counts such lists delivered (kube::Informer::Relist, RelistsDelivered). Counts from now.
  LoneWriteFence(Options options, NanoClock steady_ns, std::function<uint64_t()> relist,
                 std::function<uint64_t()> relists_delivered);

  // True once settled. The first call after the settle time asks for the fresh list; call it
  // from a periodic tick so the list does not wait for a bind.
  bool Settled();
  // Waits, at most options.hold, until Settled(); true if it is. Blocks the calling bind thread.
  bool AwaitSettled();
  // The WriteFence: write_timeout once settled, else why nothing may be sent yet.
  Result<std::chrono::milliseconds> WriteBudget();

 private:
  const Options options_;
  NanoClock steady_ns_;
  std::function<uint64_t()> relist_;
  std::function<uint64_t()> relists_delivered_;
  const int64_t started_ns_;
  Mutex mu_;
  uint64_t ticket_ TS_GUARDED_BY(mu_) = 0;  // the fresh list's; 0: not asked yet
  CondVar opened_;                          // notified when settled_ turns true
  std::atomic<bool> settled_{false};
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_API_WRITER_H_
