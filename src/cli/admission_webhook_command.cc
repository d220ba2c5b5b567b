// `toposched admission-webhook`: the mutating admission webhook that serves count requests
// (aws.amazon.com/neuron: N, aws.amazon.com/neuroncore: N) through DRA with legal sets, for pods
// whose namespace or pod carries toposched.io/neuron-dra=true (the chart's
// MutatingWebhookConfiguration selects them; docs/dra.md, "Count requests").

#include <atomic>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "kube/client.h"
#include "net/http_server.h"
#include "webhook/count_requests.h"
#include "webhook/template_store.h"

namespace toposched::cli {

struct AdmissionWebhookOptions {
  std::string listen = "0.0.0.0:9443";
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string kubeconfig;
  double template_recheck_s = 600;
  int threads = 4;
  std::string log_level = "info";
};

std::shared_ptr<AdmissionWebhookOptions> AddAdmissionWebhookCommand(CLI::App& app) {
  auto o = std::make_shared<AdmissionWebhookOptions>();
  CLI::App* cmd = app.add_subcommand(
      "admission-webhook",
      "Serve the mutating admission webhook for count requests through DRA: POST /mutate-pods "
      "(AdmissionReview v1) rewrites a pod's aws.amazon.com/neuron (neurondevice, neuroncore) "
      "limits into ResourceClaims that only a legal set can satisfy, creating the "
      "ResourceClaimTemplate of each size in the pod's namespace. GET /healthz, /readyz, "
      "/metrics. The API server calls it only for pods of namespaces or pods labelled "
      "toposched.io/neuron-dra=true (the chart's MutatingWebhookConfiguration).");
  cmd->add_option("--listen", o->listen, "Address and port to serve HTTPS on (HOST:PORT)")
      ->capture_default_str();
  cmd->add_option("--tls-cert-file", o->tls_cert_file,
                  "Serving certificate (PEM); the API server checks it against the "
                  "webhook's caBundle")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key-file", o->tls_key_file, "Private key for --tls-cert-file (PEM)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--kubeconfig", o->kubeconfig,
                  "Kubeconfig for the API server (default: $KUBECONFIG, then in-cluster, then "
                  "~/.kube/config)");
  cmd->add_option("--template-recheck", o->template_recheck_s,
                  "Seconds a ResourceClaimTemplate known to exist is not created again (one "
                  "deleted by hand is made again at the first pod of its size after that)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--threads", o->threads,
                  "Requests answered at once (each may wait for one template's creation)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--log-level", o->log_level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  return o;
}

namespace {

// Reviews answered, by outcome; /metrics.
struct ReviewCounts {
  std::atomic<uint64_t> rewritten{0};
  std::atomic<uint64_t> unchanged{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> malformed{0};
};

std::string MetricsText(const ReviewCounts& counts, const webhook::TemplateStoreStats& templates) {
  std::string out =
      "# HELP toposched_webhook_reviews_total AdmissionReviews of pods answered, by outcome.\n"
      "# TYPE toposched_webhook_reviews_total counter\n";
  for (const auto& [outcome, value] :
       {std::pair{"rewritten", &counts.rewritten}, std::pair{"unchanged", &counts.unchanged},
        std::pair{"refused", &counts.refused}, std::pair{"malformed", &counts.malformed}}) {
    out += fmt::format("toposched_webhook_reviews_total{{outcome=\"{}\"}} {}\n", outcome,
                       value->load());
  }
  out +=
      "# HELP toposched_webhook_templates_total ResourceClaimTemplates needed by rewritten pods, "
      "by what it took.\n"
      "# TYPE toposched_webhook_templates_total counter\n";
  out += fmt::format("toposched_webhook_templates_total{{result=\"created\"}} {}\n",
                     templates.created);
  out += fmt::format("toposched_webhook_templates_total{{result=\"existed\"}} {}\n",
                     templates.existed);
  out +=
      fmt::format("toposched_webhook_templates_total{{result=\"known\"}} {}\n", templates.cached);
  out +=
      fmt::format("toposched_webhook_templates_total{{result=\"failed\"}} {}\n", templates.failed);
  return out;
}

}  // namespace

int RunAdmissionWebhook(const AdmissionWebhookOptions& o) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  const StopSignals signals;  // before any thread starts
  auto fail = [](const std::string& message) {
    spdlog::error("{}", message);
    return kExitUsage;
  };
  auto listen = SplitListen(o.listen, "--listen");
  if (!listen.ok()) return fail(listen.error());
  auto client = kube::ApiClient::FromEnvironment(o.kubeconfig);
  if (!client.ok()) return fail("no access to the API server: " + client.error());
  // The templates live in resource.k8s.io/v1: say so now rather than at the first pod.
  auto group = (*client)->Get("/apis/resource.k8s.io/v1");
  if (!group.ok()) return fail("reaching the API server: " + group.error());
  if (group->status != 200) {
    return fail(fmt::format(
        "the API server does not serve resource.k8s.io/v1 (HTTP {}: {}): count requests through "
        "DRA need Kubernetes 1.34 or later",
        group->status, kube::StatusMessage(group->body)));
  }

  kube::ApiClient& api = **client;
  webhook::TemplateStore templates(
      [&api](std::string_view path, std::string_view body) -> Result<webhook::CreateAnswer> {
        auto answer = api.Post(path, body);
        if (!answer.ok()) return Error{answer.error()};
        return webhook::CreateAnswer{answer->status, std::move(answer->body)};
      },
      std::chrono::milliseconds(static_cast<int64_t>(o.template_recheck_s * 1000)));
  ReviewCounts counts;

  auto mutate = [&](const std::string& body) -> net::HttpResponse {
    Result<webhook::Decision> decided = webhook::Decide(body);
    if (!decided.ok()) {
      ++counts.malformed;
      spdlog::warn("refused a request that is no AdmissionReview of a pod: {}", decided.error());
      return {400, "text/plain", "not an AdmissionReview of a pod: " + decided.error() + "\n"};
    }
    webhook::Decision& d = *decided;
    const std::string pod = fmt::format("{}/{}", d.ns, d.pod);
    if (d.allowed && !d.templates.empty() && !d.dry_run) {
      if (Status made = templates.Ensure(d.ns, d.templates, std::chrono::nanoseconds(SteadyNs()));
          !made.ok()) {
        d.allowed = false;
        d.message = made.error() +
                    "; the pod is refused rather than created with a claim that cannot be made";
      }
    }
    if (!d.allowed) {
      ++counts.refused;
      spdlog::warn("pod {}: refused: {}", pod, d.message);
    } else if (d.patch.empty()) {
      ++counts.unchanged;
      spdlog::debug("pod {}: no Neuron count request; unchanged", pod);
    } else {
      ++counts.rewritten;
      for (const std::string& rewrite : d.rewrites) {
        spdlog::info("pod {}: {}{}", pod, rewrite, d.dry_run ? " (dry run)" : "");
      }
    }
    return {200, "application/json", webhook::ResponseJson(d)};
  };

  net::HttpServerOptions http;
  http.address = listen->first;
  http.port = listen->second;
  http.threads = o.threads;
  http.tls_cert_file = o.tls_cert_file;
  http.tls_key_file = o.tls_key_file;
  http.body_limit = size_t{16} << 20;  // a pod is far smaller; the API server caps objects at 3 MiB
  http.body_memory_limit = size_t{128} << 20;
  auto server =
      net::HttpServer::Start(http, [&](net::HttpRequest&& request, const net::Responder& respond) {
        const std::string_view path =
            std::string_view(request.target).substr(0, std::string_view(request.target).find('?'));
        if (request.method == "POST" && path == "/mutate-pods") {
          respond(mutate(request.body));
        } else if (request.method == "GET" && (path == "/healthz" || path == "/readyz")) {
          respond({200, "text/plain", "ok\n"});
        } else if (request.method == "GET" && path == "/metrics") {
          respond({200, "text/plain; version=0.0.4", MetricsText(counts, templates.stats())});
        } else {
          respond({404, "text/plain",
                   "not found: POST /mutate-pods, GET /healthz, /readyz, /metrics\n"});
        }
      });
  if (!server.ok()) return fail(fmt::format("--listen {}: {}", o.listen, server.error()));
  spdlog::info("admission webhook on https://{}:{}/mutate-pods (templates rechecked every {} s)",
               listen->first, (*server)->port(), o.template_recheck_s);
  const int signal = signals.Wait();
  spdlog::info("signal {} received: answering the reviews under way, then stopping", signal);
  (*server)->StopAccepting();
  (*server)->Drain(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  (*server)->Stop();
  return kExitOk;
}

}  // namespace toposched::cli
