// List-then-watch informers against the loopback fake API server (kube/informer.h).
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/mutex.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "support/fake_apiserver.h"
#include "support/pods.h"
#include "support/wait.h"

namespace toposched::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using toposched::testing::FailureRule;
using toposched::testing::FakeApiServer;
using toposched::testing::Kind;
using toposched::testing::ReadSourceFile;
using toposched::testing::RecordedRequest;
using toposched::testing::WaitUntil;
using namespace std::chrono_literals;
using toposched::testing::TooOldMode;
using toposched::testing::WatchListMode;

std::string PodJson(const std::string& name, const std::string& node = "") {
  return testing::PodJson(
      testing::PodJsonSpec{.name = name, .uid = "uid-" + name, .ns = "ml", .node = node});
}

// Mirrors what the informer reports into a map, like a consumer's cache would.
template <typename T>
class Recorder {
 public:
  InformerHandlers<T> Handlers() {
    InformerHandlers<T> handlers;
    handlers.on_replace = [this](const std::vector<T>& all) {
      std::lock_guard<std::mutex> lock(mutex_);
      objects_.clear();
      for (const T& object : all) objects_[object.name] = object;
      ++replaces_;
    };
    handlers.on_upsert = [this](const T& object) {
      std::lock_guard<std::mutex> lock(mutex_);
      objects_[object.name] = object;
      ++upserts_;
    };
    handlers.on_delete = [this](const T& object) {
      std::lock_guard<std::mutex> lock(mutex_);
      objects_.erase(object.name);
      ++deletes_;
    };
    return handlers;
  }
  std::vector<std::string> Names() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> names;
    for (const auto& [name, object] : objects_) names.push_back(name);
    return names;
  }
  bool Has(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    return objects_.count(name) > 0;
  }
  T Get(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    return objects_.at(name);
  }
  int replaces() {
    std::lock_guard<std::mutex> lock(mutex_);
    return replaces_;
  }
  int upserts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return upserts_;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, T> objects_;
  int replaces_ = 0;
  int upserts_ = 0;
  int deletes_ = 0;
};

std::unique_ptr<ApiClient> ClientFor(const FakeApiServer& server) {
  ClientConfig config;
  config.server = server.url();
  config.ca_pem = server.ca_pem();
  config.token = "test-token";
  config.request_timeout = std::chrono::seconds(5);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
  EXPECT_TRUE(client.ok()) << client.error();
  return client.ok() ? std::move(*client) : nullptr;
}

InformerOptions FastOptions() {
  InformerOptions options;
  options.min_backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(200);
  return options;
}

std::string QueryParam(const std::string& query, const std::string& name) {
  const std::string key = name + "=";
  size_t at = query.find(key);
  while (at != std::string::npos && at != 0 && query[at - 1] != '&') at = query.find(key, at + 1);
  if (at == std::string::npos) return {};
  const size_t end = query.find('&', at);
  return query.substr(at + key.size(), end == std::string::npos ? end : end - at - key.size());
}

TEST(KubeInformerTest, ListsInPagesThenWatchesUpsertsDeletesAndBookmarks) {
  FakeApiServer server;
  for (int i = 0; i < 7; ++i) server.UpsertPod(PodJson("p" + std::to_string(i)));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  InformerOptions options = FastOptions();
  options.page_size = 3;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), options);
  EXPECT_FALSE(informer.Synced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_EQ(recorder.Names().size(), 7u);
  EXPECT_EQ(recorder.replaces(), 1);
  const auto lists = server.RequestsMatching("GET", "/api/v1/pods");
  ASSERT_GE(lists.size(), 3u);
  EXPECT_EQ(QueryParam(lists[0].query, "limit"), "3");
  EXPECT_EQ(QueryParam(lists[0].query, "continue"), "");
  EXPECT_NE(QueryParam(lists[1].query, "continue"), "");
  EXPECT_NE(QueryParam(lists[2].query, "continue"), "");

  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.UpsertPod(PodJson("new", "node-1"));
  server.DeletePod("ml", "p0");
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("new") && !recorder.Has("p0"); }, 5s));
  EXPECT_EQ(recorder.Get("new").node_name, "node-1");

  // A bookmark moves the resume point even though no object changed for this watch.
  server.UpsertNode(R"({"metadata":{"name":"unrelated"}})");
  const int64_t bookmark = server.resource_version();
  server.SendBookmark(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return informer.counters().events >= 3; }, 5s));
  server.EndWatches(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return server.watches_started(Kind::kPod) >= 2; }, 5s));
  const auto watches = server.RequestsMatching("GET", "/api/v1/pods");
  const RecordedRequest& resumed = watches.back();
  EXPECT_EQ(QueryParam(resumed.query, "watch"), "1");
  EXPECT_EQ(QueryParam(resumed.query, "allowWatchBookmarks"), "true");
  EXPECT_EQ(QueryParam(resumed.query, "resourceVersion"), std::to_string(bookmark));
  EXPECT_NE(QueryParam(resumed.query, "timeoutSeconds"), "");

  const InformerCounters counters = informer.counters();
  EXPECT_EQ(counters.lists, 1u);
  EXPECT_EQ(counters.relists, 0u);
  EXPECT_GE(counters.watch_restarts, 1u);
  EXPECT_EQ(counters.decode_errors, 0u);
  informer.Stop();
}

// A filter call carries the pod as kube-scheduler's watch saw it: the informer lets the caller
// wait until its own watch has delivered that resourceVersion (the scheduler's can be ahead).
TEST(KubeInformerTest, WaitsUntilAResourceVersionIsDelivered) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  const int64_t listed = server.resource_version();
  EXPECT_TRUE(informer.WaitForResourceVersion(std::to_string(listed), 0ms));
  EXPECT_GE(informer.DeliveredResourceVersion(), static_cast<uint64_t>(listed));
  // Not a revision: nothing to wait for.
  EXPECT_TRUE(informer.WaitForResourceVersion("", 0ms));
  EXPECT_TRUE(informer.WaitForResourceVersion("opaque-token", 0ms));
  // Newer than anything there is: the wait ends with the timeout, false.
  EXPECT_FALSE(informer.WaitForResourceVersion(std::to_string(listed + 1000), 20ms));

  // A waiter for the next revision is woken by the event that carries it.
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  const std::string next = std::to_string(listed + 1);
  std::atomic<bool> reached{false};
  std::thread waiter([&] { reached = informer.WaitForResourceVersion(next, 10s); });
  server.DeletePod("ml", "a");
  waiter.join();
  EXPECT_TRUE(reached.load());
  EXPECT_FALSE(recorder.Has("a"));  // the handler ran before the waiter was woken
  informer.Stop();
}

TEST(KubeInformerTest, RelistsOnHttp410) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));

  server.set_too_old_mode(TooOldMode::kHttp410);
  server.RejectNextWatchesAsTooOld(Kind::kPod, 1);
  server.UpsertPod(PodJson("b"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("b"); }, 5s));
  server.EndWatches(Kind::kPod);
  // The list is counted just after its handlers ran: wait for both.
  ASSERT_TRUE(
      WaitUntil([&] { return recorder.replaces() == 2 && informer.counters().relists == 1; }, 5s));
  EXPECT_THAT(recorder.Names(), ElementsAre("a", "b"));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
}

TEST(KubeInformerTest, RelistsOnErrorEvent410AndSeesChangesMadeMeanwhile) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));

  // The connection drops and the server refuses the informer for a while; meanwhile a pod comes
  // and goes, and the history it would resume from is compacted.
  server.set_too_old_mode(TooOldMode::kErrorEvent);
  server.InjectFailure(FailureRule{"GET", "/api/v1/pods", 503, std::chrono::milliseconds(0), -1});
  server.DropWatchConnections(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return informer.counters().request_errors >= 2; }, 5s));
  server.DeletePod("ml", "a");
  server.UpsertPod(PodJson("c"));
  server.CompactHistory();
  server.ClearFailures();
  ASSERT_TRUE(WaitUntil([&] { return recorder.replaces() == 2; }, 5s));
  EXPECT_THAT(recorder.Names(), ElementsAre("c"));
  const InformerCounters counters = informer.counters();
  EXPECT_EQ(counters.relists, 1u);
  EXPECT_GE(counters.request_errors, 2u);  // the dropped connection and the refusals
}

// A relist answered from a snapshot older than what the watch already delivered (a lagging cache
// or proxy; the e2e fault proxy's stale LIST) would drop pods bound meanwhile from the consumer's
// view (issue 18, row 3): it is refused and listed again.
TEST(KubeInformerTest, ARelistOlderThanWhatTheWatchDeliveredIsListedAgain) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  const std::string stale =
      R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":")" +
      std::to_string(server.resource_version()) + R"("},"items":[)" + PodJson("a") + "]}";
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Mutex mutex;
  std::vector<std::vector<std::string>> delivered;  // the names of every list delivered
  std::atomic<bool> has_b{false};
  InformerHandlers<Pod> handlers;
  handlers.on_replace = [&](const std::vector<Pod>& all) {
    std::vector<std::string> names;
    names.reserve(all.size());
    for (const Pod& pod : all) names.push_back(pod.name);
    MutexLock lock(mutex);
    delivered.push_back(std::move(names));
  };
  handlers.on_upsert = [&](const Pod& pod) {
    if (pod.name == "b") has_b.store(true);
  };
  PodInformer informer(*client, kPodsPath, handlers, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.UpsertPod(PodJson("b", "n1"));
  ASSERT_TRUE(WaitUntil([&] { return has_b.load(); }, 5s));

  server.AnswerNextPodListsWith(stale, 1);
  server.RejectNextWatchesAsTooOld(Kind::kPod, 1);
  server.EndWatches(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return informer.counters().relists >= 1; }, 5s));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  MutexLock lock(mutex);
  ASSERT_EQ(delivered.size(), 2u);
  EXPECT_THAT(delivered[1], ElementsAre("a", "b"));
  EXPECT_GE(informer.counters().request_errors, 1u);  // the stale list, refused
}

TEST(KubeInformerTest, ResumesAfterADroppedConnectionWithoutRelisting) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  // Keep the informer out while a pod is added; it must get it from the history on resuming.
  server.InjectFailure(FailureRule{"GET", "/api/v1/pods", 503, std::chrono::milliseconds(0), -1});
  server.DropWatchConnections(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return informer.counters().request_errors >= 2; }, 5s));
  server.UpsertPod(PodJson("during-outage"));
  EXPECT_FALSE(recorder.Has("during-outage"));
  server.ClearFailures();
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("during-outage"); }, 5s));
  server.UpsertPod(PodJson("after"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("after"); }, 5s));
  EXPECT_EQ(recorder.replaces(), 1);
  EXPECT_EQ(informer.counters().relists, 0u);
  EXPECT_GE(informer.counters().watch_restarts, 1u);
}

TEST(KubeInformerTest, BadEventsAreCountedAndSkipped) {
  FakeApiServer server;
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.SendRawWatchLine(Kind::kPod, "{not json");
  server.SendRawWatchLine(Kind::kPod, R"({"type":"ADDED","object":{"spec":{"containers":"x"}}})");
  server.SendRawWatchLine(Kind::kPod, R"({"type":"TELEPORTED","object":{}})");
  server.UpsertPod(PodJson("fine"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("fine"); }, 5s));
  EXPECT_EQ(informer.counters().decode_errors, 3u);
  EXPECT_EQ(recorder.upserts(), 1);
  EXPECT_EQ(server.open_watches(Kind::kPod), 1);  // the same watch kept going
}

// One pod the decoder refuses must not fail the whole list: before the fix every list and relist
// failed on it forever (the informer never synced, or kept serving its last list while the
// extender stayed Ready). Now it is skipped, counted and named; the rest is delivered.
TEST(KubeInformerTest, OneUndecodablePodInAListIsSkippedAndCounted) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  server.UpsertPod(
      R"({"metadata":{"name":"bad","namespace":"ml","uid":"uid-bad"},"spec":{"containers":"x"}})");
  server.UpsertPod(PodJson("c"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  InformerHandlers<Pod> handlers = recorder.Handlers();
  std::mutex mutex;
  std::vector<std::string> skipped;
  std::atomic<int> list_starts{0};
  handlers.on_skip = [&](const std::string& key, const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex);
    skipped.push_back(key + ": " + error);
  };
  handlers.on_list_start = [&] { ++list_starts; };
  PodInformer informer(*client, kPodsPath, handlers, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5))) << "one bad pod failed the list";
  EXPECT_THAT(recorder.Names(), ElementsAre("a", "c"));
  EXPECT_EQ(informer.counters().skipped, 1u);
  EXPECT_EQ(list_starts.load(), 1);
  {
    std::lock_guard<std::mutex> lock(mutex);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_THAT(skipped[0], HasSubstr("ml/bad: spec.containers: expected an array"));
  }

  // A relist (410) skips it again and still delivers everything else.
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.set_too_old_mode(TooOldMode::kHttp410);
  server.RejectNextWatchesAsTooOld(Kind::kPod, 1);
  server.UpsertPod(PodJson("d"));
  server.EndWatches(Kind::kPod);
  // The list is counted just after its handlers ran: wait for both.
  ASSERT_TRUE(
      WaitUntil([&] { return recorder.replaces() == 2 && informer.counters().relists == 1; }, 5s));
  EXPECT_THAT(recorder.Names(), ElementsAre("a", "c", "d"));
  EXPECT_EQ(informer.counters().skipped, 2u);
  EXPECT_EQ(list_starts.load(), 2);  // before each list, the relist too
}

// A DELETED event whose object does not decode still deletes it (by name and uid): skipping it
// would keep a deleted pod, and its devices, until the next relist.
TEST(KubeInformerTest, AnUndecodableDeletionStillDeletes) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.SendRawWatchLine(
      Kind::kPod,
      R"({"type":"DELETED","object":{"metadata":{"name":"a","namespace":"ml","uid":"uid-a"},)"
      R"("spec":{"containers":"x"}}})");
  ASSERT_TRUE(WaitUntil([&] { return !recorder.Has("a"); }, 5s));
  EXPECT_EQ(informer.counters().skipped, 1u);
}

TEST(KubeInformerTest, FieldSelectorLimitsListAndWatch) {
  FakeApiServer server;
  server.UpsertPod(PodJson("mine", "node-a"));
  server.UpsertPod(PodJson("theirs", "node-b"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  InformerOptions options = FastOptions();
  options.field_selector = "spec.nodeName=node-a";
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_THAT(recorder.Names(), ElementsAre("mine"));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.UpsertPod(PodJson("theirs-2", "node-b"));
  server.UpsertPod(PodJson("mine-2", "node-a"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("mine-2"); }, 5s));
  EXPECT_THAT(recorder.Names(), ElementsAre("mine", "mine-2"));
  for (const auto& request : server.RequestsMatching("GET", "/api/v1/pods")) {
    EXPECT_THAT(request.query, HasSubstr("fieldSelector=spec.nodeName%3Dnode-a"));
  }
}

TEST(KubeInformerTest, ListFailuresBackOffAndRetry) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  server.InjectFailure(FailureRule{"GET", "/api/v1/pods", 500, std::chrono::milliseconds(0), 2});
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_THAT(recorder.Names(), ElementsAre("a"));
  EXPECT_EQ(informer.counters().request_errors, 2u);
  EXPECT_EQ(informer.counters().lists, 1u);
}

TEST(KubeInformerTest, StopIsPromptWhileWatchingAndWhileBackingOff) {
  FakeApiServer server;
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Node> recorder;
  NodeInformer informer(*client, kNodesPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kNode, 1));
  auto start = std::chrono::steady_clock::now();
  informer.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));

  // A list that keeps failing: the informer sleeps between tries, and Stop cuts the sleep.
  server.InjectFailure(FailureRule{"GET", "/api/v1/nodes", 503, std::chrono::milliseconds(0), -1});
  InformerOptions slow = FastOptions();
  slow.min_backoff = std::chrono::seconds(10);
  slow.max_backoff = std::chrono::seconds(10);
  NodeInformer failing(*client, kNodesPath, recorder.Handlers(), slow);
  failing.Start();
  ASSERT_TRUE(WaitUntil([&] { return failing.counters().request_errors >= 1; }, 5s));
  start = std::chrono::steady_clock::now();
  failing.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_FALSE(failing.Synced());
}

TEST(KubeInformerTest, NodeInformerDecodesRealNodes) {
  FakeApiServer server;
  server.UpsertNode(ReadSourceFile("test/support/testdata/eks_trn1_node.json"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Node> recorder;
  NodeInformer informer(*client, kNodesPath, recorder.Handlers(), FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  const Node node = recorder.Get("ip-10-0-12-34.us-west-2.compute.internal");
  EXPECT_EQ(node.instance_type, "trn1.32xlarge");
  EXPECT_EQ(node.allocatable.at("aws.amazon.com/neuron"), 16);
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kNode, 1));
  server.UpsertNode(R"({"metadata":{"name":"inf2","labels":)"
                    R"({"node.kubernetes.io/instance-type":"inf2.48xlarge"}},)"
                    R"("status":{"allocatable":{"aws.amazon.com/neuron":"12"}}})");
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("inf2"); }, 5s));
  EXPECT_EQ(recorder.Get("inf2").instance_type, "inf2.48xlarge");
  server.DeleteNode("inf2");
  ASSERT_TRUE(WaitUntil([&] { return !recorder.Has("inf2"); }, 5s));
}

// --- watch lists (InformerOptions::watch_list) ----------------------------------------------

InformerOptions WatchListOptions() {
  InformerOptions options = FastOptions();
  options.watch_list = true;
  return options;
}

size_t WatchListRequests(const FakeApiServer& server) {
  size_t count = 0;
  for (const auto& request : server.RequestsMatching("GET", "/api/v1/pods")) {
    if (QueryParam(request.query, "sendInitialEvents") == "true") ++count;
  }
  return count;
}

size_t PlainLists(const FakeApiServer& server) {
  size_t count = 0;
  for (const auto& request : server.RequestsMatching("GET", "/api/v1/pods")) {
    if (QueryParam(request.query, "watch").empty()) ++count;
  }
  return count;
}

// The initial set arrives as one on_replace at the initial-events-end bookmark, from one request
// that then goes on as the watch: no LIST at all.
TEST(KubeInformerTest, WatchListDeliversTheSetAtItsBookmarkThenWatchesOnTheSameStream) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a", "node-1"));
  server.UpsertPod(PodJson("b", "node-2"));
  server.DeletePod("ml", "b");
  server.UpsertPod(PodJson("c", "node-1"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), WatchListOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_THAT(recorder.Names(), ElementsAre("a", "c"));
  EXPECT_EQ(recorder.replaces(), 1);
  EXPECT_EQ(recorder.upserts(), 0);  // the initial events are the list, not upserts
  EXPECT_EQ(informer.DeliveredResourceVersion(), static_cast<uint64_t>(server.resource_version()));
  const auto requests = server.RequestsMatching("GET", "/api/v1/pods");
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(QueryParam(requests[0].query, "watch"), "1");
  EXPECT_EQ(QueryParam(requests[0].query, "sendInitialEvents"), "true");
  EXPECT_EQ(QueryParam(requests[0].query, "resourceVersionMatch"), "NotOlderThan");
  EXPECT_EQ(QueryParam(requests[0].query, "allowWatchBookmarks"), "true");
  EXPECT_EQ(QueryParam(requests[0].query, "resourceVersion"), "");  // a consistent read

  server.UpsertPod(PodJson("d", "node-3"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("d"); }, 5s));
  EXPECT_EQ(recorder.upserts(), 1);
  EXPECT_EQ(server.RequestsMatching("GET", "/api/v1/pods").size(), 1u);

  // The stream ends (the server's timeout): a plain watch resumes from the last resourceVersion.
  const int64_t last = server.resource_version();
  server.EndWatches(Kind::kPod);
  ASSERT_TRUE(WaitUntil([&] { return server.watches_started(Kind::kPod) >= 2; }, 5s));
  const RecordedRequest resumed = server.RequestsMatching("GET", "/api/v1/pods").back();
  EXPECT_EQ(QueryParam(resumed.query, "sendInitialEvents"), "");
  EXPECT_EQ(QueryParam(resumed.query, "resourceVersion"), std::to_string(last));
  const InformerCounters counters = informer.counters();
  EXPECT_EQ(counters.lists, 1u);
  EXPECT_EQ(counters.watch_lists, 1u);
  EXPECT_FALSE(counters.watch_list_refused);
  EXPECT_EQ(PlainLists(server), 0u);
  informer.Stop();
}

// A field selector (the device plugin's spec.nodeName) applies to the initial events too.
TEST(KubeInformerTest, WatchListHonoursTheFieldSelector) {
  FakeApiServer server;
  server.UpsertPod(PodJson("mine", "node-1"));
  server.UpsertPod(PodJson("other", "node-2"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  InformerOptions options = WatchListOptions();
  options.field_selector = "spec.nodeName=node-1";
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_THAT(recorder.Names(), ElementsAre("mine"));
  informer.Stop();
}

// Relist() (a new leader's quorum read) is answered by a new watch list; the ticket counts only
// once that list is delivered. History gone (410) also lists through a watch list again.
TEST(KubeInformerTest, RelistAndGoneAreAnsweredByANewWatchList) {
  FakeApiServer server;
  server.UpsertPod(PodJson("a"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), WatchListOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  const uint64_t ticket = informer.Relist();
  ASSERT_TRUE(WaitUntil([&] { return informer.RelistsDelivered() >= ticket; }, 5s));
  EXPECT_EQ(recorder.replaces(), 2);
  EXPECT_EQ(WatchListRequests(server), 2u);

  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.CompactHistory();
  server.RejectNextWatchesAsTooOld(Kind::kPod, 1);
  server.EndWatches(Kind::kPod);  // the plain watch that resumes is refused: 410
  ASSERT_TRUE(WaitUntil([&] { return recorder.replaces() == 3; }, 5s));
  EXPECT_EQ(WatchListRequests(server), 3u);
  EXPECT_EQ(informer.counters().watch_lists, 3u);
  EXPECT_EQ(PlainLists(server), 0u);
  informer.Stop();
}

// The three ways a server does not serve a watch list: each falls back to LIST + WATCH at once,
// and the informer does not ask again (one refusal, whatever relists follow).
class WatchListRefusedTest : public ::testing::TestWithParam<WatchListMode> {};

TEST_P(WatchListRefusedTest, FallsBackToListAndWatchForGood) {
  FakeApiServer server;
  server.set_watch_list_mode(GetParam());
  server.UpsertPod(PodJson("a"));
  server.UpsertPod(PodJson("b"));
  auto client = ClientFor(server);
  ASSERT_NE(client, nullptr);
  Recorder<Pod> recorder;
  PodInformer informer(*client, kPodsPath, recorder.Handlers(), WatchListOptions());
  informer.Start();
  if (GetParam() == WatchListMode::kIgnore) {
    // A server that ignores the parameters streams a plain watch; its end without the bookmark
    // is the refusal. Until then nothing is delivered: no partial set.
    ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
    EXPECT_FALSE(informer.Synced());
    EXPECT_EQ(recorder.replaces(), 0);
    server.EndWatches(Kind::kPod);
  }
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(5)));
  EXPECT_THAT(recorder.Names(), ElementsAre("a", "b"));
  EXPECT_TRUE(informer.counters().watch_list_refused);
  EXPECT_EQ(informer.counters().watch_lists, 0u);
  EXPECT_EQ(informer.counters().lists, 1u);
  EXPECT_EQ(PlainLists(server), 1u);

  // Events, then a relist: LIST again, no second watch list.
  ASSERT_TRUE(server.WaitForOpenWatches(Kind::kPod, 1));
  server.UpsertPod(PodJson("c"));
  ASSERT_TRUE(WaitUntil([&] { return recorder.Has("c"); }, 5s));
  const uint64_t ticket = informer.Relist();
  ASSERT_TRUE(WaitUntil([&] { return informer.RelistsDelivered() >= ticket; }, 5s));
  EXPECT_EQ(PlainLists(server), 2u);
  EXPECT_EQ(WatchListRequests(server), 1u);
  informer.Stop();
}

INSTANTIATE_TEST_SUITE_P(Modes, WatchListRefusedTest,
                         ::testing::Values(WatchListMode::kRefuseInvalid,
                                           WatchListMode::kRefuseErrorEvent,
                                           WatchListMode::kIgnore));

}  // namespace
}  // namespace toposched::kube
