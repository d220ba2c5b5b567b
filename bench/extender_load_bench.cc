// Filter+bind cycles per second through the whole stack: HTTP into the extender (Beast), the
// tracker, and a Binding POSTed by the libcurl API client to a loopback API stub (plain HTTP,
// answering 201 as kube-apiserver does). Target: >= 5,000 cycles/s on this 2-core machine, with
// the load client, the extender and the stub sharing the two cores.
//   ./build/bench/extender_load_bench --benchmark_min_time=3
#include <atomic>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include "extender/api_writer.h"
#include "extender/router.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/client.h"
#include "net/http_server.h"

namespace {

using namespace toposched;
using namespace toposched::extender;

constexpr int kNodes = 2000;  // trn1.32xlarge: 32,000 devices, room for every 1-device pod
constexpr int kNamesPerFilter = 50;

size_t Discard(char*, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->clear();
  return size * n;
}

struct Stack {
  Stack() {
    spdlog::set_level(spdlog::level::err);
    // The API stub: every POST .../binding succeeds.
    net::HttpServerOptions stub_options;
    stub_options.address = "127.0.0.1";
    stub_options.port = 0;
    stub_options.threads = 1;
    stub = std::move(net::HttpServer::Start(stub_options, [](net::HttpRequest&&,
                                                             net::Responder respond) {
             respond({201, "application/json",
                      R"({"kind":"Status","apiVersion":"v1","status":"Success"})"});
           })).value();
    kube::ClientConfig config;
    config.server = "http://127.0.0.1:" + std::to_string(stub->port());
    config.max_idle_connections = 16;
    client = std::move(kube::ApiClient::Create(config)).value();
    writer = std::make_unique<ApiClusterWriter>(*client);
    service = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), ExtenderOptions{}, *writer, metrics,
        [] { return int64_t{0}; }, [] { return int64_t{1}; });
    std::vector<kube::Node> nodes;
    for (int i = 0; i < kNodes; ++i) {
      kube::Node node;
      node.name = "node-" + std::to_string(i);
      node.instance_type = "trn1.32xlarge";
      nodes.push_back(node);
      names.push_back(node.name);
    }
    service->ReplaceNodes(nodes);
    service->ReplacePods({});
    router = std::make_unique<Router>(*service, metrics, 4);
    net::HttpServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    options.threads = 1;
    server = std::move(net::HttpServer::Start(options, router->AsHandler())).value();
    base = "http://127.0.0.1:" + std::to_string(server->port());
  }
  ~Stack() {
    server->Stop();
    stub->Stop();
  }
  Metrics metrics;
  std::unique_ptr<net::HttpServer> stub;
  std::unique_ptr<kube::ApiClient> client;
  std::unique_ptr<ApiClusterWriter> writer;
  std::unique_ptr<ExtenderService> service;
  std::unique_ptr<Router> router;
  std::unique_ptr<net::HttpServer> server;
  std::vector<std::string> names;
  std::string base;
  std::atomic<int> next_pod{0};
  std::atomic<int> failures{0};
};

Stack& SharedStack() {
  static Stack stack;
  return stack;
}

bool Post(CURL* curl, const std::string& url, const std::string& body, std::string& reply) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  long status = 0;
  if (curl_easy_perform(curl) != CURLE_OK) return false;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  (void)reply;
  return status == 200;
}

void BM_FilterBindCycle(benchmark::State& state) {
  Stack& stack = SharedStack();
  CURL* curl = curl_easy_init();
  std::string reply;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  for (auto _ : state) {
    const int n = stack.next_pod++;
    const std::string name = "pod-" + std::to_string(n);
    const std::string uid = "uid-" + std::to_string(n);
    // kube-scheduler sends a sample of feasible nodes; take a sliding window of 50.
    const size_t first = static_cast<size_t>(n) % (kNodes - kNamesPerFilter);
    std::vector<std::string> window(
        stack.names.begin() + static_cast<long>(first),
        stack.names.begin() + static_cast<long>(first) + kNamesPerFilter);
    const std::string filter =
        testing::NamesArgs(testing::PodJson(name, uid, "aws.amazon.com/neuron", 1), window);
    const std::string bind = R"({"PodName":")" + name + R"(","PodNamespace":"default","PodUID":")" +
                             uid + R"(","Node":")" + window[0] + R"("})";
    if (!Post(curl, stack.base + "/filter", filter, reply) ||
        !Post(curl, stack.base + "/bind", bind, reply)) {
      ++stack.failures;
    }
  }
  state.counters["cycles_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  if (state.thread_index() == 0) {
    state.counters["failed"] = stack.failures.load();
    state.counters["bound"] = stack.service->tracker().Stats().committed;
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
}
BENCHMARK(BM_FilterBindCycle)->Threads(1)->Threads(2)->Threads(4)->UseRealTime()->Iterations(4000);

}  // namespace

BENCHMARK_MAIN();
