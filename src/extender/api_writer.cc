#include "extender/api_writer.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace toposched::extender {

Status ApiClusterWriter::Bind(const std::string& ns, const std::string& name,
                              const std::string& uid, const std::string& node,
                              const std::map<std::string, std::string>& annotations) {
  return BindWithOutcome(ns, name, uid, node, annotations).ToStatus();
}

kube::WriteResult ApiClusterWriter::BindWithOutcome(
    const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
    const std::map<std::string, std::string>& annotations) {
  if (may_write_ && !may_write_()) {
    return {kube::WriteOutcome::kNotApplied, 0,
            "not bound: this extender lost the leader lease; the scheduler will retry the pod"};
  }
  std::chrono::milliseconds budget{0};
  kube::WriteFence fence;
  if (fence_) {
    fence = [this, &budget]() -> Result<std::chrono::milliseconds> {
      Result<std::chrono::milliseconds> allowed = fence_();
      if (allowed.ok()) budget = *allowed;
      return allowed;
    };
  }
  kube::WriteResult result = kube::WriteBinding(client_, ns, name, uid, node, annotations, fence);
  if (result.unknown()) {
    // Without ?timeout= the API server bounds it by its --request-timeout (60 s by default).
    const std::chrono::milliseconds lasts = budget.count() > 0 ? budget : std::chrono::seconds(60);
    const int64_t until =
        SteadyNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(lasts).count();
    int64_t seen = unknown_until_ns_.load();
    while (seen < until && !unknown_until_ns_.compare_exchange_weak(seen, until)) {
    }
  }
  return result;
}

std::chrono::milliseconds ApiClusterWriter::UnknownWritesSettleIn() const {
  const int64_t left = unknown_until_ns_.load() - SteadyNs();
  return std::chrono::ceil<std::chrono::milliseconds>(
      std::chrono::nanoseconds(std::max<int64_t>(left, 0)));
}

Status LoneWriteFence::Validate(const Options& options) {
  if (options.write_timeout < std::chrono::seconds(1)) {
    return Error{fmt::format("--bind-write-timeout ({} ms) must be at least 1s",
                             options.write_timeout.count())};
  }
  if (options.settle < options.write_timeout + std::chrono::seconds(1)) {
    return Error{fmt::format(
        "--restart-settle ({} ms) must exceed --bind-write-timeout ({} ms) by at least 1s: a "
        "Binding the previous process sent could still land after the first bind of this one",
        options.settle.count(), options.write_timeout.count())};
  }
  return OkStatus();
}

LoneWriteFence::LoneWriteFence(Options options, NanoClock steady_ns,
                               std::function<uint64_t()> relist,
                               std::function<uint64_t()> relists_delivered)
    : options_(options),
      steady_ns_(std::move(steady_ns)),
      relist_(std::move(relist)),
      relists_delivered_(std::move(relists_delivered)),
      started_ns_(steady_ns_()) {}

bool LoneWriteFence::Settled() {
  if (settled_.load()) return true;
  const int64_t settle_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.settle).count();
  if (steady_ns_() - started_ns_ < settle_ns) return false;
  uint64_t ticket = 0;
  {
    MutexLock lock(mu_);
    if (ticket_ == 0) {
      ticket_ = relist_();
      spdlog::info("{} ms since start: listing pods afresh before the first bind",
                   options_.settle.count());
    }
    ticket = ticket_;
  }
  if (relists_delivered_() < ticket) return false;
  if (!settled_.exchange(true)) {
    spdlog::info(
        "binds open: a Binding of a previous process has landed or can no longer land, "
        "and pods were listed afresh");
    MutexLock lock(mu_);
    opened_.NotifyAll();
  }
  return true;
}

bool LoneWriteFence::AwaitSettled() {
  if (Settled()) return true;
  const int64_t until =
      steady_ns_() + std::chrono::duration_cast<std::chrono::nanoseconds>(options_.hold).count();
  // Re-checked every 20 ms: the settle's end and the list's delivery are seen by polling
  // Settled(), which also asks for the list; a flip wakes every waiter at once.
  for (;;) {
    const int64_t left = until - steady_ns_();
    if (left <= 0) return Settled();
    {
      MutexLock lock(mu_);
      opened_.WaitFor(mu_,
                      std::min<std::chrono::nanoseconds>(std::chrono::nanoseconds(left),
                                                         std::chrono::milliseconds(20)),
                      [this]() TS_REQUIRES(mu_) { return settled_.load(); });
    }
    if (Settled()) return true;
  }
}

Result<std::chrono::milliseconds> LoneWriteFence::WriteBudget() {
  if (Settled()) return options_.write_timeout;
  const int64_t since_ms = (steady_ns_() - started_ns_) / 1000000;
  return Error{fmt::format(
      "this extender started {} ms ago without leader election and binds nothing until a Binding "
      "its previous process may have sent has landed or can no longer land ({} ms, "
      "--restart-settle) and pods are listed afresh; the bind waited {} ms (--restart-bind-hold) "
      "and the pod will be retried",
      since_ms, options_.settle.count(), options_.hold.count())};
}

Result<std::optional<kube::Pod>> ApiClusterWriter::ReadPod(const std::string& ns,
                                                           const std::string& name) {
  return kube::GetPod(client_, ns, name);
}

namespace {
kube::Pod PodNamed(const std::string& ns, const std::string& name, const std::string& uid) {
  kube::Pod pod;
  pod.ns = ns;
  pod.name = name;
  pod.uid = uid;
  return pod;
}
}  // namespace

Status ApiClusterWriter::SetCondition(const std::string& ns, const std::string& name,
                                      const std::string& uid, const kube::PodCondition& condition) {
  if (may_write_ && !may_write_()) return Error{"not the leader"};
  return kube::SetPodCondition(client_, PodNamed(ns, name, uid), condition);
}

Status ApiClusterWriter::Evict(const std::string& ns, const std::string& name,
                               const std::string& uid) {
  if (may_write_ && !may_write_()) return Error{"not the leader"};
  return kube::EvictPod(client_, PodNamed(ns, name, uid));
}

void ApiClusterWriter::Event(const std::string& ns, const std::string& name, const std::string& uid,
                             std::string_view type, std::string_view reason,
                             std::string_view message) {
  const kube::Pod pod = PodNamed(ns, name, uid);
  if (auto s = kube::PostPodEvent(client_, pod, type, reason, message, "toposched-extender");
      !s.ok()) {
    spdlog::warn("could not post event on pod {}/{}: {}", ns, name, s.error());
  }
}

}  // namespace toposched::extender
