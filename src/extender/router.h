// Maps HTTP requests to the extender's verbs: POST .../filter, .../prioritize, .../bind,
// .../preempt (the last path segment names the verb, so any urlPrefix path works), GET /healthz,
// /readyz and /metrics, and the operators' views GET /fleet (the page), /v1/fleet,
// /v1/why?pod=NS/NAME and /v1/history (docs/observability.md). Binds run on their own thread pool
// so that a slow API server never holds up filter and prioritize; at most `bind_queue` binds wait
// for or hold a bind thread, and one more is answered 503 with an ExtenderBindingResult error
// ("busy"), which kube-scheduler treats as a failed bind: the pod goes back to its queue and is
// retried, instead of the queue growing without bound behind a slow API server. The views run on
// a thread of their own, one at a time (at most kMaxViewsWaiting more wait; then 503), so that a
// 5,000-node view never delays a filter on the io thread or a bind on the bind pool.
#ifndef TOPOSCHED_EXTENDER_ROUTER_H_
#define TOPOSCHED_EXTENDER_ROUTER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "base/clock.h"
#include "extender/fleet_history.h"
#include "extender/metrics.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "net/http_server.h"

namespace toposched::extender {

class Router {
 public:
  static constexpr int kDefaultBindQueue = 512;
  static constexpr int kMaxViewsWaiting = 4;
  Router(ExtenderService& service, Metrics& metrics, int bind_threads,
         int bind_queue = kDefaultBindQueue);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // With leader election: only while `is_leader()` are the verbs answered and /readyz 200; a
  // standby answers 503, so kube-scheduler retries the pod and the Service routes to the leader.
  // Set before serving; null (the default) serves always.
  void SetLeaderGate(std::function<bool()> is_leader) { is_leader_ = std::move(is_leader); }

  // Called with the pod of every filter and prioritize before it is answered: the command waits
  // there for its pod watch to reach the pod's resourceVersion. Set before serving; null waits not.
  void SetCatchUp(std::function<void(const kube::Pod&)> catch_up) {
    catch_up_ = std::move(catch_up);
  }

  // /metrics also reports the HTTP server's counters (connections, refusals) read from here.
  // Set before serving; null (the default) reports none.
  void SetServerStats(std::function<net::HttpServerStats()> stats) {
    server_stats_ = std::move(stats);
  }

  // GET /v1/history answers from `history` (sampled every `interval`); null (the default): 404.
  // Set before serving; `history` must outlive the router.
  void SetHistory(const FleetHistory* history, std::chrono::milliseconds interval) {
    history_ = history;
    history_interval_ = interval;
  }

  // A bind that waited longer than `limit` for a bind thread is answered 503 and not written:
  // kube-scheduler has given up on it by then (its httpTimeout), and a Binding landing after that
  // only makes it retry a pod that is bound. 0 (the default) never refuses. `steady_ns` is the
  // clock the wait is read on. Set before serving.
  void SetBindWaitLimit(std::chrono::milliseconds limit, NanoClock steady_ns) {
    bind_wait_limit_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
    steady_ns_ = std::move(steady_ns);
  }

  // Binds accepted and not yet answered (waiting for a bind thread or running).
  int BindsPending() const { return binds_pending_.load(); }
  // Shutdown: waits until no bind is pending, or until `deadline`; true when none is left. Stop
  // the server accepting first (net::HttpServer::StopAccepting), or new binds keep arriving.
  bool DrainBinds(std::chrono::steady_clock::time_point deadline) const;

  void Handle(net::HttpRequest&& request, net::Responder respond);
  // The views' own port (--views-listen, loopback only): GET of the page and the views, /healthz;
  // nothing else (no verb, no metrics).
  void HandleViewsOnly(net::HttpRequest&& request, net::Responder respond);
  net::HttpHandler AsViewsHandler() {
    return [this](net::HttpRequest&& r, net::Responder respond) {
      HandleViewsOnly(std::move(r), std::move(respond));
    };
  }
  net::HttpHandler AsHandler() {
    return [this](net::HttpRequest&& r, net::Responder respond) {
      Handle(std::move(r), std::move(respond));
    };
  }

 private:
  struct Pool;
  ExtenderService& service_;
  Metrics& metrics_;
  // Answers a GET of the views (/fleet, /v1/fleet, /v1/why) on view_pool_.
  void HandleView(std::string_view target, std::function<void(net::HttpResponse)> finish);
  // Queues a bind for a bind thread (503 when --bind-queue are waiting already).
  void HandleBind(simdjson::padded_string_view body,
                  const std::function<void(net::HttpResponse)>& finish);
  // The answer to a bind that waited past the limit for a thread, logged and counted.
  net::HttpResponse RefuseLateBind(const BindingArgs& args, int64_t waited_ns);

  // Declared before the pools: a task finishing while a pool joins still counts down.
  std::atomic<int> views_pending_{0};
  std::unique_ptr<Pool> bind_pool_;
  std::unique_ptr<Pool> view_pool_;  // one thread
  const int bind_queue_;
  std::atomic<int> binds_pending_{0};
  int64_t bind_wait_limit_ns_ = 0;
  NanoClock steady_ns_;
  std::function<bool()> is_leader_;
  std::function<void(const kube::Pod&)> catch_up_;
  std::function<net::HttpServerStats()> server_stats_;
  const FleetHistory* history_ = nullptr;
  std::chrono::milliseconds history_interval_{0};
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_ROUTER_H_
