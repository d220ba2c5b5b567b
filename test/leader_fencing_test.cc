// Fenced leadership (issue 18, row 5), against the loopback fake API server: a standby stamps
// what it saw when its read returned, not before; a deleted Lease is not free for the taking; a
// Binding is never sent with less than the margin left of the lease, and is cut before a standby
// may lead; and the real binary drains an in-flight bind before it releases the Lease at SIGTERM,
// and lists pods afresh when it becomes the leader, before it turns Ready. Clocks are injected
// where the elector is driven directly; the binary is waited on through what it does.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "extender/api_writer.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/client.h"
#include "kube/decode.h"
#include "kube/duration.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "net/http_client.h"
#include "support/build_paths.h"
#include "support/fake_apiserver.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/wait.h"
#include "topology/catalog.h"

namespace toposched {
namespace {

using nlohmann::json;
using testing::FailureRule;
using testing::FakeApiServer;
using ::testing::HasSubstr;
using testing::WaitUntil;
using namespace std::chrono_literals;

constexpr int64_t kSecond = 1000000000;
constexpr char kLeasePath[] =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/k8s-neuron-scheduler";
constexpr char kLeasesPath[] = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

std::unique_ptr<kube::ApiClient> ClientOf(FakeApiServer& server) {
  kube::ClientConfig config;
  config.server = server.url();
  config.ca_pem = server.ca_pem();
  config.token = "test-token";
  config.request_timeout = 5s;
  return std::move(kube::ApiClient::Create(config)).value();
}

kube::LeaderElectionConfig ConfigFor(const std::string& identity) {
  kube::LeaderElectionConfig config;  // 15 s lease, 10 s renew deadline, 2 s retry
  config.lease_name = "k8s-neuron-scheduler";
  config.identity = identity;
  return config;
}

// A candidate driven by hand, with a steady clock the test sets.
class Candidate {
 public:
  Candidate(FakeApiServer& server, const std::string& identity)
      : client_(ClientOf(server)),
        elector_(
            *client_, ConfigFor(identity), [this] { return now_.load(); },
            [this] { return int64_t{1700000000} * kSecond + now_.load(); }) {}
  void At(double seconds) { now_ = static_cast<int64_t>(seconds * kSecond); }
  kube::LeaderElector& elector() { return elector_; }
  kube::ApiClient& client() { return *client_; }

 private:
  std::atomic<int64_t> now_{kSecond};
  std::unique_ptr<kube::ApiClient> client_;
  kube::LeaderElector elector_;
};

std::string LeaseHeldBy(const std::string& holder) {
  return R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"k8s-neuron-scheduler","namespace":"kube-system"},"spec":{"holderIdentity":")" +
         holder +
         R"(","leaseDurationSeconds":15,"renewTime":"2020-01-01T00:00:00.000000Z","leaseTransitions":4}})";
}

// The standby's record of "when did the lease last change" must be taken when its read returned:
// a holder may have renewed at any moment up to then. Stamping it before the read (when the GET
// left) makes a slow read eat into the margin between the old leader's deadline and the takeover.
TEST(LeaderFencing, TheStandbyStampsItsObservationAfterItsRead) {
  FakeApiServer server;
  server.PutLease(LeaseHeldBy("a"));
  auto client = ClientOf(server);
  // b's clock: its first read of the lease takes 3 s (1 s when it leaves, 4 s when it returns);
  // later reads take no time.
  std::atomic<int64_t> base{1 * kSecond};
  auto steady = [&] {
    const bool read_once = !server.RequestsMatching("GET", kLeasePath).empty();
    return base.load() + (read_once ? 3 * kSecond : 0);
  };
  kube::LeaderElector b(*client, ConfigFor("b"), steady, steady);
  ASSERT_FALSE(b.Step());  // sees a's record; it returned at 4 s
  base = 13 * kSecond;     // 16 s: 15 s after the read left, 12 s after it returned
  EXPECT_FALSE(b.Step()) << "b took the lease 12 s after it saw a's record, before the 15 s "
                            "lease duration: its observation was stamped when the read left";
  EXPECT_EQ(json::parse(*server.GetLeaseJson("kube-system",
                                             "k8s-neuron-scheduler"))["spec"]["holderIdentity"],
            "a");
  base = 16 * kSecond;  // 19 s: 15 s after the read returned
  EXPECT_TRUE(b.Step());
}

// An operator deletes the Lease while a leads. A standby that saw a holding it must not create a
// new one at once: a's gate stays open until its renew deadline, and its writes until then.
TEST(LeaderFencing, ADeletedLeaseIsNotTakenBeforeALeaseDuration) {
  FakeApiServer server;
  Candidate a(server, "a");
  Candidate b(server, "b");
  a.At(1);
  ASSERT_TRUE(a.elector().Step());
  b.At(1.5);
  ASSERT_FALSE(b.elector().Step());
  a.At(3);
  ASSERT_TRUE(a.elector().Step());  // renewed: a leads until 13 s
  b.At(3.5);
  ASSERT_FALSE(b.elector().Step());  // b saw the renewal at 3.5 s
  ASSERT_TRUE(server.DeleteLease("kube-system", "k8s-neuron-scheduler"));
  b.At(4);
  EXPECT_FALSE(b.elector().Step())
      << "b created the deleted Lease at once while a still leads (a's gate is open until 13 s)";
  a.At(4);
  EXPECT_TRUE(a.elector().IsLeader());
  b.At(18.4);  // < 15 s after b last saw a's record
  EXPECT_FALSE(b.elector().Step());
  EXPECT_EQ(server.RequestsMatching("POST", kLeasesPath).size(), 1u)
      << "only a's first create; b created the Lease within a lease duration of seeing a hold it";
  b.At(19.1);  // a lease duration after b first saw the Lease gone
  EXPECT_TRUE(b.elector().Step());
}

// The time budget of a Binding is bounded by the lease: it is never sent once less than the
// minimum budget is left before the leader's renew deadline (itself the lease duration minus the
// margin), and the request carries a timeout that ends by then, for the client and the server.
TEST(LeaderFencing, ABindingIsNeverSentWithLessThanTheMarginLeftOfTheLease) {
  FakeApiServer server;
  server.UpsertNode(testing::EksNodeJson("trn-0", "trn1.32xlarge", 16, 32));
  server.UpsertPod(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4));
  server.UpsertPod(testing::PodJson("q", "uid-q", "aws.amazon.com/neuron", 4));
  Candidate a(server, "a");
  a.At(1);
  ASSERT_TRUE(a.elector().Step());  // renewed at 1 s: a leads until 11 s; a standby from 16 s on
  auto client = ClientOf(server);
  // As `toposched extender --leader-elect` wires it: the gate, and the fence.
  extender::ApiClusterWriter writer(
      *client, [&] { return a.elector().IsLeader(); }, [&] { return a.elector().WriteBudget(); });

  a.At(10.5);  // 0.5 s before the renew deadline, 5.5 s before a standby may lead
  const Status late = writer.Bind("default", "p", "uid-p", "trn-0", {});
  EXPECT_FALSE(late.ok());
  if (!late.ok()) {
    EXPECT_THAT(late.error(), HasSubstr("lease"));
  }
  EXPECT_TRUE(server.RequestsMatching("POST", "/api/v1/namespaces/default/pods/p/binding").empty())
      << "a Binding was sent with 0.5 s left before the leader's renew deadline, and a 30 s "
         "request timeout: it can land long after a standby took over";

  a.At(5);  // 6 s left before the renew deadline
  const Status early = writer.Bind("default", "q", "uid-q", "trn-0", {});
  ASSERT_TRUE(early.ok()) << early.error();
  const auto posts = server.RequestsMatching("POST", "/api/v1/namespaces/default/pods/q/binding");
  ASSERT_EQ(posts.size(), 1u);
  std::smatch timeout;
  ASSERT_TRUE(std::regex_search(posts[0].query, timeout, std::regex("timeout=([0-9a-z.]+)")))
      << "the Binding carries no timeout for the API server: '" << posts[0].query << "'";
  auto parsed = kube::ParseDuration(timeout[1].str());
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_GT(*parsed, 0s);
  EXPECT_LE(*parsed, 6s) << "the write may land after the leader's renew deadline";
}

// A writer whose Bind waits until the test lets it go: a Binding in flight, under the test's
// control.
class HeldWriter final : public extender::ClusterWriter {
 public:
  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override {
    entered_.set_value();
    release_.get_future().wait();
    return inner_.Bind(ns, name, uid, node, annotations);
  }
  void Event(const std::string&, const std::string&, const std::string&, std::string_view,
             std::string_view, std::string_view) override {}
  void WaitUntilEntered() { entered_future_.wait(); }
  void Release() { release_.set_value(); }

 private:
  extender::OfflineClusterWriter inner_;
  std::promise<void> entered_;
  std::future<void> entered_future_ = entered_.get_future();
  std::promise<void> release_;
};

// The service's part of the shutdown order: once binds are stopped a new one is refused, and the
// drain waits for the one in flight, however long its write takes.
TEST(LeaderFencing, ShutdownRefusesNewBindsAndDrainsTheOneInFlight) {
  HeldWriter writer;
  extender::Metrics metrics;
  extender::ExtenderService service(
      topology::Catalog::Embedded(), extender::ExtenderOptions{}, writer, metrics,
      [] { return int64_t{kSecond}; }, [] { return int64_t{1743574052764891534}; });
  auto node = kube::DecodeNode(testing::EksNodeJson("trn-0", "trn1.32xlarge", 16, 32));
  ASSERT_TRUE(node.ok()) << node.error();
  service.ReplaceNodes({*node});
  service.ReplacePods({});
  for (const char* name : {"p", "q"}) {
    const simdjson::padded_string body(testing::NamesArgs(
        testing::PodJson(name, std::string("uid-") + name, "aws.amazon.com/neuron", 4), {"trn-0"}));
    auto args = extender::DecodeExtenderArgs(body);
    ASSERT_TRUE(args.ok()) << args.error();
    service.Filter(*args);
  }
  std::string answer;
  std::thread bind([&] { answer = service.Bind({"p", "default", "uid-p", "trn-0"}); });
  writer.WaitUntilEntered();
  service.StopBinds();
  EXPECT_FALSE(service.WaitForBinds(0ms)) << "a bind is still writing";
  EXPECT_THAT(json::parse(service.Bind({"q", "default", "uid-q", "trn-0"}))["Error"],
              HasSubstr("shutting down"));
  writer.Release();
  EXPECT_TRUE(service.WaitForBinds(10s));
  bind.join();
  EXPECT_EQ(json::parse(answer)["Error"], "");
}

// Informer::Relist: the list it asks for is sent after the call (a list already under way does not
// count), it is a quorum read, and it ends a watch in progress.
TEST(LeaderFencing, ARelistIsAFreshQuorumListSentAfterTheRequest) {
  FakeApiServer server;
  server.UpsertPod(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4));
  auto client = ClientOf(server);
  std::atomic<int> replaced{0};
  kube::Informer<kube::Pod> pods(
      *client, "/api/v1/pods",
      kube::InformerHandlers<kube::Pod>{[&](const std::vector<kube::Pod>&) { ++replaced; }, nullptr,
                                        nullptr});
  auto lists = [&] {
    size_t n = 0;
    for (const auto& r : server.RequestsMatching("GET", "/api/v1/pods")) {
      if (r.query.find("watch=") == std::string::npos) ++n;
    }
    return n;
  };
  // The first list is held up 300 ms by the server; the relist is asked while it is under way.
  server.InjectFailure({"GET", "/api/v1/pods", 0, 300ms, 1});
  pods.Start();
  ASSERT_TRUE(WaitUntil([&] { return lists() == 1; }, 5s));
  const uint64_t ticket = pods.Relist();
  ASSERT_TRUE(WaitUntil([&] { return pods.RelistsDelivered() >= ticket; }, 10s));
  EXPECT_EQ(lists(), 2u) << "the list under way when Relist was called counted as fresh";
  EXPECT_EQ(replaced.load(), 2);
  // With a watch open: it ends, and a new list follows.
  ASSERT_TRUE(server.WaitForOpenWatches(testing::Kind::kPod, 1));
  const uint64_t second = pods.Relist();
  ASSERT_TRUE(WaitUntil([&] { return pods.RelistsDelivered() >= second; }, 10s));
  EXPECT_EQ(lists(), 3u);
  for (const auto& r : server.RequestsMatching("GET", "/api/v1/pods")) {
    if (r.query.find("watch=") != std::string::npos) continue;
    EXPECT_EQ(r.query.find("resourceVersion"), std::string::npos) << r.query;
  }
  pods.Stop();
}

TEST(LeaderFencing, FlagsThatLeaveNoMarginOrNoWriteBudgetAreRefused) {
  kube::LeaderElectionConfig c = ConfigFor("me");
  EXPECT_TRUE(kube::ValidateLeaderElection(c).ok());
  c.renew_deadline = 14500ms;  // 0.5 s of margin
  auto refused = kube::ValidateLeaderElection(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("by at least 1s"));
  c.renew_deadline = 3s;  // 3 s - 1.2 x 2 s = 0.6 s for a write
  refused = kube::ValidateLeaderElection(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("for a write"));
  const testing::Outcome o = testing::RunToposched(
      "extender --leader-elect --leader-elect-renew-deadline 14500ms --kubeconfig /nonexistent");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.out + o.err, HasSubstr("by at least 1s"));
}

// `toposched extender` in a child process, its output in a file.
class ExtenderProcess {
 public:
  ExtenderProcess(const std::string& args, std::string log) : log_(std::move(log)) {
    const std::string command =
        "exec '" + toposched::testing::ToposchedBinary() + "' extender " + args;
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~ExtenderProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ExtenderProcess(const ExtenderProcess&) = delete;
  ExtenderProcess& operator=(const ExtenderProcess&) = delete;

  void Signal(int signal) const { kill(pid_, signal); }
  bool WaitForExit(std::chrono::milliseconds timeout) {
    exited_ = WaitUntil([&] { return waitpid(pid_, &status_, WNOHANG) == pid_; }, timeout);
    return exited_;
  }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  std::string log() const { return testing::ReadWholeFile(log_); }
  // The port it serves on, from its log; 0 until it says.
  int port() const {
    std::smatch match;
    const std::string text = log();
    if (!std::regex_search(text, match, std::regex("serving HTTPS? on 127\\.0\\.0\\.1:([0-9]+)"))) {
      return 0;
    }
    return std::stoi(match[1].str());
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

Result<net::HttpClientResponse> Call(net::HttpClient& http, int port, const char* method,
                                     const std::string& path, const std::string& body = "") {
  net::HttpClientRequest request;
  request.method = method;
  request.url = "http://127.0.0.1:" + std::to_string(port) + path;
  request.headers.push_back("Content-Type: application/json");
  request.body = body;
  request.timeout = 20s;
  return http.Send(request);
}

class LeaderFencingBinary : public ::testing::Test {
 protected:
  LeaderFencingBinary() {
    server_.UpsertNode(testing::EksNodeJson("trn-0", "trn1.32xlarge", 16, 32));
    kubeconfig_ = server_.WriteKubeconfig(dir_.path() + "/kubeconfig");
  }
  std::string Args() const {
    return "--kubeconfig " + kubeconfig_ +
           " --listen 127.0.0.1:0 --leader-elect --leader-elect-retry-period 200ms";
  }
  bool WaitForReady(ExtenderProcess& extender) {
    return WaitUntil(
        [&] {
          const int port = extender.port();
          if (port == 0) return false;
          auto ready = Call(http_, port, "GET", "/readyz");
          return ready.ok() && ready->status == 200;
        },
        30s, 20ms);
  }
  std::string LeaseHolder() {
    auto lease = server_.GetLeaseJson("kube-system", "k8s-neuron-scheduler");
    return lease ? json::parse(*lease)["spec"]["holderIdentity"].get<std::string>() : "";
  }

  // A lone extender (no --leader-elect) with a short write timeout and settle, and these pods
  // (16 devices each) in the fake API server.
  std::string LoneExtenderArgs(std::initializer_list<const char*> pods) {
    for (const char* pod : pods) {
      server_.UpsertPod(
          testing::PodJson(pod, std::string("uid-") + pod, "aws.amazon.com/neuron", 16));
    }
    return "--kubeconfig " + kubeconfig_ +
           " --listen 127.0.0.1:0 --bind-write-timeout 3s --restart-settle 4s";
  }

  FakeApiServer server_;
  testing::TempDir dir_;
  std::string kubeconfig_;
  net::HttpClient http_{net::HttpClientOptions{}};
};

// SIGTERM while a Binding is in flight: the Lease is handed over only once the bind returned, so
// the standby that takes over at once never serves beside a write of the old leader.
TEST_F(LeaderFencingBinary, SigtermReleasesTheLeaseOnlyAfterTheInFlightBindReturns) {
  const std::string pod = testing::PodJson("p1", "uid-p1", "aws.amazon.com/neuron", 4);
  server_.UpsertPod(pod);
  ExtenderProcess extender(Args(), dir_.path() + "/extender.log");
  ASSERT_TRUE(WaitForReady(extender)) << extender.log();
  ASSERT_FALSE(LeaseHolder().empty());
  const int port = extender.port();
  auto filtered = Call(http_, port, "POST", "/filter", testing::NamesArgs(pod, {"trn-0"}));
  ASSERT_TRUE(filtered.ok() && filtered->status == 200) << extender.log();

  // The API server takes 1.5 s to apply the Binding.
  server_.InjectFailure({"POST", "/api/v1/namespaces/default/pods/p1/binding", 0, 1500ms, 1});
  std::thread bind([&] {
    auto bound =
        Call(http_, port, "POST", "/bind",
             R"({"PodName":"p1","PodNamespace":"default","PodUID":"uid-p1","Node":"trn-0"})");
    if (bound.ok()) {
      EXPECT_EQ(bound->status, 200);
      EXPECT_EQ(json::parse(bound->body)["Error"], "") << bound->body;
    }
  });
  ASSERT_TRUE(WaitUntil(
      [&] {
        return !server_.RequestsMatching("POST", "/api/v1/namespaces/default/pods/p1/binding")
                    .empty();
      },
      10s));
  extender.Signal(SIGTERM);
  bind.join();
  ASSERT_TRUE(extender.WaitForExit(30s)) << extender.log();
  EXPECT_EQ(extender.exit_code(), 0) << extender.log();

  // The order, as the extender logged it (docs/reliability.md quotes it).
  std::stringstream log(extender.log());
  for (std::string line; std::getline(log, line);) {
    if (line.find("signal 15") != std::string::npos ||
        line.find("released lease") != std::string::npos ||
        line.find("bound default/p1") != std::string::npos) {
      std::cout << line << "\n";
    }
  }
  const json pod_now = json::parse(*server_.GetPodJson("default", "p1"));
  const json lease = json::parse(*server_.GetLeaseJson("kube-system", "k8s-neuron-scheduler"));
  EXPECT_EQ(pod_now["spec"]["nodeName"], "trn-0");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "") << "the lease was not handed over";
  const int64_t bound_at = std::stoll(pod_now["metadata"]["resourceVersion"].get<std::string>());
  const int64_t released_at = std::stoll(lease["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_GT(released_at, bound_at)
      << "the Lease was released (resourceVersion " << released_at
      << ") before the in-flight Binding landed (" << bound_at
      << "): a standby could lead while the old leader's write was still on its way\n"
      << extender.log();
}

// A new leader serves only from a list it made after it became the leader (a quorum read or a
// watch list: no resourceVersion), not from a watch that may be behind.
TEST_F(LeaderFencingBinary, ANewLeaderListsPodsAfreshBeforeItTurnsReady) {
  server_.PutLease(LeaseHeldBy(""));  // released by a previous leader: free to take
  ExtenderProcess extender(Args(), dir_.path() + "/extender.log");
  ASSERT_TRUE(WaitForReady(extender)) << extender.log();
  const auto requests = server_.requests();
  int took = -1;
  int fresh_list = -1;
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    const auto& r = requests[static_cast<size_t>(i)];
    if (r.method == "PUT" && r.path == kLeasePath && took < 0) took = i;
    // A LIST, or a watch list (the fake serves them, as 1.34+ does): both are consistent reads.
    const bool lists = r.query.find("watch=") == std::string::npos ||
                       r.query.find("sendInitialEvents=true") != std::string::npos;
    if (took >= 0 && r.method == "GET" && r.path == "/api/v1/pods" && lists) {
      fresh_list = i;
      EXPECT_EQ(r.query.find("resourceVersion="), std::string::npos)
          << "a takeover's list must be a quorum read: " << r.query;
    }
  }
  ASSERT_GE(took, 0) << "the extender never took the lease";
  EXPECT_GT(fresh_list, took) << "Ready as the new leader without listing pods after the takeover";
}

// A lone extender (no --leader-elect: the chart's default-scheduler mode) killed while its Binding
// of p1 is held by the API server, and restarted at once. The new process must not bind p2 onto
// the ids that Binding may still give p1: it refuses binds until the old write has landed (and is
// listed) or can no longer land. The held write is let go at the new process's first refusal (on
// the old code: right after p2 was bound), so it lands if it still may.
TEST_F(LeaderFencingBinary, ARestartedLoneExtenderNeverBindsBesideItsPredecessorsLateBinding) {
  const std::string p1 = testing::PodJson("p1", "uid-p1", "aws.amazon.com/neuron", 16);
  const std::string p2 = testing::PodJson("p2", "uid-p2", "aws.amazon.com/neuron", 16);
  const std::string args = LoneExtenderArgs({"p1", "p2"}) + " --restart-bind-hold 0s";
  FailureRule hold{"POST", "/api/v1/namespaces/default/pods/p1/binding", 0};
  hold.hold = true;
  server_.InjectFailure(hold);
  const std::string bind_p1 =
      R"({"PodName":"p1","PodNamespace":"default","PodUID":"uid-p1","Node":"trn-0"})";
  const std::string bind_p2 =
      R"({"PodName":"p2","PodNamespace":"default","PodUID":"uid-p2","Node":"trn-0"})";
  {
    ExtenderProcess first(args, dir_.path() + "/first.log");
    ASSERT_TRUE(WaitForReady(first)) << first.log();
    const int port = first.port();
    // Asked again as kube-scheduler would, until the Binding reaches the API server and is held
    // there (the call then hangs until the process dies).
    std::atomic<bool> stop{false};
    std::thread scheduler([&] {
      net::HttpClient http{net::HttpClientOptions{}};
      (void)WaitUntil(
          [&] {
            if (stop || server_.held() > 0) return true;
            (void)Call(http, port, "POST", "/filter", testing::NamesArgs(p1, {"trn-0"}));
            (void)Call(http, port, "POST", "/bind", bind_p1);
            return false;
          },
          60s, 50ms);
    });
    const bool held = WaitUntil([&] { return server_.held() == 1; }, 30s);
    first.Signal(SIGKILL);
    ASSERT_TRUE(first.WaitForExit(10s));
    stop = true;
    scheduler.join();
    ASSERT_TRUE(held) << "p1's Binding never reached the API server\n" << first.log();
  }
  ExtenderProcess second(args, dir_.path() + "/second.log");
  ASSERT_TRUE(WaitUntil([&] { return second.port() != 0; }, 30s)) << second.log();
  const int port = second.port();
  int refused_while_settling = 0;
  std::string answer;
  const bool answered = WaitUntil(
      [&] {
        (void)Call(http_, port, "POST", "/filter", testing::NamesArgs(p2, {"trn-0"}));
        auto bound = Call(http_, port, "POST", "/bind", bind_p2);
        if (!bound.ok() || bound->status != 200) return false;
        answer = json::parse(bound->body)["Error"].get<std::string>();
        if (answer.find("restart-settle") != std::string::npos) {
          if (refused_while_settling++ == 0) server_.ReleaseHeld();  // the old write may land now
          return false;
        }
        return answer.find("not yet listed") == std::string::npos;  // still starting
      },
      30s, 50ms);
  ASSERT_TRUE(answered) << second.log();
  server_.ReleaseHeld();  // on the old code, nothing refused: the old write lands now
  const json one = json::parse(*server_.GetPodJson("default", "p1"));
  const json two = json::parse(*server_.GetPodJson("default", "p2"));
  std::cout << "p1 on '" << one["spec"].value("nodeName", "") << "', p2 on '"
            << two["spec"].value("nodeName", "") << "'; p2's bind answered '" << answer
            << "' after " << refused_while_settling << " refusals\n";
  EXPECT_FALSE(one["spec"].value("nodeName", "") == "trn-0" &&
               two["spec"].value("nodeName", "") == "trn-0")
      << "p1 and p2 are both bound to trn-0's 16 devices (p1: "
      << one["metadata"]["annotations"].dump() << ", p2: " << two["metadata"]["annotations"].dump()
      << ")\n"
      << second.log();
  EXPECT_GT(refused_while_settling, 0) << "the restarted process bound at once";
}

// A bind that arrives while a lone extender settles is held (--restart-bind-hold) and answered
// once binds open, not refused: kube-scheduler 1.20 parks a pod whose bind failed for 60 s, so
// every pod bound in the first seconds after a start would wait a minute. A hold shorter than
// what is left of the settle still refuses, and says why.
TEST_F(LeaderFencingBinary, ALoneExtenderHoldsABindThatArrivesWhileItSettlesUntilBindsOpen) {
  const std::string p2 = testing::PodJson("p2", "uid-p2", "aws.amazon.com/neuron", 16);
  const std::string p3 = testing::PodJson("p3", "uid-p3", "aws.amazon.com/neuron", 16);
  const std::string base = LoneExtenderArgs({"p2", "p3"});
  // kube-scheduler's two calls for one pod; the bind's Error ("" once bound).
  auto filter_then_bind = [&](ExtenderProcess& extender, const std::string& pod,
                              const std::string& name) -> std::string {
    (void)Call(http_, extender.port(), "POST", "/filter", testing::NamesArgs(pod, {"trn-0"}));
    auto bound = Call(http_, extender.port(), "POST", "/bind",
                      R"({"PodName":")" + name + R"(","PodNamespace":"default","PodUID":"uid-)" +
                          name + R"(","Node":"trn-0"})");
    if (!bound.ok()) return "no answer: " + bound.error();
    return json::parse(bound->body)["Error"].get<std::string>();
  };
  {
    ExtenderProcess short_hold(base + " --restart-bind-hold 1s", dir_.path() + "/short.log");
    ASSERT_TRUE(WaitForReady(short_hold)) << short_hold.log();
    const std::string answer = filter_then_bind(short_hold, p3, "p3");
    EXPECT_NE(answer.find("--restart-bind-hold"), std::string::npos) << answer;
  }
  ExtenderProcess held(base, dir_.path() + "/held.log");
  ASSERT_TRUE(WaitForReady(held)) << held.log();
  EXPECT_EQ(filter_then_bind(held, p2, "p2"), "") << held.log();
  const json two = json::parse(*server_.GetPodJson("default", "p2"));
  EXPECT_EQ(two["spec"].value("nodeName", ""), "trn-0") << held.log();
  EXPECT_NE(held.log().find("binds open"), std::string::npos) << held.log();
}

}  // namespace
}  // namespace toposched
