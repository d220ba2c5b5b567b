// Binding writes whose outcome is unknown (issue 18 item 2, row 4): a client timeout after the
// request was sent, a 5xx, a 504 from a proxy that did apply the write. The extender keeps the
// reservation and reads the pod back before it gives any id away; ids are freed only on a definite
// failure or when the pod is seen gone. Against the loopback fake API server (real TLS, real
// Binding objects, the real informers), and against a scripted writer for each read-back path.
#include <unistd.h>

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "extender/api_writer.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/client.h"
#include "kube/decode.h"
#include "kube/informer.h"
#include "kube/kubeconfig.h"
#include "support/fake_apiserver.h"
#include "support/temp_dir.h"
#include "support/wait.h"

namespace toposched::extender {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::FakeApiServer;
using testing::WaitUntil;

// One extender as `toposched extender` wires it, with a client whose request timeout is short
// (`request_timeout`) and a steady clock the test moves.
struct OnlineExtender {
  OnlineExtender(const std::string& kubeconfig, std::chrono::milliseconds request_timeout,
                 std::atomic<int64_t>& now) {
    auto config = kube::LoadKubeconfig(kubeconfig);
    EXPECT_TRUE(config.ok()) << config.error();
    config->request_timeout = request_timeout;
    auto made = kube::ApiClient::Create(*config);
    EXPECT_TRUE(made.ok()) << made.error();
    client = std::move(made).value();
    writer = std::make_unique<ApiClusterWriter>(*client);
    service = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), ExtenderOptions{}, *writer, metrics,
        [&now] { return now.load(); }, [] { return int64_t{1743574052764891534}; });
    nodes = std::make_unique<kube::Informer<kube::Node>>(
        *client, "/api/v1/nodes",
        kube::InformerHandlers<kube::Node>{
            [this](const std::vector<kube::Node>& all) { service->ReplaceNodes(all); },
            [this](const kube::Node& n) { service->UpsertNode(n); },
            [this](const kube::Node& n) { service->DeleteNode(n); }});
    pods = std::make_unique<kube::Informer<kube::Pod>>(
        *client, "/api/v1/pods",
        kube::InformerHandlers<kube::Pod>{
            [this](const std::vector<kube::Pod>& all) { service->ReplacePods(all); },
            [this](const kube::Pod& p) { service->UpsertPod(p); },
            [this](const kube::Pod& p) { service->DeletePod(p); }});
    nodes->Start();
    EXPECT_TRUE(nodes->WaitForSync(5s));
    pods->Start();
    EXPECT_TRUE(pods->WaitForSync(5s));
  }
  ~OnlineExtender() {
    pods->Stop();
    nodes->Stop();
  }
  std::string Bind(FakeApiServer& server, const std::string& name, int devices,
                   const std::string& node) {
    const std::string pod = testing::PodJson(name, "uid-" + name, "aws.amazon.com/neuron", devices);
    server.UpsertPod(pod);
    const simdjson::padded_string body(testing::NamesArgs(pod, {node}));
    auto args = DecodeExtenderArgs(body);
    EXPECT_TRUE(args.ok());
    (void)service->Filter(*args);  // the answer is not needed: filter makes the pod known
    return json::parse(service->Bind({name, "default", "uid-" + name, node}))["Error"];
  }

  Metrics metrics;
  std::unique_ptr<kube::ApiClient> client;
  std::unique_ptr<ApiClusterWriter> writer;
  std::unique_ptr<ExtenderService> service;
  std::unique_ptr<kube::Informer<kube::Node>> nodes;
  std::unique_ptr<kube::Informer<kube::Pod>> pods;
};

// The ids the API server has recorded for each pod bound to `node` (AWS_NEURON_IDS).
std::map<std::string, std::string> RecordedIds(const FakeApiServer& server,
                                               const std::vector<std::string>& names,
                                               const std::string& node) {
  std::map<std::string, std::string> out;
  for (const auto& name : names) {
    auto text = server.GetPodJson("default", name);
    if (!text) continue;
    const json pod = json::parse(*text);
    if (pod["spec"].value("nodeName", "") != node) continue;
    out[name] = pod["metadata"]["annotations"].value("AWS_NEURON_IDS", "");
  }
  return out;
}

class WriteFaultsOnlineTest : public ::testing::Test {
 protected:
  WriteFaultsOnlineTest() {
    server_.UpsertNode(testing::EksNodeJson("trn-1", "trn1.32xlarge", 16, 32));
    kubeconfig_ = server_.WriteKubeconfig(dir_.path() + "/kubeconfig");
  }
  FakeApiServer server_;
  testing::TempDir dir_;
  std::string kubeconfig_;
  std::atomic<int64_t> now_{0};
};

// Issue 18 row 4: the API server applies p's Binding 1.5 s after the client gave up (300 ms).
// Today p was rolled back at once and q was given the same 16 devices.
TEST_F(WriteFaultsOnlineTest, ABindingAppliedAfterTheClientGaveUpIsNeverGivenTwice) {
  OnlineExtender ext(kubeconfig_, 300ms, now_);
  server_.InjectFailure({"POST", "/api/v1/namespaces/default/pods/p/binding", 0, 1800ms, 1});
  EXPECT_FALSE(ext.Bind(server_, "p", 16, "trn-1").empty());
  // While p's write may still land, its ids stay held: q is refused.
  EXPECT_FALSE(ext.Bind(server_, "q", 16, "trn-1").empty());
  // p's write lands; afterwards exactly one pod is bound to the node's 16 devices.
  ASSERT_TRUE(WaitUntil([&] { return RecordedIds(server_, {"p"}, "trn-1").size() == 1; }, 5s));
  const auto bound = RecordedIds(server_, {"p", "q"}, "trn-1");
  EXPECT_EQ(bound.size(), 1u) << "p and q both bound to trn-1: " << bound.begin()->second;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto hold = ext.service->tracker().Find("uid-p");
        return hold && hold->state == tracker::HoldState::kCommitted;
      },
      5s));
  EXPECT_FALSE(ext.service->tracker().Find("uid-q").has_value());
}

// A 504 from a proxy (or the API server's own timeout) after the Binding was applied: the pod is
// read back at once, found bound as written, and kube-scheduler is told the bind succeeded.
TEST_F(WriteFaultsOnlineTest, ABindingAppliedButAnswered504IsCommittedFromTheReadBack) {
  OnlineExtender ext(kubeconfig_, 5s, now_);
  testing::FailureRule rule{"POST", "/api/v1/namespaces/default/pods/p/binding", 504, {}, 1};
  rule.apply_first = true;
  server_.InjectFailure(rule);
  EXPECT_EQ(ext.Bind(server_, "p", 16, "trn-1"), "");
  const auto hold = ext.service->tracker().Find("uid-p");
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->state, tracker::HoldState::kCommitted);
  EXPECT_FALSE(ext.Bind(server_, "q", 16, "trn-1").empty());
  EXPECT_EQ(RecordedIds(server_, {"p", "q"}, "trn-1").size(), 1u);
  EXPECT_EQ(server_.RequestsMatching("GET", "/api/v1/namespaces/default/pods/p").size(), 1u);
  EXPECT_THAT(ext.metrics.Serialize(),
              HasSubstr(R"(toposched_api_errors_total{operation="bind_unknown"} 1)"));
}

// A 500 that was not applied: the ids stay held while the write could still land, then the pod
// is read back unbound and they are released; q binds after.
TEST_F(WriteFaultsOnlineTest, A500NotAppliedIsRolledBackOnlyAfterTheReadBack) {
  OnlineExtender ext(kubeconfig_, 5s, now_);
  server_.InjectFailure({"POST", "/api/v1/namespaces/default/pods/p/binding", 500, {}, 1});
  EXPECT_THAT(ext.Bind(server_, "p", 16, "trn-1"), HasSubstr("500"));
  EXPECT_EQ(ext.service->tracker().Find("uid-p")->state, tracker::HoldState::kReserved);
  EXPECT_THAT(ext.Bind(server_, "q", 16, "trn-1"), HasSubstr("does not fit"));
  now_ += std::chrono::nanoseconds(61s).count();  // past --unknown-write-settle (60 s)
  EXPECT_EQ(ext.service->ResolveUnknownBinds(), 0u);
  EXPECT_FALSE(ext.service->tracker().Find("uid-p").has_value());
  EXPECT_EQ(ext.Bind(server_, "q", 16, "trn-1"), "");
}

// The classification, against real sockets: every answer a Binding can get.
TEST_F(WriteFaultsOnlineTest, EveryBindingAnswerIsClassified) {
  auto config = kube::LoadKubeconfig(kubeconfig_);
  ASSERT_TRUE(config.ok());
  config->request_timeout = 300ms;
  auto client = std::move(kube::ApiClient::Create(*config)).value();
  server_.UpsertPod(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1));
  const std::string path = "/api/v1/namespaces/default/pods/p/binding";
  auto write = [&] { return kube::WriteBinding(*client, "default", "p", "uid-p", "trn-1", {}); };

  for (int status : {500, 503, 504, 408}) {
    server_.InjectFailure({"POST", path, status, {}, 1});
    const auto r = write();
    EXPECT_EQ(r.outcome, kube::WriteOutcome::kUnknown) << status;
    EXPECT_EQ(r.http_status, status);
  }
  server_.InjectFailure({"POST", path, 0, 1s, 1});  // answered after the client gave up
  auto late = write();
  EXPECT_EQ(late.outcome, kube::WriteOutcome::kUnknown) << late.error;
  EXPECT_THAT(late.error, HasSubstr("outcome is unknown"));
  for (int status : {422, 403, 404}) {
    server_.InjectFailure({"POST", path, status, {}, 1});
    EXPECT_EQ(write().outcome, kube::WriteOutcome::kNotApplied) << status;
  }
  // The late write above landed meanwhile: the next one is a 409 conflict, not applied.
  ASSERT_TRUE(WaitUntil([&] { return RecordedIds(server_, {"p"}, "trn-1").size() == 1; }, 5s));
  auto conflict = write();
  EXPECT_EQ(conflict.outcome, kube::WriteOutcome::kNotApplied);
  EXPECT_TRUE(conflict.conflict());

  // Never sent: nothing listens on the port (connection refused).
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);  // the port is free again and nothing listens on it
  auto refused_config = *config;
  refused_config.server = "https://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto refused_client = std::move(kube::ApiClient::Create(refused_config)).value();
  auto refused = kube::WriteBinding(*refused_client, "default", "p", "uid-p", "trn-1", {});
  EXPECT_EQ(refused.outcome, kube::WriteOutcome::kNotApplied) << refused.error;
  EXPECT_THAT(refused.error, HasSubstr("not sent"));
}

// --- Each read-back path, against a scripted API server (the truth is a map of pods). ---

// The API server as the extender sees it: each Binding is answered as scripted, and the pod read
// back is whatever `truth` holds (a full pod: spec from PodJson, node and annotations as stored).
class ScriptedWriter : public ClusterWriter {
 public:
  enum class Answer {
    kApply,              // 201
    kApplyButAnswer504,  // applied, answered 504
    kApplyButAnswer409,  // applied by an earlier copy of this write: this one gets 409
    kConflict,           // 409, nothing stored (the pod is bound by someone else)
    kUnknownNotApplied,  // 500, not applied
    kNotApplied,         // 422: refused
  };

  Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override {
    return BindWithOutcome(ns, name, uid, node, annotations).ToStatus();
  }
  kube::WriteResult BindWithOutcome(
      const std::string&, const std::string& name, const std::string&, const std::string& node,
      const std::map<std::string, std::string>& annotations) override {
    std::lock_guard lock(mu);
    ++binds;
    last_written = annotations;
    switch (answer) {
      case Answer::kApply:
        Store(name, node, annotations);
        return {};
      case Answer::kApplyButAnswer504:
        Store(name, node, annotations);
        return {kube::WriteOutcome::kUnknown, 504, "binding: (HTTP 504): gateway timeout"};
      case Answer::kApplyButAnswer409:
        Store(name, node, annotations);
        return {kube::WriteOutcome::kNotApplied, 409, "binding: conflict (HTTP 409): assigned"};
      case Answer::kConflict:
        return {kube::WriteOutcome::kNotApplied, 409, "binding: conflict (HTTP 409): assigned"};
      case Answer::kUnknownNotApplied:
        return {kube::WriteOutcome::kUnknown, 500, "binding: (HTTP 500): etcdserver: timeout"};
      case Answer::kNotApplied:
        return {kube::WriteOutcome::kNotApplied, 422, "binding: (HTTP 422): invalid"};
    }
    return {};
  }
  Result<std::optional<kube::Pod>> ReadPod(const std::string&, const std::string& name) override {
    std::lock_guard lock(mu);
    ++reads;
    if (!read_error.empty()) return Error{read_error};
    auto it = truth.find(name);
    if (it == truth.end()) return std::optional<kube::Pod>();
    return std::optional<kube::Pod>(it->second);
  }
  void Event(const std::string&, const std::string&, const std::string&, std::string_view,
             std::string_view, std::string_view) override {}
  std::chrono::milliseconds MaxWriteTime() const override { return 40s; }

  // The API server applies `annotations` and the node to the pod (a Binding landing).
  void Store(const std::string& name, const std::string& node,
             const std::map<std::string, std::string>& annotations) {
    auto& pod = truth.at(name);
    pod.node_name = node;
    pod.annotations.insert(annotations.begin(), annotations.end());
  }

  std::mutex mu;
  Answer answer = Answer::kApply;
  std::string read_error;
  std::map<std::string, kube::Pod> truth;  // by name
  std::map<std::string, std::string> last_written;
  int binds = 0;
  int reads = 0;
};

class ReadBackTest : public ::testing::Test {
 protected:
  ReadBackTest() {
    ExtenderOptions options;
    options.reservation_timeout = 30s;
    options.unknown_write_settle = 60s;
    options.read_back_retry = 1s;
    service_ = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), options, writer_, metrics_, [this] { return now_.load(); },
        [] { return int64_t{1743574052764891534}; });
    std::vector<kube::Node> nodes;
    for (const char* name : {"trn-1", "trn-2"}) {
      auto node = kube::DecodeNode(testing::EksNodeJson(name, "trn1.32xlarge", 16, 32));
      EXPECT_TRUE(node.ok());
      nodes.push_back(*node);
    }
    service_->ReplaceNodes(nodes);
    service_->ReplacePods({});
  }

  // Creates the pod at the API server, filters it (which makes it known) and binds it to trn-1;
  // the error kube-scheduler gets.
  std::string Bind(const std::string& name, int devices, const std::string& node = "trn-1") {
    const std::string pod_json =
        testing::PodJson(name, "uid-" + name, "aws.amazon.com/neuron", devices);
    {
      std::lock_guard lock(writer_.mu);
      if (writer_.truth.count(name) == 0) {
        auto pod = kube::DecodePod(pod_json);
        EXPECT_TRUE(pod.ok());
        writer_.truth.emplace(name, *pod);
      }
    }
    const simdjson::padded_string body(testing::NamesArgs(pod_json, {node}));
    auto args = DecodeExtenderArgs(body);
    EXPECT_TRUE(args.ok());
    (void)service_->Filter(*args);  // the answer is not needed: filter makes the pod known
    return json::parse(service_->Bind({name, "default", "uid-" + name, node}))["Error"];
  }
  std::optional<tracker::HoldState> State(const std::string& uid) {
    auto hold = service_->tracker().Find(uid);
    if (!hold) return std::nullopt;
    return hold->state;
  }
  void Advance(std::chrono::milliseconds d) {
    now_ += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  // The API server applies the write that was answered unknown, late.
  void Land(const std::string& name) {
    std::lock_guard lock(writer_.mu);
    writer_.Store(name, "trn-1", writer_.last_written);
  }

  ScriptedWriter writer_;
  Metrics metrics_;
  std::atomic<int64_t> now_{1'000'000'000};
  std::unique_ptr<ExtenderService> service_;
};

TEST_F(ReadBackTest, AppliedButAnswered504IsCommittedAtOnce) {
  writer_.answer = ScriptedWriter::Answer::kApplyButAnswer504;
  EXPECT_EQ(Bind("p", 16), "");  // the read-back found it bound as written
  EXPECT_EQ(State("uid-p"), tracker::HoldState::kCommitted);
  EXPECT_EQ(service_->ResolveUnknownBinds(), 0u);
  writer_.answer = ScriptedWriter::Answer::kApply;
  EXPECT_THAT(Bind("q", 1), HasSubstr("does not fit"));
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr(R"(toposched_bind_read_backs_total{outcome="committed"} 1)"));
}

TEST_F(ReadBackTest, NotBoundIsHeldUntilTheWriteCanNoLongerLandThenRolledBack) {
  writer_.answer = ScriptedWriter::Answer::kUnknownNotApplied;
  EXPECT_THAT(Bind("p", 16), HasSubstr("not bound yet"));
  EXPECT_EQ(State("uid-p"), tracker::HoldState::kReserved);
  writer_.answer = ScriptedWriter::Answer::kApply;
  EXPECT_THAT(Bind("q", 1), HasSubstr("does not fit"));    // p's ids stay p's
  EXPECT_THAT(Bind("p", 16), HasSubstr("not yet known"));  // a retry waits for the truth
  EXPECT_EQ(writer_.binds, 1);  // q never fit, and p's retry was answered from its hold
  Advance(45s);
  service_->ExpireReservations();
  EXPECT_EQ(State("uid-p"), tracker::HoldState::kReserved);  // read back: too early to tell
  Advance(16s);                                              // 61 s: the write can no longer land
  service_->ExpireReservations();
  EXPECT_FALSE(State("uid-p").has_value());
  EXPECT_EQ(Bind("q2", 16), "");
}

TEST_F(ReadBackTest, AWriteThatLandsLateIsCommittedWhenReadBack) {
  writer_.answer = ScriptedWriter::Answer::kUnknownNotApplied;
  EXPECT_THAT(Bind("p", 16), HasSubstr("its ids stay held"));
  Advance(5s);
  Land("p");  // applied after all, 5 s late
  EXPECT_EQ(service_->ResolveUnknownBinds(), 0u);
  EXPECT_EQ(State("uid-p"), tracker::HoldState::kCommitted);
  writer_.answer = ScriptedWriter::Answer::kApply;
  EXPECT_THAT(Bind("q", 1), HasSubstr("does not fit"));
}

TEST_F(ReadBackTest, APodSeenGoneIsReleasedAtOnce) {
  writer_.answer = ScriptedWriter::Answer::kUnknownNotApplied;
  EXPECT_FALSE(Bind("p", 16).empty());
  {
    std::lock_guard lock(writer_.mu);
    writer_.truth.erase("p");  // deleted
  }
  Advance(2s);
  EXPECT_EQ(service_->ResolveUnknownBinds(), 0u);
  EXPECT_FALSE(State("uid-p").has_value());
}

TEST_F(ReadBackTest, APodRecreatedUnderItsNameIsReleased) {
  writer_.answer = ScriptedWriter::Answer::kUnknownNotApplied;
  EXPECT_FALSE(Bind("p", 16).empty());
  {
    std::lock_guard lock(writer_.mu);
    writer_.truth.at("p").uid = "uid-p-again";
  }
  Advance(2s);
  EXPECT_EQ(service_->ResolveUnknownBinds(), 0u);
  EXPECT_FALSE(State("uid-p").has_value());
}

TEST_F(ReadBackTest, AnUnreadablePodKeepsItsHoldUntilADefiniteAnswer) {
  writer_.answer = ScriptedWriter::Answer::kUnknownNotApplied;
  {
    std::lock_guard lock(writer_.mu);
    writer_.read_error = "GET pods/p: (HTTP 503): the server is currently unable";
  }
  EXPECT_THAT(Bind("p", 16), HasSubstr("cannot be read back"));
  for (int i = 0; i < 20; ++i) {  // 20 minutes, far past every deadline
    Advance(60s);
    service_->ExpireReservations();
    ASSERT_EQ(State("uid-p"), tracker::HoldState::kReserved) << "minute " << i;
  }
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr(R"(toposched_api_errors_total{operation="bind_read_back"})"));
  {
    std::lock_guard lock(writer_.mu);
    writer_.read_error.clear();  // readable again, and not bound
  }
  Advance(60s);
  service_->ExpireReservations();
  EXPECT_FALSE(State("uid-p").has_value());
}

TEST_F(ReadBackTest, ARefusedWriteIsRolledBackWithoutReadingBack) {
  writer_.answer = ScriptedWriter::Answer::kNotApplied;
  EXPECT_THAT(Bind("p", 16), HasSubstr("422"));
  EXPECT_FALSE(State("uid-p").has_value());
  EXPECT_EQ(writer_.reads, 0);
}

TEST_F(ReadBackTest, A409ForAPodAlreadyBoundWithOurRecordIsCommitted) {
  writer_.answer = ScriptedWriter::Answer::kApplyButAnswer409;
  EXPECT_EQ(Bind("p", 16), "");
  EXPECT_EQ(State("uid-p"), tracker::HoldState::kCommitted);
  EXPECT_EQ(writer_.reads, 1);
}

TEST_F(ReadBackTest, A409ForAPodBoundByAnotherWriteReleasesOurs) {
  {
    auto pod = kube::DecodePod(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 16));
    ASSERT_TRUE(pod.ok());
    pod->node_name = "trn-2";  // bound by another writer (another replica, an old leader)
    std::lock_guard lock(writer_.mu);
    writer_.truth.emplace("p", *pod);
  }
  writer_.answer = ScriptedWriter::Answer::kConflict;
  EXPECT_THAT(Bind("p", 16, "trn-1"), HasSubstr("by another write"));
  EXPECT_EQ(writer_.reads, 1);
  const auto hold = service_->tracker().Find("uid-p");
  EXPECT_TRUE(!hold || hold->allocation.node == "trn-2");
  writer_.answer = ScriptedWriter::Answer::kApply;
  EXPECT_EQ(Bind("q", 16, "trn-1"), "");  // ours on trn-1 were released
}

}  // namespace
}  // namespace toposched::extender
