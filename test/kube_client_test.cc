// The API client against the loopback fake API server over TLS (kube/client.h).
#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "kube/client.h"
#include "kube/decode.h"
#include "support/fake_apiserver.h"
#include "support/pods.h"
#include "support/temp_dir.h"
#include "support/test_certs.h"
#include "support/wait.h"

namespace toposched::kube {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using toposched::testing::FailureRule;
using toposched::testing::FakeApiServer;
using toposched::testing::Kind;
using toposched::testing::RecordedRequest;
using toposched::testing::TempDir;
using toposched::testing::TooOldMode;

std::string PodJson(const std::string& ns, const std::string& name, const std::string& uid,
                    std::map<std::string, std::string> annotations = {}) {
  return testing::PodJson(testing::PodJsonSpec{
      .name = name, .uid = uid, .ns = ns, .count = 2, .annotations = std::move(annotations)});
}

ClientConfig ConfigFor(const FakeApiServer& server) {
  ClientConfig config;
  config.server = server.url();
  config.ca_pem = server.ca_pem();
  config.token = "test-token";
  config.request_timeout = std::chrono::seconds(5);
  return config;
}

std::unique_ptr<ApiClient> ClientFor(const FakeApiServer& server) {
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(ConfigFor(server));
  EXPECT_TRUE(client.ok()) << client.error();
  return client.ok() ? std::move(*client) : nullptr;
}

Pod StoredPod(const FakeApiServer& server, const std::string& ns, const std::string& name) {
  std::optional<std::string> json = server.GetPodJson(ns, name);
  EXPECT_TRUE(json.has_value()) << ns << "/" << name;
  if (!json) return {};
  Result<Pod> pod = DecodePod(*json);
  EXPECT_TRUE(pod.ok()) << pod.error();
  return pod.ok() ? *pod : Pod{};
}

TEST(KubeClientTest, ListsPodsOverTlsWithTokenAndReusesTheConnection) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "a", "uid-a"));
  server.UpsertPod(PodJson("ml", "b", "uid-b"));
  server.UpsertPod(PodJson("web", "c", "uid-c"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 5; ++i) {
    Result<HttpResponse> response = client->Get("/api/v1/pods");
    ASSERT_TRUE(response.ok()) << response.error();
    ASSERT_EQ(response->status, 200) << response->body;
    Result<ObjectList<Pod>> pods = DecodePodList(response->body);
    ASSERT_TRUE(pods.ok()) << pods.error();
    ASSERT_EQ(pods->items.size(), 3u);
    EXPECT_EQ(pods->items[0].containers[0].limits.at("aws.amazon.com/neuron"), 2);
    EXPECT_EQ(pods->resource_version, std::to_string(server.resource_version()));
  }
  // Keep-alive: five requests, one TLS connection.
  EXPECT_EQ(server.connections_accepted(), 1);
  const std::vector<RecordedRequest> requests = server.requests();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[0].authorization, "Bearer test-token");

  Result<HttpResponse> one = client->Get("/api/v1/namespaces/web/pods/c");
  ASSERT_TRUE(one.ok()) << one.error();
  EXPECT_EQ(one->status, 200);
  Result<HttpResponse> missing = client->Get("/api/v1/namespaces/web/pods/zzz");
  ASSERT_TRUE(missing.ok()) << missing.error();
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(StatusMessage(missing->body), "pods \"zzz\" not found");
}

TEST(KubeClientTest, BadTokenIsA401NotATransportError) {
  FakeApiServer server;
  ClientConfig config = ConfigFor(server);
  config.token = "wrong";
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(response.ok()) << response.error();
  EXPECT_EQ(response->status, 401);
}

TEST(KubeClientTest, WrongCaIsRejectedAndInsecureSkipsVerification) {
  FakeApiServer server;
  FakeApiServer other;
  ClientConfig config = ConfigFor(server);
  config.ca_pem = other.ca_pem();
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.error(), HasSubstr("certificate"));
  EXPECT_TRUE(server.requests().empty());

  config.insecure_skip_tls_verify = true;
  client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  response = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(response.ok()) << response.error();
  EXPECT_EQ(response->status, 200);
}

TEST(KubeClientTest, TlsServerNameIsWhatTheCertificateMustMatch) {
  FakeApiServer server;
  ClientConfig config = ConfigFor(server);
  config.tls_server_name = toposched::testing::kFakeServerDnsName;
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(response.ok()) << response.error();
  EXPECT_EQ(response->status, 200);

  config.tls_server_name = "not-in-the-certificate.test";
  client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  response = (*client)->Get("/api/v1/nodes");
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.error(), HasSubstr("not-in-the-certificate.test"));
}

TEST(KubeClientTest, ClientCertificateAuthenticatesWithoutToken) {
  FakeApiServer server;
  ClientConfig config = ConfigFor(server);
  config.token.clear();
  config.client_cert_pem = server.client_cert_pem();
  config.client_key_pem = server.client_key_pem();
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(response.ok()) << response.error();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(server.requests().at(0).authorization, "");
}

TEST(KubeClientTest, ConfigErrorsAreReported) {
  ClientConfig config;
  config.server = "ftp://example.test";
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.error(), HasSubstr("http or https"));
  config.server = "https://127.0.0.1:1";
  config.token = "bad\r\nX-Injected: 1";
  client = ApiClient::Create(config);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.error(), HasSubstr("control characters"));
}

TEST(KubeClientTest, ConnectionRefusedIsATransportError) {
  int port;
  {
    FakeApiServer gone;
    port = gone.port();
  }
  ClientConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(port);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.error(), HasSubstr("GET https://127.0.0.1:"));
}

// Runs a Watch on its own thread, collecting lines.
class WatchRunner {
 public:
  WatchRunner(ApiClient& client, std::string path, int stop_after_lines = 0)
      : thread_([this, &client, path = std::move(path), stop_after_lines] {
          result_ = client.Watch(
              path,
              [this, stop_after_lines](std::string_view line) {
                std::lock_guard<std::mutex> lock(mutex_);
                lines_.emplace_back(line);
                return stop_after_lines == 0 || static_cast<int>(lines_.size()) < stop_after_lines;
              },
              stop_);
          done_ = true;
        }) {}
  ~WatchRunner() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void Stop() { stop_ = true; }
  // Waits (bounded) for the watch to return.
  bool WaitDone(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    toposched::testing::WaitUntil([&] { return done_.load(); }, timeout,
                                  std::chrono::milliseconds(2));
    if (done_ && thread_.joinable()) thread_.join();
    return done_;
  }
  bool WaitLines(size_t count, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return toposched::testing::WaitUntil([&] { return lines().size() >= count; }, timeout,
                                         std::chrono::milliseconds(2));
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  const Result<long>& result() const { return result_; }  // NOLINT(google-runtime-int)

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  Result<long> result_ = Error{"not run"};  // NOLINT(google-runtime-int)
  std::thread thread_;
};

TEST(KubeClientTest, WatchStreamsEventsLineByLineEvenWhenSplitAcrossChunks) {
  FakeApiServer server;
  const int64_t start = server.UpsertPod(PodJson("ml", "a", "uid-a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  WatchRunner watch(*client, "/api/v1/pods?watch=1&resourceVersion=" + std::to_string(start));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));

  // A pod much larger than one TLS record or curl buffer arrives as one line.
  const std::string big(300 * 1024, 'x');
  server.UpsertPod(PodJson("ml", "big", "uid-big", {{"blob", big}}));
  server.DeletePod("ml", "a");
  server.SendBookmark(Kind::kPod);
  ASSERT_TRUE(watch.WaitLines(3));
  const std::vector<std::string> lines = watch.lines();
  Result<WatchEvent<Pod>> added = DecodePodWatchEvent(lines[0]);
  ASSERT_TRUE(added.ok()) << added.error();
  EXPECT_EQ(added->type, WatchEventType::kAdded);
  EXPECT_EQ(added->object.annotations.at("blob").size(), big.size());
  Result<WatchEvent<Pod>> deleted = DecodePodWatchEvent(lines[1]);
  ASSERT_TRUE(deleted.ok()) << deleted.error();
  EXPECT_EQ(deleted->type, WatchEventType::kDeleted);
  EXPECT_EQ(deleted->object.name, "a");
  Result<WatchEvent<Pod>> bookmark = DecodePodWatchEvent(lines[2]);
  ASSERT_TRUE(bookmark.ok()) << bookmark.error();
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_EQ(bookmark->resource_version, std::to_string(server.resource_version()));

  // The server ending the stream ends the call with its status.
  server.EndWatches(Kind::kPod);
  ASSERT_TRUE(watch.WaitDone());
  ASSERT_TRUE(watch.result().ok()) << watch.result().error();
  EXPECT_EQ(*watch.result(), 200);
}

TEST(KubeClientTest, WatchReplaysFromResourceVersionAndStopsWhenTheConsumerSaysSo) {
  FakeApiServer server;
  const int64_t before = server.resource_version();
  server.UpsertPod(PodJson("ml", "a", "uid-a"));
  server.UpsertPod(PodJson("ml", "b", "uid-b"));
  server.UpsertPod(PodJson("ml", "c", "uid-c"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  WatchRunner watch(*client, "/api/v1/pods?watch=1&resourceVersion=" + std::to_string(before),
                    /*stop_after_lines=*/2);
  ASSERT_TRUE(watch.WaitDone());
  ASSERT_TRUE(watch.result().ok()) << watch.result().error();
  EXPECT_EQ(*watch.result(), 200);
  EXPECT_EQ(watch.lines().size(), 2u);
}

TEST(KubeClientTest, WatchStopsPromptly) {
  FakeApiServer server;
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  WatchRunner watch(*client, "/api/v1/nodes?watch=1");
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kNode, 1));
  // The server has the watch open, but the client may not have read the answer's headers yet (a
  // stop then returns status 0): a first event read proves the stream is established.
  server.SendBookmark(Kind::kNode);
  ASSERT_TRUE(watch.WaitLines(1));
  watch.Stop();
  // An open stream that sends nothing more must still end on stop (the client polls `stop`);
  // how fast is the benches' business, so the bound is only there to keep the test finite.
  ASSERT_TRUE(watch.WaitDone(std::chrono::seconds(10)));
  ASSERT_TRUE(watch.result().ok()) << watch.result().error();
  EXPECT_EQ(*watch.result(), 200);
}

TEST(KubeClientTest, WatchTooOldAsHttp410DeliversNoLines) {
  FakeApiServer server;
  server.set_too_old_mode(TooOldMode::kHttp410);
  server.UpsertPod(PodJson("ml", "a", "uid-a"));
  server.CompactHistory();
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  WatchRunner watch(*client, "/api/v1/pods?watch=1&resourceVersion=1");
  ASSERT_TRUE(watch.WaitDone());
  ASSERT_TRUE(watch.result().ok()) << watch.result().error();
  EXPECT_EQ(*watch.result(), 410);
  EXPECT_TRUE(watch.lines().empty());
}

TEST(KubeClientTest, WatchDroppedMidStreamIsATransportError) {
  FakeApiServer server;
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  WatchRunner watch(*client, "/api/v1/pods?watch=1");
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.DropWatchConnections(Kind::kPod);
  ASSERT_TRUE(watch.WaitDone());
  EXPECT_FALSE(watch.result().ok());
}

TEST(KubeClientTest, BindCarriesAnnotationsAndKeepsThePodsOthers) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "train-0", "uid-1", {{"keep", "me"}}));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  claims::AllocationRecord record{
      "node-1", "trn1.32xlarge", {{"main", "aws.amazon.com/neuron", {4, 5}}}};
  auto annotations = claims::AllocationAnnotations(record, 1743574052764891534);
  annotations["odd \"key\""] = "line\nbreak \\ \u00e9";
  Status bound = BindPod(*client, "ml", "train-0", "uid-1", "node-1", annotations);
  ASSERT_TRUE(bound.ok()) << bound.error();

  const Pod pod = StoredPod(server, "ml", "train-0");
  EXPECT_EQ(pod.node_name, "node-1");
  EXPECT_EQ(pod.annotations.at("keep"), "me");
  EXPECT_EQ(pod.annotations.at("AWS_NEURON_IDS"), "4,5");
  EXPECT_EQ(pod.annotations.at("NEURON_ALLOCATED"), "false");
  EXPECT_EQ(pod.annotations.at("odd \"key\""), "line\nbreak \\ \u00e9");
  Result<claims::AllocationRecord> parsed =
      claims::ParseAllocationRecord(pod.annotations.find(claims::kAnnotationRecord)->second);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(*parsed, record);

  const auto bindings =
      server.RequestsMatching("POST", "/api/v1/namespaces/ml/pods/train-0/binding");
  ASSERT_EQ(bindings.size(), 1u);
  EXPECT_EQ(bindings[0].content_type, "application/json");
  simdjson::dom::parser parser;
  simdjson::dom::element body;
  ASSERT_EQ(parser.parse(bindings[0].body).get(body), simdjson::SUCCESS);
  std::string_view value;
  ASSERT_EQ(body["kind"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "Binding");
  ASSERT_EQ(body["metadata"]["uid"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "uid-1");
  ASSERT_EQ(body["target"]["kind"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "Node");
  ASSERT_EQ(body["target"]["name"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "node-1");

  // Binding again is a conflict with the server's explanation.
  Status again = BindPod(*client, "ml", "train-0", "uid-1", "node-2", {});
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.error(), HasSubstr("409"));
  EXPECT_THAT(again.error(), HasSubstr("already assigned to node \"node-1\""));
}

TEST(KubeClientTest, BindRefusesARecreatedPodAndReportsMissingPods) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "p", "uid-new"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Status stale = BindPod(*client, "ml", "p", "uid-old", "node-1", {});
  ASSERT_FALSE(stale.ok());
  EXPECT_THAT(stale.error(), HasSubstr("409"));
  EXPECT_THAT(stale.error(), HasSubstr("Precondition failed"));
  EXPECT_EQ(StoredPod(server, "ml", "p").node_name, "");

  Status missing = BindPod(*client, "ml", "nope", "uid", "node-1", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr("not found (HTTP 404)"));
  EXPECT_THAT(missing.error(), HasSubstr("pods \"nope\" not found"));
}

TEST(KubeClientTest, InjectedServerErrorsAndConflictsBecomeErrors) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "p", "uid-1"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  server.InjectFailure(FailureRule{"POST", "/api/v1/namespaces/ml/pods/p/binding", 500});
  Status failed = BindPod(*client, "ml", "p", "uid-1", "node-1", {});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error(), HasSubstr("HTTP 500"));
  EXPECT_THAT(failed.error(), HasSubstr("injected failure"));
  server.InjectFailure(FailureRule{"PATCH", "/api/v1/namespaces/ml/pods/p", 409});
  Status conflict = PatchPodAnnotations(*client, "ml", "p", {{"a", "b"}});
  ASSERT_FALSE(conflict.ok());
  EXPECT_THAT(conflict.error(), HasSubstr("conflict (HTTP 409)"));
  // Each rule fires once: the retry succeeds.
  EXPECT_TRUE(BindPod(*client, "ml", "p", "uid-1", "node-1", {}).ok());
}

TEST(KubeClientTest, SlowServerHitsTheRequestTimeout) {
  FakeApiServer server;
  ClientConfig config = ConfigFor(server);
  config.request_timeout = std::chrono::milliseconds(300);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.error();
  server.InjectFailure(FailureRule{"GET", "/api/v1/nodes", 0, std::chrono::seconds(3)});
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> response = (*client)->Get("/api/v1/nodes");
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.error(), HasSubstr("imed out"));
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000));
  // The next request (new connection) works.
  response = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(response.ok()) << response.error();
  EXPECT_EQ(response->status, 200);
}

TEST(KubeClientTest, PatchSetsAndDeletesOnlyTheNamedAnnotations) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "p", "uid-1", {{"keep", "1"}, {"drop", "2"}, {"set", "3"}}));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Status patched = PatchPodAnnotations(
      *client, "ml", "p",
      {{"NEURON_ALLOCATED", "true"}, {"drop", std::nullopt}, {"set", "new \"value\""}});
  ASSERT_TRUE(patched.ok()) << patched.error();
  const Pod pod = StoredPod(server, "ml", "p");
  EXPECT_EQ(pod.annotations.size(), 3u);
  EXPECT_EQ(pod.annotations.at("keep"), "1");
  EXPECT_EQ(pod.annotations.at("set"), "new \"value\"");
  EXPECT_EQ(pod.annotations.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(pod.annotations.count("drop"), 0u);
  const auto patches = server.RequestsMatching("PATCH", "/api/v1/namespaces/ml/pods/p");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(patches[0].body, R"({"metadata":{"annotations":{"NEURON_ALLOCATED":"true","drop":null,)"
                             R"("set":"new \"value\""}}})");

  Status missing = PatchPodAnnotations(*client, "ml", "gone", {{"a", "b"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr("404"));
}

TEST(KubeClientTest, PostsEventsAboutPods) {
  FakeApiServer server;
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Pod pod;
  pod.ns = "ml";
  pod.name = "train-0";
  pod.uid = "uid-1";
  pod.resource_version = "77";
  Status posted = PostPodEvent(*client, pod, "Warning", "FailedTopology",
                               "no \"legal\" set of 4 devices\non node-1", "toposched");
  ASSERT_TRUE(posted.ok()) << posted.error();
  const auto events = server.RequestsMatching("POST", "/api/v1/namespaces/ml/events");
  ASSERT_EQ(events.size(), 1u);
  simdjson::dom::parser parser;
  simdjson::dom::element body;
  ASSERT_EQ(parser.parse(events[0].body).get(body), simdjson::SUCCESS);
  std::string_view value;
  ASSERT_EQ(body["kind"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "Event");
  ASSERT_EQ(body["metadata"]["namespace"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "ml");
  ASSERT_EQ(body["metadata"]["name"].get(value), simdjson::SUCCESS);
  EXPECT_THAT(std::string(value), ::testing::StartsWith("train-0."));
  ASSERT_EQ(body["involvedObject"]["kind"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "Pod");
  ASSERT_EQ(body["involvedObject"]["uid"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "uid-1");
  ASSERT_EQ(body["reason"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "FailedTopology");
  ASSERT_EQ(body["message"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "no \"legal\" set of 4 devices\non node-1");
  ASSERT_EQ(body["type"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "Warning");
  ASSERT_EQ(body["source"]["component"].get(value), simdjson::SUCCESS);
  EXPECT_EQ(value, "toposched");

  EXPECT_FALSE(PostPodEvent(*client, pod, "Error", "r", "m", "c").ok());
}

TEST(KubeClientTest, ConcurrentRequestsFromManyThreads) {
  FakeApiServer server;
  server.UpsertPod(PodJson("ml", "a", "uid-a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        Result<HttpResponse> response = client->Get("/api/v1/pods");
        if (response.ok() && response->status == 200) ok.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 40);
  EXPECT_LE(server.connections_accepted(), 4);
}

TEST(KubeClientTest, EscapesUrlComponents) {
  EXPECT_EQ(EscapeUrlComponent("spec.nodeName=node-1,a!=b"), "spec.nodeName%3Dnode-1%2Ca%21%3Db");
  EXPECT_EQ(EscapeUrlComponent("a b/c~d_e"), "a%20b%2Fc~d_e");
}

}  // namespace
}  // namespace toposched::kube
