#include "extender/router.h"

#include <charconv>
#include <chrono>
#include <climits>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "extender/protocol.h"
#include "net/url_query.h"

namespace toposched::extender {

struct Router::Pool {
  explicit Pool(int threads) : pool(static_cast<size_t>(std::max(1, threads))) {}
  ~Pool() { pool.join(); }
  boost::asio::thread_pool pool;
};

Router::Router(ExtenderService& service, Metrics& metrics, int bind_threads, int bind_queue)
    : service_(service),
      metrics_(metrics),
      bind_pool_(std::make_unique<Pool>(bind_threads)),
      view_pool_(std::make_unique<Pool>(1)),
      bind_queue_(std::max(1, bind_queue)) {}

Router::~Router() = default;

bool Router::DrainBinds(std::chrono::steady_clock::time_point deadline) const {
  // Polled: this runs once, at shutdown.
  while (binds_pending_.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

namespace {

std::string_view LastSegment(std::string_view target) {
  target = target.substr(0, target.find('?'));
  while (!target.empty() && target.back() == '/') target.remove_suffix(1);
  const auto slash = target.rfind('/');
  return slash == std::string_view::npos ? target : target.substr(slash + 1);
}

// 503 for kube-scheduler (an error it retries, never a placement) and a reason for humans.
net::HttpResponse NotLeader(std::string_view verb) {
  return {503, "application/json",
          EncodeErrorAnswer(fmt::format("{}: this toposched extender is a standby (another "
                                        "replica holds the leader lease); retry",
                                        verb))};
}

net::HttpResponse BadRequest(std::string_view verb, const std::string& error) {
  spdlog::warn("{}: malformed request: {}", verb, error);
  return {400, "application/json",
          EncodeErrorAnswer(fmt::format("malformed {} request: {}", verb, error))};
}

}  // namespace

void Router::HandleView(std::string_view target, std::function<void(net::HttpResponse)> finish) {
  auto query = net::ParseTarget(target);
  if (!query.ok()) {
    return finish(
        {400, "text/plain", fmt::format("malformed request target: {}\n", query.error())});
  }
  const bool page = query->path == "/fleet" || query->path == "/fleet/";
  const bool why = query->path == "/v1/why";
  const bool history = query->path == "/v1/history";
  if (!page && !why && !history && query->path != "/v1/fleet") {
    return finish({404, "text/plain",
                   "not found: the views are /fleet, /v1/fleet, /v1/why and /v1/history\n"});
  }
  FleetQuery fleet;
  std::string pod = query->Get("pod").value_or("");
  int64_t since = INT64_MIN;
  if (history) {
    if (history_ == nullptr) return finish({404, "text/plain", "no fleet history is kept\n"});
    if (auto text = query->Get("since")) {
      const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), since);
      if (ec != std::errc() || end != text->data() + text->size()) {
        return finish({400, "text/plain", "since: give a unix time in seconds\n"});
      }
    }
  } else if (!why) {
    fleet.node = query->Get("node").value_or("");
    fleet.instance_type = query->Get("type").value_or("");
    struct Count {
      const char* name;
      int& out;
      int max;
      const char* what;
    };
    for (const Count& c : {Count{"explain", fleet.explain_pending, 1000, "a count of pending pods"},
                           Count{"from", fleet.first_node, 1000000, "the first node to draw"},
                           Count{"count", fleet.max_nodes, 5000, "how many nodes to draw"},
                           Count{"refresh", fleet.refresh_seconds, 86400,
                                 "seconds between reloads of the page (0: never)"}}) {
      const auto text = query->Get(c.name);
      if (!text) continue;
      int n = -1;
      const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), n);
      if (ec != std::errc() || end != text->data() + text->size() || n < 0 || n > c.max) {
        return finish(
            {400, "text/plain", fmt::format("{}: give {}, 0 to {}\n", c.name, c.what, c.max)});
      }
      c.out = n;
    }
  }
  if ((why || !pod.empty()) && pod.find('/') == std::string::npos) {
    return finish({400, "text/plain", "give the pod as ?pod=NAMESPACE/NAME\n"});
  }
  if (views_pending_.fetch_add(1) > kMaxViewsWaiting) {
    views_pending_.fetch_sub(1);
    return finish({503, "text/plain", "busy: other views are being built; retry\n"});
  }
  boost::asio::post(view_pool_->pool, [this, fleet = std::move(fleet), pod = std::move(pod), why,
                                       page, history, since, finish = std::move(finish)] {
    struct Done {
      std::atomic<int>& pending;
      ~Done() { pending.fetch_sub(1); }
    } done{views_pending_};
    if (history) {
      std::vector<FleetSample> samples = history_->Snapshot();
      std::erase_if(samples, [since](const FleetSample& s) { return s.time <= since; });
      return finish(
          {200, "application/json", HistoryJson(samples, history_interval_, history_->capacity())});
    }
    if (page) {
      const std::vector<FleetSample> samples =
          history_ != nullptr ? history_->Snapshot() : std::vector<FleetSample>{};
      return finish({200, "text/html; charset=utf-8", service_.FleetPage(fleet, pod, samples)});
    }
    if (!why) return finish({200, "application/json", service_.FleetView(fleet)});
    auto answer = service_.WhyPending(pod);
    if (!answer.ok()) return finish({404, "text/plain", answer.error() + "\n"});
    finish({200, "application/json", std::move(answer).value()});
  });
}

void Router::HandleViewsOnly(net::HttpRequest&& request, net::Responder respond) {
  const auto start = std::chrono::steady_clock::now();
  const std::string verb(LastSegment(request.target));
  auto finish = [this, start, verb, respond = std::move(respond)](net::HttpResponse response) {
    metrics_.ObserveRequest(
        verb, response.status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    respond(std::move(response));
  };
  if (request.method != "GET") {
    return finish({405, "text/plain", "this port serves only GET of the views\n"});
  }
  if (verb == "healthz") return finish({200, "text/plain", "ok\n"});
  // The page is this port's front door.
  if (request.target == "/" || request.target.starts_with("/?")) {
    return HandleView("/fleet" + request.target.substr(1), finish);
  }
  HandleView(request.target, finish);
}

void Router::HandleBind(simdjson::padded_string_view body,
                        const std::function<void(net::HttpResponse)>& finish) {
  auto args = DecodeBindingArgs(body);
  if (!args.ok()) return finish(BadRequest("bind", args.error()));
  if (binds_pending_.fetch_add(1) >= bind_queue_) {
    binds_pending_.fetch_sub(1);
    spdlog::warn("bind {}/{}: refused, {} binds already waiting (--bind-queue)",
                 args->pod_namespace, args->pod_name, bind_queue_);
    return finish({503, "application/json",
                   EncodeErrorAnswer(fmt::format("busy: {} binds are already waiting for the API "
                                                 "server (--bind-queue); retry",
                                                 bind_queue_))});
  }
  const int64_t arrived_ns = bind_wait_limit_ns_ > 0 ? steady_ns_() : 0;
  boost::asio::post(bind_pool_->pool, [this, args = std::move(args).value(), finish, arrived_ns]() {
    // Counted until the answer is handed back, so DrainBinds waits for it.
    struct Done {
      std::atomic<int>& pending;
      ~Done() { pending.fetch_sub(1); }
    } done{binds_pending_};
    // Leadership may have gone while the bind waited for a thread.
    if (is_leader_ && !is_leader_()) return finish(NotLeader("bind"));
    if (bind_wait_limit_ns_ > 0 && steady_ns_() - arrived_ns > bind_wait_limit_ns_) {
      return finish(RefuseLateBind(args, steady_ns_() - arrived_ns));
    }
    finish({200, "application/json", service_.Bind(args)});
  });
}

net::HttpResponse Router::RefuseLateBind(const BindingArgs& args, int64_t waited_ns) {
  const int64_t waited_ms = waited_ns / 1000000;
  const int64_t limit_ms = bind_wait_limit_ns_ / 1000000;
  spdlog::warn(
      "bind {}/{} to {}: refused unwritten, it waited {} ms for a bind thread (--bind-wait-limit "
      "{} ms): kube-scheduler has given up on it and retries the pod",
      args.pod_namespace, args.pod_name, args.node, waited_ms, limit_ms);
  metrics_.CountBind("refused");
  return {503, "application/json",
          EncodeErrorAnswer(fmt::format(
              "this bind waited {} ms for a bind thread, past --bind-wait-limit ({} ms); retry",
              waited_ms, limit_ms))};
}

void Router::Handle(net::HttpRequest&& request, net::Responder respond) {
  const auto start = std::chrono::steady_clock::now();
  const std::string verb(LastSegment(request.target));
  auto finish = [this, start, verb, respond = std::move(respond)](net::HttpResponse response) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_.ObserveRequest(verb, response.status, seconds);
    respond(std::move(response));
  };
  const simdjson::padded_string_view body(request.body.data(), request.body.size(),
                                          request.body.capacity());

  if (request.method == "GET") {
    if (verb == "healthz") return finish({200, "text/plain", "ok\n"});
    if (verb == "readyz") {
      if (is_leader_ && !is_leader_()) {
        return finish({503, "text/plain", "not ready: standby, another replica is the leader\n"});
      }
      if (!service_.Ready()) return finish({503, "text/plain", "not ready: first sync not done\n"});
      if (!service_.ApiHealthy()) {
        return finish({503, "text/plain", "not ready: the API server is unreachable\n"});
      }
      return finish({200, "text/plain", "ok\n"});
    }
    if (verb == "metrics") {
      if (server_stats_) metrics_.SetHttpServerStats(server_stats_());
      metrics_.SetBindsPending(binds_pending_.load());
      return finish({200, "text/plain; version=0.0.4", metrics_.Serialize()});
    }
    if (verb == "fleet" || verb == "why" || verb == "history") {
      return HandleView(request.target, finish);
    }
    return finish({404, "text/plain", "not found\n"});
  }
  if (request.method != "POST") {
    return finish({405, "text/plain", "use POST for extender verbs, GET for health and metrics\n"});
  }
  const bool is_verb =
      verb == "filter" || verb == "prioritize" || verb == "preempt" || verb == "bind";
  if (is_verb && is_leader_ && !is_leader_()) return finish(NotLeader(verb));
  if (verb == "filter" || verb == "prioritize") {
    auto args = DecodeExtenderArgs(body);
    if (!args.ok()) return finish(BadRequest(verb, args.error()));
    if (catch_up_) catch_up_(args->pod);
    finish({200, "application/json",
            verb == "filter" ? service_.Filter(*args) : service_.Prioritize(*args)});
    if (args->nodes.has_value()) {
      // 5,000 decoded Node objects take ~10 ms to free, and this is the io thread: the reply
      // just queued would wait for it. Free them on the pool instead.
      boost::asio::post(bind_pool_->pool,
                        [doomed = std::make_shared<ExtenderArgs>(std::move(args).value())] {});
    }
    return;
  }
  if (verb == "preempt") {
    auto args = DecodePreemptionArgs(body);
    if (!args.ok()) return finish(BadRequest(verb, args.error()));
    return finish({200, "application/json", service_.Preempt(*args)});
  }
  if (verb == "bind") return HandleBind(body, finish);
  return finish(
      {404, "text/plain",
       fmt::format("unknown verb '{}': use filter, prioritize, bind or preempt\n", verb)});
}

}  // namespace toposched::extender
