// Maps HTTP requests to the extender's verbs: POST .../filter, .../prioritize, .../bind,
// .../preempt (the last path segment names the verb, so any urlPrefix path works), GET /healthz,
// /readyz and /metrics. Binds run on their own thread pool so that a slow API server never holds
// up filter and prioritize.
#ifndef TOPOSCHED_EXTENDER_ROUTER_H_
#define TOPOSCHED_EXTENDER_ROUTER_H_

#include <functional>
#include <memory>

#include "extender/metrics.h"
#include "extender/service.h"
#include "net/http_server.h"

namespace toposched::extender {

class Router {
 public:
  Router(ExtenderService& service, Metrics& metrics, int bind_threads);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // With leader election: only while `is_leader()` are the verbs answered and /readyz 200; a
  // standby answers 503, so kube-scheduler retries the pod and the Service routes to the leader.
  // Set before serving; null (the default) serves always.
  void SetLeaderGate(std::function<bool()> is_leader) { is_leader_ = std::move(is_leader); }

  void Handle(net::HttpRequest&& request, net::Responder respond);
  net::HttpHandler AsHandler() {
    return [this](net::HttpRequest&& r, net::Responder respond) {
      Handle(std::move(r), std::move(respond));
    };
  }

 private:
  struct BindPool;
  ExtenderService& service_;
  Metrics& metrics_;
  std::unique_ptr<BindPool> bind_pool_;
  std::function<bool()> is_leader_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_ROUTER_H_
