#include "webhook/template_store.h"

#include <utility>

#include <fmt/format.h>

#include "kube/client.h"

namespace toposched::webhook {

TemplateStore::TemplateStore(CreateFunction create, std::chrono::nanoseconds remember)
    : create_(std::move(create)), remember_(remember) {}

Status TemplateStore::Ensure(std::string_view ns, const std::vector<ClaimSize>& sizes,
                             std::chrono::nanoseconds now) {
  for (const ClaimSize& size : sizes) {
    const std::string name = TemplateName(size);
    const std::string key = fmt::format("{}/{}", ns, name);
    {
      MutexLock lock(mutex_);
      const auto it = known_.find(key);
      if (it != known_.end() && now - it->second < remember_) {
        ++stats_.cached;
        continue;
      }
    }
    // Outside the lock: two pods of one new size may both ask; the second gets AlreadyExists.
    const std::string path =
        fmt::format("/apis/resource.k8s.io/v1/namespaces/{}/resourceclaimtemplates",
                    kube::EscapeUrlComponent(ns));
    const Result<CreateAnswer> answer = create_(path, TemplateJson(ns, size));
    MutexLock lock(mutex_);
    if (!answer.ok()) {
      ++stats_.failed;
      return Error{fmt::format("creating ResourceClaimTemplate {}: {}", key, answer.error())};
    }
    if (answer->status == 200 || answer->status == 201 || answer->status == 409) {
      ++(answer->status == 409 ? stats_.existed : stats_.created);
      known_[key] = now;
      continue;
    }
    ++stats_.failed;
    std::string why = kube::StatusMessage(answer->body);
    if (answer->status == 403) {
      why +=
          " (the webhook's ServiceAccount needs create on resourceclaimtemplates of "
          "resource.k8s.io; the chart's ClusterRole grants it)";
    } else if (answer->status == 404) {
      why += " (the API server serves no resource.k8s.io/v1: DRA needs Kubernetes 1.34 or later)";
    }
    return Error{
        fmt::format("creating ResourceClaimTemplate {}: HTTP {}: {}", key, answer->status, why)};
  }
  return OkStatus();
}

TemplateStoreStats TemplateStore::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

}  // namespace toposched::webhook
