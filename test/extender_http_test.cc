// The extender over real loopback HTTP(S): routing, status codes, body limits, TLS, metrics and
// concurrent filter+bind from many threads.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "extender/offline.h"
#include "extender/router.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "net/http_server.h"
#include "support/every_verdict.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/test_certs.h"
#include "support/wait.h"

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

Reply Request(const std::string& url, const std::string* post_body, const std::string& ca = "",
              const std::string& cert = "", const std::string& key = "") {
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
  if (!cert.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, cert.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY, key.c_str());
  }
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

// A plain TCP connection to 127.0.0.1:port, or -1.
int RawConnect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one HTTP response (header and Content-Length body) from fd; empty on EOF or error.
std::string ReadResponse(int fd) {
  std::string in;
  char chunk[4096];
  size_t need = std::string::npos;
  while (need == std::string::npos || in.size() < need) {
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return {};
    in.append(chunk, static_cast<size_t>(n));
    const size_t end = in.find("\r\n\r\n");
    if (need == std::string::npos && end != std::string::npos) {
      const size_t cl = in.find("Content-Length: ");
      need = end + 4 + (cl == std::string::npos || cl > end ? 0 : std::stoul(in.substr(cl + 16)));
    }
  }
  return in;
}

// Whether the server closes fd (end of stream) within `timeout`; bytes before the end are read
// and dropped. A bounded wait: a connection that stays open fails the caller's check.
bool ClosedByServer(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[512];
    const ssize_t n = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
}

long RssKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// A writer whose binds wait until released: a bind "in flight" for as long as a test needs.
class BlockingWriter final : public ClusterWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string&, const std::string&,
              const std::map<std::string, std::string>&) override {
    entered_.fetch_add(1);
    std::unique_lock<std::mutex> lock(mu_);
    release_.wait(lock, [this] { return released_; });
    return OkStatus();
  }
  void Event(const std::string&, const std::string&, const std::string&, std::string_view,
             std::string_view, std::string_view) override {}
  int entered() const { return entered_.load(); }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    release_.notify_all();
  }

 private:
  std::atomic<int> entered_{0};
  std::mutex mu_;
  std::condition_variable release_;
  bool released_ = false;
};

std::string BindBody(const std::string& name, const std::string& node) {
  return R"({"PodName":")" + name + R"(","PodNamespace":"default","PodUID":"uid-)" + name +
         R"(","Node":")" + node + R"("})";
}

class HttpTest : public ::testing::Test {
 protected:
  // A filter for pod `name` (uid-NAME, one device) on every node: what makes its bind go to the
  // writer.
  void Filter(const std::string& name) {
    const std::string filter =
        testing::NamesArgs(testing::PodJson(name, "uid-" + name, "aws.amazon.com/neuron", 1),
                           {"trn-0", "trn-1", "trn-2", "trn-3"});
    ASSERT_EQ(Request(base_ + "/filter", &filter).status, 200);
  }

  void Start(net::HttpServerOptions options = {}, ClusterWriter* writer = nullptr,
             int bind_threads = 4, int bind_queue = Router::kDefaultBindQueue) {
    std::vector<kube::Node> nodes;
    for (int i = 0; i < 4; ++i) {
      auto node = kube::DecodeNode(
          testing::EksNodeJson("trn-" + std::to_string(i), "trn1.32xlarge", 16, 32));
      ASSERT_TRUE(node.ok()) << node.error();
      nodes.push_back(*node);
    }
    service_ = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), testing::EveryVerdict(),
        writer != nullptr ? *writer : writer_, metrics_, [] { return int64_t{0}; },
        [] { return int64_t{1}; });
    service_->ReplaceNodes(nodes);
    service_->ReplacePods({});
    router_ = std::make_unique<Router>(*service_, metrics_, bind_threads, bind_queue);
    if (bind_clock_) router_->SetBindWaitLimit(bind_wait_limit_, bind_clock_);
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = net::HttpServer::Start(options, router_->AsHandler());
    ASSERT_TRUE(server.ok()) << server.error();
    server_ = std::move(server).value();
    router_->SetServerStats([s = server_.get()] { return s->stats(); });
    base_ = (options.tls_cert_file.empty() ? "http://127.0.0.1:" : "https://localhost:") +
            std::to_string(server_->port());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  OfflineClusterWriter writer_;
  // Set before Start: the router's --bind-wait-limit and the clock it reads the wait on.
  std::chrono::milliseconds bind_wait_limit_{0};
  NanoClock bind_clock_;
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

TEST_F(HttpTest, UnknownPathsAreCountedAsOneVerbOther) {
  Start();
  EXPECT_EQ(Request(base_ + "/no-such-thing", nullptr).status, 404);
  EXPECT_EQ(Request(base_ + "/another/unknown", nullptr).status, 404);
  const std::string body = "{}";
  EXPECT_EQ(Request(base_ + "/x/frobnicate", &body).status, 404);
  const std::string text = Request(base_ + "/metrics", nullptr).body;
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("no-such-thing")));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("frobnicate")));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "toposched_extender_requests_total{code=\"404\",verb=\"other\"} 3"));
}

// A client declaring a huge body and sending a few bytes costs what it sent, not what it declared
// (before: the declared Content-Length was allocated and zero-filled at once).
TEST_F(HttpTest, ADeclaredBodyIsNotReservedBeforeItArrives) {
  Start();
  const long before = RssKiB();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    const int fd = RawConnect(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                std::to_string(200 << 20) + "\r\n\r\n{\"Pod\":"));
    fds.push_back(fd);
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().bodies_in_flight == 4; },
                                 std::chrono::seconds(10)));
  // 64 KiB each at first: the buffer grows only as bytes arrive.
  EXPECT_LE(server_->stats().body_bytes, 4 * 64 * 1024);
  EXPECT_LT(RssKiB() - before, 64 * 1024)
      << "RSS grew by " << (RssKiB() - before) / 1024 << " MiB for 4 bodies of 7 bytes received";
  // 200 KiB more on one: its buffer doubles to 256 KiB, not to 200 MiB.
  ASSERT_TRUE(SendAll(fds[0], std::string(200 * 1024, ' ')));
  ASSERT_TRUE(
      testing::WaitUntil([&] { return server_->stats().body_bytes == (3 * 64 + 256) * 1024; },
                         std::chrono::seconds(10)))
      << server_->stats().body_bytes;
  for (int fd : fds) close(fd);
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().body_bytes == 0; },
                                 std::chrono::seconds(10)));
  EXPECT_EQ(server_->stats().bodies_in_flight, 0);
}

TEST_F(HttpTest, BodiesOverTheMemoryLimitOrTheCountAre503) {
  net::HttpServerOptions options;
  options.body_memory_limit = 1 << 20;
  options.max_bodies_in_flight = 2;
  Start(options);
  const std::string header =
      "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(900 * 1024) +
      "\r\n\r\n";
  const int a = RawConnect(server_->port());
  ASSERT_TRUE(SendAll(a, header + std::string(800 * 1024, ' ')));
  // a's buffer: 64, 128, 256, 512, then 900 KiB (its declared length, reached by doubling).
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().body_bytes == 900 * 1024; },
                                 std::chrono::seconds(10)));
  const int b = RawConnect(server_->port());
  ASSERT_TRUE(SendAll(b, header + std::string(100 * 1024, ' ')));  // 64 KiB fit, 128 do not
  const std::string refused = ReadResponse(b);
  EXPECT_THAT(refused, ::testing::HasSubstr("503"));
  EXPECT_THAT(refused, ::testing::HasSubstr("--body-memory-limit"));
  // The count: a holds one slot; two more bodies are one too many.
  const int c = RawConnect(server_->port());
  ASSERT_TRUE(SendAll(c, "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"));
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().bodies_in_flight == 2; },
                                 std::chrono::seconds(10)));
  const int d = RawConnect(server_->port());
  ASSERT_TRUE(SendAll(d, "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"));
  EXPECT_THAT(ReadResponse(d), ::testing::HasSubstr("--max-bodies-in-flight"));
  EXPECT_EQ(server_->stats().bodies_refused, 2u);
  // Health answers all along (no body, no slot).
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 200);
  for (int fd : {a, b, c, d}) close(fd);
}

// Over the waiting room's cap, the oldest connection that has sent nothing is closed for the new
// one; when every slot is held (here: plain HTTP connections that sent a request), a connection
// that speaks is closed at once.
TEST_F(HttpTest, ConnectionsOverTheCapAreClosed) {
  net::HttpServerOptions options;
  options.max_connections = 2;
  options.max_waiting_connections = 2;
  Start(options);
  const int a = RawConnect(server_->port());
  const int b = RawConnect(server_->port());
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().connections == 2; },
                                 std::chrono::seconds(10)));
  const int c = RawConnect(server_->port());
  ASSERT_GE(c, 0);
  EXPECT_TRUE(ClosedByServer(a)) << "the oldest waiting connection made room for the third";
  EXPECT_EQ(server_->stats().connections_evicted, 1u);
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int fd : {b, c}) {
    ASSERT_TRUE(SendAll(fd, get));
    EXPECT_THAT(ReadResponse(fd), ::testing::HasSubstr("200 OK"));
  }
  // A silent connection still waits (it costs no slot); once it speaks there is none for it.
  const int d = RawConnect(server_->port());
  ASSERT_GE(d, 0);
  EXPECT_FALSE(ClosedByServer(d, std::chrono::milliseconds(200))) << "waiting costs no slot";
  ASSERT_TRUE(SendAll(d, get));
  EXPECT_TRUE(ClosedByServer(d)) << "every slot is held: the speaking connection is closed";
  EXPECT_EQ(server_->stats().connections_refused, 1u);
  close(b);
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().connections == 1; },
                                 std::chrono::seconds(10)));
  EXPECT_EQ(Request(base_ + "/healthz", nullptr).status, 200);  // room again
  close(c);  // and room for the scrape, once the server has seen both closes
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().connections == 0; },
                                 std::chrono::seconds(10)));
  const std::string metrics = Request(base_ + "/metrics", nullptr).body;
  EXPECT_THAT(metrics, ::testing::HasSubstr(R"(toposched_http_refused_total{reason="evicted"} 1)"));
  EXPECT_THAT(metrics,
              ::testing::HasSubstr(R"(toposched_http_refused_total{reason="connections"} 1)"));
  for (int fd : {a, d}) close(fd);
}

// A body that does not arrive within --body-timeout is cut (the timeout is an option set short
// here; the test waits for the server to close, it measures no time).
TEST_F(HttpTest, ATricklingBodyIsCutAtTheBodyTimeout) {
  net::HttpServerOptions options;
  options.body_timeout = std::chrono::milliseconds(200);
  Start(options);
  const int fd = RawConnect(server_->port());
  ASSERT_TRUE(SendAll(fd, "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"));
  char byte = 0;
  EXPECT_LE(recv(fd, &byte, 1, 0), 0);
  close(fd);
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().connections == 0; },
                                 std::chrono::seconds(10)));
  EXPECT_EQ(server_->stats().read_timeouts, 1u);
  EXPECT_EQ(server_->stats().body_bytes, 0);
}

TEST_F(HttpTest, ABindBeyondTheQueueIsAnsweredBusy) {
  BlockingWriter writer;
  Start({}, &writer, /*bind_threads=*/1, /*bind_queue=*/2);
  for (const char* name : {"p0", "p1", "p2"}) Filter(name);
  std::vector<std::thread> binds;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; ++i) {
    binds.emplace_back([&, i] {
      const std::string bind = BindBody("p" + std::to_string(i), "trn-" + std::to_string(i));
      if (Request(base_ + "/bind", &bind).status == 200) ++ok;
    });
  }
  // One bind holds the thread, one waits for it: the queue is full.
  ASSERT_TRUE(
      testing::WaitUntil([&] { return router_->BindsPending() == 2; }, std::chrono::seconds(10)));
  const std::string third = BindBody("p2", "trn-2");
  const Reply busy = Request(base_ + "/bind", &third);
  EXPECT_EQ(busy.status, 503);
  EXPECT_THAT(json::parse(busy.body)["Error"].get<std::string>(),
              ::testing::HasSubstr("busy: 2 binds are already waiting"));
  EXPECT_THAT(Request(base_ + "/metrics", nullptr).body,
              ::testing::HasSubstr("toposched_extender_binds_pending 2"));
  writer.Release();
  for (auto& t : binds) t.join();
  EXPECT_EQ(ok.load(), 2);
  // A bind counts until its task ends, just after its answer is handed back.
  EXPECT_TRUE(router_->DrainBinds(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(router_->BindsPending(), 0);
}

// A bind that waited past --bind-wait-limit for the one bind thread is answered 503 and never
// reaches the writer; the one that held the thread (it waited not at all) is bound. The wait is
// read on a clock the test moves, not measured.
TEST_F(HttpTest, ABindThatWaitedPastTheLimitForAThreadIsRefusedUnwritten) {
  BlockingWriter writer;
  std::atomic<int64_t> now_ns{0};
  bind_wait_limit_ = std::chrono::seconds(9);
  bind_clock_ = [&now_ns] { return now_ns.load(); };
  Start({}, &writer, /*bind_threads=*/1);
  for (const char* name : {"p0", "p1"}) Filter(name);
  int first_status = 0;
  Reply second;
  std::thread first([&] {
    const std::string bind = BindBody("p0", "trn-0");
    first_status = Request(base_ + "/bind", &bind).status;
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return writer.entered() == 1; }, std::chrono::seconds(10)));
  std::thread waiting([&] {
    const std::string bind = BindBody("p1", "trn-1");
    second = Request(base_ + "/bind", &bind);
  });
  ASSERT_TRUE(
      testing::WaitUntil([&] { return router_->BindsPending() == 2; }, std::chrono::seconds(10)));
  now_ns = int64_t{10} * 1000 * 1000 * 1000;
  writer.Release();
  first.join();
  waiting.join();
  EXPECT_EQ(first_status, 200);
  EXPECT_EQ(second.status, 503);
  EXPECT_THAT(json::parse(second.body)["Error"].get<std::string>(),
              ::testing::HasSubstr("waited 10000 ms for a bind thread, past --bind-wait-limit"));
  EXPECT_EQ(writer.entered(), 1);
  EXPECT_THAT(Request(base_ + "/metrics", nullptr).body,
              ::testing::HasSubstr("toposched_binds_total{outcome=\"refused\"} 1"));
}

// Shutdown in the order the extender takes: stop accepting, drain, stop. The bind in flight is
// answered; a new connection is refused meanwhile.
TEST_F(HttpTest, StopAcceptingThenDrainAnswersTheBindInFlight) {
  BlockingWriter writer;
  Start({}, &writer);
  Filter("p");
  Reply reply;
  std::thread bind([&] {
    const std::string body = BindBody("p", "trn-0");
    reply = Request(base_ + "/bind", &body);
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return writer.entered() == 1; }, std::chrono::seconds(10)));
  server_->StopAccepting();
  EXPECT_LT(RawConnect(server_->port()), 0) << "a new connection after StopAccepting";
  // The bind (the filter's answer may still be finishing its write).
  EXPECT_TRUE(testing::WaitUntil([&] { return server_->stats().requests_in_flight == 1; },
                                 std::chrono::seconds(10)));
  EXPECT_FALSE(server_->Drain(std::chrono::steady_clock::now()));
  writer.Release();
  EXPECT_TRUE(server_->Drain(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  bind.join();
  EXPECT_EQ(reply.status, 200);
  server_->Stop();
}

// The server destroyed while a bind worker still holds its Responder (the extender's shutdown
// before: ~HttpServer, then ~Router joins the bind pool). Under ASan (the asan preset) this was a
// heap-use-after-free: the answer was posted into the freed io_context.
TEST_F(HttpTest, DestroyingTheServerWithABindInFlightIsSafe) {
  BlockingWriter writer;
  Start({}, &writer);
  Filter("p");
  Reply reply;
  std::thread bind([&] {
    const std::string body = BindBody("p", "trn-0");
    reply = Request(base_ + "/bind", &body);
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return writer.entered() == 1; }, std::chrono::seconds(10)));
  router_->SetServerStats(nullptr);
  server_.reset();  // a bind is in flight
  writer.Release();
  router_.reset();  // joins the bind pool: the bind answers into the stopped server
  bind.join();
  EXPECT_EQ(reply.status, 0) << "the answer was dropped with the server";
}

// With a client CA the verbs need a client certificate from it; probes do not.
TEST_F(HttpTest, ClientCertificatesAreVerified) {
  const testing::TestPki pki = testing::GenerateTestPki();
  const testing::TestPki other = testing::GenerateTestPki();
  const testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& pem) {
    std::ofstream(dir / name) << pem;
    return dir / name;
  };
  net::HttpServerOptions options;
  options.tls_cert_file = write("server.pem", pki.server_cert_pem);
  options.tls_key_file = write("server-key.pem", pki.server_key_pem);
  options.tls_client_ca_file = write("ca.pem", pki.ca_cert_pem);
  options.anonymous_paths = {"/healthz", "/readyz", "/metrics"};
  Start(options);
  const std::string ca = dir / "ca.pem";
  const std::string cert = write("client.pem", pki.client_cert_pem);
  const std::string key = write("client-key.pem", pki.client_key_pem);
  const std::string foreign_cert = write("other.pem", other.client_cert_pem);
  const std::string foreign_key = write("other-key.pem", other.client_key_pem);
  const std::string filter =
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), {"trn-0"});

  const Reply anonymous = Request(base_ + "/filter", &filter, ca);
  EXPECT_EQ(anonymous.status, 403);
  EXPECT_THAT(anonymous.body, ::testing::HasSubstr("client certificate"));
  EXPECT_EQ(Request(base_ + "/healthz", nullptr, ca).status, 200);
  EXPECT_EQ(Request(base_ + "/metrics", nullptr, ca).status, 200);
  EXPECT_EQ(Request(base_ + "/filter", &filter, ca, cert, key).status, 200);
  // A certificate from another CA fails the handshake: no HTTP status at all.
  EXPECT_EQ(Request(base_ + "/filter", &filter, ca, foreign_cert, foreign_key).status, 0);
  EXPECT_EQ(server_->stats().uncertified_refused, 1u);
}

// A curl handle kept between requests, as a keep-alive client (kubelet, a scraper) keeps its
// connection: each request reuses the connection unless the server closed it.
class KeepAliveClient {
 public:
  KeepAliveClient(std::string ca, std::string cert = "", std::string key = "")
      : curl_(curl_easy_init()), ca_(std::move(ca)), cert_(std::move(cert)), key_(std::move(key)) {}
  ~KeepAliveClient() { curl_easy_cleanup(curl_); }
  KeepAliveClient(const KeepAliveClient&) = delete;
  KeepAliveClient& operator=(const KeepAliveClient&) = delete;

  // The status (0: no answer) and whether this request opened a new connection.
  std::pair<long, bool> Get(const std::string& url) {
    std::string body;
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, Collect);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(curl_, CURLOPT_CAINFO, ca_.c_str());
    if (!cert_.empty()) {
      curl_easy_setopt(curl_, CURLOPT_SSLCERT, cert_.c_str());
      curl_easy_setopt(curl_, CURLOPT_SSLKEY, key_.c_str());
    }
    long status = 0;
    long connects = 0;
    if (curl_easy_perform(curl_) == CURLE_OK) {
      curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_getinfo(curl_, CURLINFO_NUM_CONNECTS, &connects);
    }
    return {status, connects > 0};
  }

 private:
  CURL* curl_;
  std::string ca_, cert_, key_;
};

// Issue 29, row 8: idle TCP connections that never start TLS and keep-alive probes without a
// client certificate held every connection slot until their 30 s timeouts, so the scheduler's
// /filter and kubelet's probes were refused. Now a connection that has not sent a byte waits in a
// bounded room of its own (the oldest closed for a newer one), and one without a certificate
// between requests gives its slot up to a newer one that spoke. The timeouts are set long here:
// only that handing over can let the last requests in.
TEST_F(HttpTest, IdleAndAnonymousConnectionsCannotTakeTheSlots) {
  const testing::TestPki pki = testing::GenerateTestPki();
  const testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& pem) {
    std::ofstream(dir / name) << pem;
    return dir / name;
  };
  net::HttpServerOptions options;
  options.tls_cert_file = write("server.pem", pki.server_cert_pem);
  options.tls_key_file = write("server-key.pem", pki.server_key_pem);
  options.tls_client_ca_file = write("ca.pem", pki.ca_cert_pem);
  options.anonymous_paths = {"/healthz", "/readyz", "/metrics"};
  options.max_connections = 5;
  options.max_waiting_connections = 4;
  options.header_timeout = std::chrono::minutes(5);
  options.handshake_timeout = std::chrono::minutes(5);
  Start(options);
  const std::string ca = dir / "ca.pem";
  const std::string cert = write("client.pem", pki.client_cert_pem);
  const std::string key = write("client-key.pem", pki.client_key_pem);

  // Five probes that keep their connections (kept alive while nobody needs their slots), then
  // more idle TCP connections than the waiting room holds.
  std::vector<std::unique_ptr<KeepAliveClient>> anonymous;
  for (int i = 0; i < 5; ++i) {
    anonymous.push_back(std::make_unique<KeepAliveClient>(ca));
    ASSERT_EQ(anonymous.back()->Get(base_ + "/healthz").first, 200);
  }
  const auto [first_status, first_reconnected] = anonymous.front()->Get(base_ + "/healthz");
  EXPECT_EQ(first_status, 200);
  EXPECT_FALSE(first_reconnected) << "an anonymous connection is kept alive when slots are free";
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(RawConnect(server_->port()));
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(ClosedByServer(idle[i])) << "idle connection " << i << " of 12, room for 4";
  }
  EXPECT_GE(server_->stats().connections_evicted, 8u);

  // The scheduler, with its certificate, gets in (an anonymous connection gives its slot up) and
  // keeps its connection.
  KeepAliveClient scheduler(ca, cert, key);
  EXPECT_EQ(scheduler.Get(base_ + "/metrics").first, 200);
  const std::string filter =
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), {"trn-0"});
  EXPECT_EQ(Request(base_ + "/filter", &filter, ca, cert, key).status, 200);
  // kubelet's probes, each on a new connection.
  EXPECT_EQ(Request(base_ + "/healthz", nullptr, ca).status, 200);
  EXPECT_EQ(Request(base_ + "/readyz", nullptr, ca).status, 200);
  // The anonymous clients still get answers, some on a new connection.
  int reconnects = 0;
  for (auto& client : anonymous) {
    const auto [status, reconnected] = client->Get(base_ + "/healthz");
    EXPECT_EQ(status, 200);
    reconnects += reconnected ? 1 : 0;
  }
  EXPECT_GT(reconnects, 0) << "slots were taken back from anonymous connections";
  const auto [status, reconnected] = scheduler.Get(base_ + "/metrics");
  EXPECT_EQ(status, 200);
  EXPECT_FALSE(reconnected) << "a certified connection is kept alive, never taken back";
  for (int fd : idle) {
    if (fd >= 0) close(fd);
  }
}

// accept() failing with EMFILE must not be retried in a loop. In a child process (its own
// RLIMIT_NOFILE): every descriptor is used, a connection waits in the backlog, and a client does
// 20 requests on a connection opened before; accept may fail once per pause, not thousands of
// times.
TEST(HttpAccept, BacksOffWhenOutOfDescriptors) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' runtimes need descriptors of their own (UBSan's vptr check reads an object's
  // type through a pipe): in a process out of descriptors they report false errors. The release
  // tier runs this test.
  GTEST_SKIP() << "needs a process without sanitizer runtimes (run in the release tier)";
#endif
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    struct CountingSink : spdlog::sinks::base_sink<std::mutex> {
      std::atomic<int> accept_warnings{0};
      void sink_it_(const spdlog::details::log_msg& m) override {
        if (std::string_view(m.payload.data(), m.payload.size()).rfind("accept:", 0) == 0)
          ++accept_warnings;
      }
      void flush_() override {}
    };
    auto sink = std::make_shared<CountingSink>();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("count", sink));
    net::HttpServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    // Long: within this test accept may be retried only when a connection closes.
    options.accept_backoff = std::chrono::hours(1);
    auto server = net::HttpServer::Start(options, [](net::HttpRequest&&, net::Responder r) {
      r({200, "text/plain", "ok\n"});
    });
    if (!server.ok()) _exit(10);
    const uint16_t port = (*server)->port();
    const int kept = RawConnect(port);  // served before descriptors run out
    const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    if (kept < 0 || !SendAll(kept, get) || ReadResponse(kept).empty()) _exit(11);
    const rlimit low{64, 64};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) _exit(12);
    std::vector<int> filler;
    for (int fd = dup(0); fd >= 0; fd = dup(0)) filler.push_back(fd);
    close(filler.back());  // one free: for the client's end of the next connection
    filler.pop_back();
    const int waiting = RawConnect(port);  // in the backlog; accept() has no descriptor for it
    if (waiting < 0 || !SendAll(waiting, get)) _exit(13);
    for (int i = 0; i < 20; ++i) {
      if (!SendAll(kept, get) || ReadResponse(kept).empty()) _exit(14);
    }
    const net::HttpServerStats stats = (*server)->stats();
    // A connection closing frees a descriptor: accepting resumes, the waiting one is served.
    close(kept);
    if (ReadResponse(waiting).find("200 OK") == std::string::npos) _exit(16);
    const std::string line = std::to_string(sink->accept_warnings.load()) + " " +
                             std::to_string(stats.accept_fd_exhausted) + " " +
                             std::to_string(stats.accept_pauses) + "\n";
    if (write(out[1], line.data(), line.size()) < 0) _exit(15);
    _exit(0);
  }
  close(out[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  char buf[64] = {};
  const ssize_t n = read(out[0], buf, sizeof buf - 1);
  close(out[0]);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child failed at step " << WEXITSTATUS(status);
  ASSERT_GT(n, 0);
  // "warnings fd_exhausted pauses": one failure, one pause, logged once (before: thousands).
  EXPECT_EQ(std::string(buf), "1 1 1\n");
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
