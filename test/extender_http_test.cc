// The extender over real loopback HTTP(S): routing, status codes, body limits, TLS, metrics and
// concurrent filter+bind from many threads.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <curl/curl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender/offline.h"
#include "extender/router.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "net/http_server.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace toposched::extender {
namespace {

using nlohmann::json;

struct Reply {
  long status = 0;
  std::string body;
};

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

Reply Request(const std::string& url, const std::string* post_body, const std::string& ca = "") {
  Reply reply;
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (post_body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post_body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(post_body->size()));
  }
  if (!ca.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca.c_str());
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

class HttpTest : public ::testing::Test {
 protected:
  void Start(net::HttpServerOptions options = {}) {
    std::vector<kube::Node> nodes;
    for (int i = 0; i < 4; ++i) {
      auto node = kube::DecodeNode(
          testing::EksNodeJson("trn-" + std::to_string(i), "trn1.32xlarge", 16, 32));
      ASSERT_TRUE(node.ok()) << node.error();
      nodes.push_back(*node);
    }
    service_ = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), ExtenderOptions{}, writer_, metrics_,
        [] { return int64_t{0}; }, [] { return int64_t{1}; });
    service_->ReplaceNodes(nodes);
    service_->ReplacePods({});
    router_ = std::make_unique<Router>(*service_, metrics_, 4);
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = net::HttpServer::Start(options, router_->AsHandler());
    ASSERT_TRUE(server.ok()) << server.error();
    server_ = std::move(server).value();
    base_ = (options.tls_cert_file.empty() ? "http://127.0.0.1:" : "https://localhost:") +
            std::to_string(server_->port());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  std::unique_ptr<ExtenderService> service_;
  std::unique_ptr<net::HttpServer> server_;
  // After server_, so destroyed first: its bind pool is joined while the server still exists (a
  // bind's reply holds the connection, which must be closed before the server is freed; TSan
  // found the use after free).
  std::unique_ptr<Router> router_;
  std::string base_;
};

TEST_F(HttpTest, FilterAndBindOverHttp) {
  Start();
  const std::string filter = testing::NamesArgs(
      testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 8), {"trn-0", "trn-1"});
  Reply r = Request(base_ + "/filter", &filter);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["NodeNames"].size(), 2u);
  const std::string bind =
      R"({"PodName":"p","PodNamespace":"default","PodUID":"uid-p","Node":"trn-1"})";
  r = Request(base_ + "/bind", &bind);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["Error"], "");
  EXPECT_EQ(writer_.Bindings().at("uid-p").annotations.at("AWS_NEURON_IDS"), "0,1,2,3,4,5,6,7");
}

TEST_F(HttpTest, UrlPrefixWithAPathStillRoutesByVerb) {
  Start();
  const std::string filter =
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), {"trn-0"});
  EXPECT_EQ(Request(base_ + "/scheduler/filter", &filter).status, 200);
}

TEST_F(HttpTest, MalformedJsonIs400WithAnErrorBody) {
  Start();
  for (const std::string& bad :
       {std::string("{"), std::string("{\"Pod\":"), std::string("[1,2]"), std::string("\x01\x02"),
        std::string(R"({"Pod":{"metadata":{"name":5}},"NodeNames":[]})"), std::string("")}) {
    SCOPED_TRACE(bad);
    const Reply r = Request(base_ + "/filter", &bad);
    EXPECT_EQ(r.status, 400);
    EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(),
                ::testing::HasSubstr("malformed filter request"));
  }
  const std::string bad_bind = R"({"PodName":"p"})";
  EXPECT_EQ(Request(base_ + "/bind", &bad_bind).status, 400);
  // Still serving afterwards.
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 200);
}

TEST_F(HttpTest, BodyOverTheLimitIs413) {
  net::HttpServerOptions options;
  options.body_limit = 1024;
  Start(options);
  const std::string big(4096, ' ');
  EXPECT_EQ(Request(base_ + "/filter", &big).status, 413);
}

TEST_F(HttpTest, HealthReadinessAndMetrics) {
  Start();
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 200);
  EXPECT_EQ(Request(base_ + "/readyz", nullptr).status, 200);
  const std::string filter =
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4), {"trn-0"});
  ASSERT_EQ(Request(base_ + "/filter", &filter).status, 200);
  const Reply m = Request(base_ + "/metrics", nullptr);
  ASSERT_EQ(m.status, 200);
  EXPECT_THAT(m.body, ::testing::HasSubstr(
                          "toposched_extender_requests_total{code=\"200\",verb=\"filter\"} 1"));
  EXPECT_THAT(m.body, ::testing::HasSubstr("toposched_extender_request_duration_seconds_bucket"));
  EXPECT_EQ(Request(base_ + "/nothing", nullptr).status, 404);
}

TEST_F(HttpTest, ServesHttpsWithTheGivenCertificate) {
  const testing::TempDir dir;
  const testing::Outcome made = testing::RunCommand(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost -keyout '" +
      dir / "key.pem" + "' -out '" + dir / "cert.pem" + "'");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  net::HttpServerOptions options;
  options.tls_cert_file = dir / "cert.pem";
  options.tls_key_file = dir / "key.pem";
  Start(options);
  EXPECT_EQ(Request(base_ + "/healthz", nullptr, dir / "cert.pem").status, 200);
  // Without trusting the certificate the client refuses: the server really speaks TLS.
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 0);
}

TEST_F(HttpTest, ConcurrentFilterAndBindNeverDoubleBook) {
  Start();
  constexpr int kThreads = 8;
  constexpr int kPodsPerThread = 12;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPodsPerThread; ++i) {
        const std::string name = "p" + std::to_string(t) + "-" + std::to_string(i);
        const std::string uid = "uid-" + name;
        const int count = (i % 3 == 0) ? 4 : 1;
        const std::string filter =
            testing::NamesArgs(testing::PodJson(name, uid, "aws.amazon.com/neuron", count),
                               {"trn-0", "trn-1", "trn-2", "trn-3"});
        const Reply f = Request(base_ + "/filter", &filter);
        if (f.status != 200) continue;
        const auto passed = json::parse(f.body)["NodeNames"];
        if (passed.empty()) continue;
        const std::string node = passed[static_cast<size_t>(i) % passed.size()];
        const std::string bind = R"({"PodName":")" + name +
                                 R"(","PodNamespace":"default","PodUID":")" + uid +
                                 R"(","Node":")" + node + R"("})";
        Request(base_ + "/bind", &bind);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::map<std::string, std::set<int>> used;
  int bound = 0;
  for (const auto& [uid, binding] : writer_.Bindings()) {
    ++bound;
    std::string ids = binding.annotations.at("AWS_NEURON_IDS");
    size_t pos = 0;
    while (pos <= ids.size()) {
      const size_t comma = ids.find(',', pos);
      const int id = std::stoi(ids.substr(pos, comma - pos));
      EXPECT_TRUE(used[binding.node].insert(id).second)
          << "device " << id << " on " << binding.node << " given twice";
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  EXPECT_GT(bound, 20);
  EXPECT_EQ(service_->tracker().Stats().committed, bound);
}

TEST_F(HttpTest, AStandbyRefusesEveryVerbAndIsNotReady) {
  std::atomic<bool> leader{false};
  Start();
  router_->SetLeaderGate([&leader] { return leader.load(); });
  const std::string filter =
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4), {"trn-0"});
  const std::string bind =
      R"({"PodName":"p","PodNamespace":"default","PodUID":"uid-p","Node":"trn-0"})";
  for (const char* verb : {"/filter", "/prioritize", "/bind"}) {
    const Reply r = Request(base_ + verb, verb == std::string("/bind") ? &bind : &filter);
    EXPECT_EQ(r.status, 503) << verb;
    EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(),
                ::testing::HasSubstr("standby (another replica holds the leader lease)"));
  }
  const Reply ready = Request(base_ + "/readyz", nullptr);
  EXPECT_EQ(ready.status, 503);
  EXPECT_THAT(ready.body, ::testing::HasSubstr("standby"));
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 200);  // alive: never restarted for it
  EXPECT_TRUE(writer_.Bindings().empty());

  leader = true;  // takes over: serves at once, with the state it kept warm
  EXPECT_EQ(Request(base_ + "/readyz", nullptr).status, 200);
  EXPECT_EQ(Request(base_ + "/filter", &filter).status, 200);
  const Reply r = Request(base_ + "/bind", &bind);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["Error"], "");
  EXPECT_EQ(writer_.Bindings().count("uid-p"), 1u);
  EXPECT_THAT(
      Request(base_ + "/metrics", nullptr).body,
      ::testing::HasSubstr("toposched_extender_requests_total{code=\"503\",verb=\"bind\"} 1"));
}

TEST(LeaderMetrics, RoleAndTransitions) {
  Metrics metrics;
  metrics.SetLeader(true);
  metrics.CountLeaderTransition(true);
  metrics.CountLeaderTransition(false);
  metrics.CountLeaderTransition(true);
  const std::string text = metrics.Serialize();
  EXPECT_THAT(text, ::testing::HasSubstr("toposched_leader 1"));
  EXPECT_THAT(text, ::testing::HasSubstr("toposched_leader_transitions_total{to=\"leader\"} 2"));
  EXPECT_THAT(text, ::testing::HasSubstr("toposched_leader_transitions_total{to=\"standby\"} 1"));
}

}  // namespace
}  // namespace toposched::extender
