// The extender on shared pools with bind-time provisioning against the fake partition service:
// a bind creates the partition and names it on the Binding; failures and timeouts roll back
// completely; a deleted pod's devices stay held until its partition is gone; a restart removes
// orphans and reports pods whose partition vanished; with leader election only the leader
// reconciles.
#include <atomic>
#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender/offline.h"
#include "extender/service.h"
#include "pools_fixtures.h"
#include "support/every_verdict.h"
#include "support/legality_oracle.h"
#include "support/wait.h"

namespace toposched::extender {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using nlohmann::json;

// Records bindings and events; can be told to refuse binds.
class RecordingWriter : public ClusterWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string& uid,
              const std::string& node,
              const std::map<std::string, std::string>& annotations) override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu);
      if (refuse) return Error{"pods \"p\" not found"};
      bindings[uid] = {node, annotations};
      hook = on_bind;
    }
    // What happens in the cluster while the write is answered (the pod watch, a deletion).
    if (hook) hook();
    return OkStatus();
  }
  // `lose_answers`: the write is not applied and answered 500 (its outcome unknown); the pod
  // read back is `read_back` (nullopt: gone).
  kube::WriteResult BindWithOutcome(
      const std::string& ns, const std::string& name, const std::string& uid,
      const std::string& node, const std::map<std::string, std::string>& annotations) override {
    {
      std::lock_guard lock(mu);
      if (lose_answers) return {kube::WriteOutcome::kUnknown, 500, "binding: (HTTP 500)"};
    }
    return ClusterWriter::BindWithOutcome(ns, name, uid, node, annotations);
  }
  Result<std::optional<kube::Pod>> ReadPod(const std::string&, const std::string&) override {
    std::lock_guard lock(mu);
    return read_back;
  }
  std::chrono::milliseconds MaxWriteTime() const override {
    if (on_max_write_time) on_max_write_time();
    return max_write;
  }
  void Event(const std::string&, const std::string&, const std::string& uid, std::string_view,
             std::string_view reason, std::string_view message) override {
    std::lock_guard lock(mu);
    events.push_back({uid, std::string(reason), std::string(message)});
  }
  struct Ev {
    std::string uid, reason, message;
  };
  std::mutex mu;
  bool refuse = false;
  std::function<void()> on_bind;
  // Runs whenever a bind sizes its reservation: before it reserves, and (on a pool) after it
  // reserved and before it extends that for the provisioning.
  std::function<void()> on_max_write_time;
  std::chrono::milliseconds max_write{0};
  bool lose_answers = false;
  std::optional<kube::Pod> read_back;
  std::map<std::string, OfflineClusterWriter::Binding> bindings;
  std::vector<Ev> events;
};

class ExtenderPoolsTest : public ::testing::Test {
 protected:
  ExtenderPoolsTest()
      : pools_(*topology::PoolSet::Parse(testing::kTwoPools, "pools.yaml",
                                         topology::Catalog::Embedded())),
        fake_(provision::FakeServiceOptions{40ms, 40ms, 0, "", 7}, testing::SteadyNowNs),
        service_(fake_),
        provisioner_(service_, provision::ProvisionOptions{400ms, 5ms, 300ms}, testing::SteadyNowNs,
                     testing::RealSleep()) {
    Start();
  }

  void Start(const std::vector<kube::Pod>& pods = {},
             std::function<bool()> may_reconcile = nullptr) {
    ExtenderOptions options = testing::EveryVerdict();
    options.may_reconcile = std::move(may_reconcile);
    options.resources.device.push_back(ipu_resource_);
    options.pools = &pools_;
    options.provisioner = &provisioner_;
    options.removal_retry = 20ms;
    options.read_back_retry = 0ms;  // a read-back that found nothing definite is due again at once
    ext_.reset();
    ext_ = std::make_unique<ExtenderService>(topology::Catalog::Embedded(), options, writer_,
                                             metrics_, testing::SteadyNowNs,
                                             [] { return int64_t{1743574052764891534}; });
    ext_->ReplaceNodes({testing::PoolNode("head-1", "pod-a"), testing::PoolNode("head-2", "pod-a"),
                        testing::PoolNode("head-x", "pod-nope")});
    ext_->ReplacePods(pods);
  }

  std::string Bind(const std::string& name, const std::string& uid, int n,
                   const std::string& node) {
    ext_->UpsertPod(testing::IpuPod(name, uid, n));
    return json::parse(ext_->Bind({name, "default", uid, node}))["Error"];
  }

  // The resource the service manages (--device-resource); a restart may name another.
  std::string ipu_resource_ = "graphcore.ai/ipu";

  uint64_t PoolBusy() { return ext_->tracker().PoolUsage("pod-a")->busy_devices(); }

  // Every device of the pool is either free or in a partition the service has, and vice versa.
  void ExpectNoLeak() {
    uint64_t in_partitions = 0;
    for (const auto& p : fake_.Snapshot()) {
      in_partitions |= testing::MaskOf(p.ipus);
    }
    EXPECT_EQ(PoolBusy(), in_partitions);
  }

  void WaitForRemovals() {
    testing::WaitUntil([&] { return ext_->PendingRemovals() == 0; }, 3s);
    ASSERT_EQ(ext_->PendingRemovals(), 0u);
  }

  topology::PoolSet pools_;
  provision::FakePartitionService fake_;
  testing::InProcessService service_;
  provision::Provisioner provisioner_;
  RecordingWriter writer_;
  Metrics metrics_;
  std::unique_ptr<ExtenderService> ext_;
};

TEST_F(ExtenderPoolsTest, BindCreatesThePartitionAndNamesItOnTheBinding) {
  EXPECT_TRUE(ext_->Ready());
  ASSERT_EQ(Bind("p", "uid-p", 8, "head-1"), "");
  const auto& b = writer_.bindings.at("uid-p");
  EXPECT_EQ(b.node, "head-1");
  EXPECT_EQ(b.annotations.at("toposched.io/partition"), "ts-uid-p");
  EXPECT_EQ(b.annotations.at("AWS_NEURON_IDS"), "0,1,2,3,4,5,6,7");
  auto parts = fake_.Snapshot();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].state, provision::PartitionState::kActive);
  EXPECT_EQ(parts[0].pool, "pod-a");
  EXPECT_EQ(ext_->tracker().Find("uid-p")->state, tracker::HoldState::kCommitted);
  // The other head node of the pod sees those IPUs gone.
  ASSERT_EQ(Bind("q", "uid-q", 8, "head-2"), "");
  EXPECT_EQ(writer_.bindings.at("uid-q").annotations.at("AWS_NEURON_IDS"), "8,9,10,11,12,13,14,15");
  EXPECT_THAT(Bind("r", "uid-r", 1, "head-1"), HasSubstr("does not fit"));
  ExpectNoLeak();
}

TEST_F(ExtenderPoolsTest, UnknownPoolLabelFailsFilterNamingThePool) {
  const auto pod =
      R"({"metadata":{"name":"p","namespace":"default","uid":"u1"},"spec":{"containers":[{"name":"main","resources":{"limits":{"graphcore.ai/ipu":"4"}}}]}})";
  const simdjson::padded_string padded(std::string(R"({"Pod":)") + pod +
                                       R"(,"NodeNames":["head-1","head-x"]})");
  auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  const json r = json::parse(ext_->Filter(*args));
  EXPECT_THAT(r["NodeNames"], ::testing::ElementsAre("head-1"));
  EXPECT_THAT(r["FailedAndUnresolvableNodes"]["head-x"].get<std::string>(),
              HasSubstr("no pool 'pod-nope' is defined"));
}

TEST_F(ExtenderPoolsTest, ProvisioningFailureRollsBackCompletely) {
  fake_.SetFailureRate(1.0);
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("failed"));
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
  EXPECT_TRUE(writer_.bindings.empty());
  fake_.SetFailureRate(0);
  EXPECT_EQ(Bind("p2", "uid-p2", 16, "head-2"), "");  // every IPU is free again
}

TEST_F(ExtenderPoolsTest, ProvisioningTimeoutRollsBackCompletely) {
  fake_.SetLatency(5s);
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("not active after 400 ms"));
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ExtenderPoolsTest, GarbageFromTheServiceKeepsIdsHeldUntilTheRemovalIsConfirmed) {
  fake_.SetGarbage(true);
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("stay held"));
  EXPECT_EQ(PoolBusy(), 0xFu);  // nobody else may get them while the partition may exist
  EXPECT_EQ(ext_->tracker().Find("uid-p")->state, tracker::HoldState::kReleasing);
  fake_.SetGarbage(false);
  WaitForRemovals();
  EXPECT_EQ(PoolBusy(), 0u);
  ExpectNoLeak();
}

TEST_F(ExtenderPoolsTest, FailedBindingRemovesThePartitionAndFreesTheIds) {
  writer_.refuse = true;
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("not found"));
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ExtenderPoolsTest, DeletedPodKeepsItsIdsUntilThePartitionIsGone) {
  ASSERT_EQ(Bind("p", "uid-p", 16, "head-1"), "");
  fake_.SetRemoveLatency(300ms);
  auto pod = testing::IpuPod("p", "uid-p", 16);
  pod.node_name = "head-1";
  ext_->DeletePod(pod);
  // Removal takes 300 ms at the service: until then the IPUs are not free for anyone.
  EXPECT_EQ(ext_->tracker().Find("uid-p")->state, tracker::HoldState::kReleasing);
  EXPECT_EQ(PoolBusy(), 0xFFFFu);
  EXPECT_THAT(Bind("q", "uid-q", 1, "head-2"), HasSubstr("does not fit"));
  ext_->ExpireReservations();  // the housekeeping tick also publishes the pending removals
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_partition_removals_pending 1"));
  WaitForRemovals();
  ext_->ExpireReservations();
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_partition_removals_pending 0"));
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
  EXPECT_EQ(Bind("q2", "uid-q2", 16, "head-2"), "");
}

TEST_F(ExtenderPoolsTest, PodDeletedWhileBindingIsCleanedUpByTheBind) {
  service_.after_create = [&] {  // the partition is being made when the pod is deleted
    service_.after_create = nullptr;
    ext_->DeletePod(testing::IpuPod("p", "uid-p", 4));
  };
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("deleted while binding"));
  EXPECT_EQ(fake_.creates(), 1);
  WaitForRemovals();
  testing::WaitUntil([&] { return !ext_->tracker().Find("uid-p").has_value(); }, 1s);
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

// The deletion lands after the bind reserved and before it extended the reservation for the
// provisioning (CI once hit this window): the same answer, nothing made, nothing held.
TEST_F(ExtenderPoolsTest, PodDeletedJustAfterTheBindReservedIsCleanedUpByTheBind) {
  writer_.on_max_write_time = [&] {
    if (!ext_->tracker().Find("uid-p").has_value()) return;  // not reserved yet
    writer_.on_max_write_time = nullptr;
    ext_->DeletePod(testing::IpuPod("p", "uid-p", 4));
  };
  EXPECT_THAT(Bind("p", "uid-p", 4, "head-1"), HasSubstr("deleted while binding"));
  WaitForRemovals();
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_EQ(fake_.creates(), 0);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

// Issue 18 row 1: the pod watch delivers the Binding (and adopts the pod's record) before the
// bind thread's Commit, the usual order. That is our own bind seen first, not a deletion: the pod
// keeps its partition and its ids.
TEST_F(ExtenderPoolsTest, AWatchThatAdoptsTheBindingFirstIsNotADeletion) {
  writer_.on_bind = [&] {
    auto bound = testing::IpuPod("p", "uid-p", 8);
    bound.node_name = "head-1";
    const auto& written = writer_.bindings.at("uid-p").annotations;
    bound.annotations.insert(written.begin(), written.end());
    ext_->UpsertPod(bound);  // the watch event, delivered before Bind returns
  };
  EXPECT_EQ(Bind("p", "uid-p", 8, "head-1"), "");
  WaitForRemovals();
  const auto hold = ext_->tracker().Find("uid-p");
  ASSERT_TRUE(hold.has_value()) << "the bound pod's ids were freed";
  EXPECT_EQ(hold->state, tracker::HoldState::kCommitted);
  ASSERT_EQ(fake_.Snapshot().size(), 1u) << "the bound pod's partition was removed";
  EXPECT_EQ(fake_.Snapshot()[0].name, "ts-uid-p");
  EXPECT_EQ(PoolBusy(), 0xFFu);
  EXPECT_THAT(Bind("q", "uid-q", 16, "head-2"), HasSubstr("does not fit"));
}

// The same moment, but the pod really is deleted while its Binding is answered: the bind cleans
// up (partition removed, ids freed), exactly once.
TEST_F(ExtenderPoolsTest, ADeletionDuringTheWriteIsStillCleanedUp) {
  writer_.on_bind = [&] { ext_->DeletePod(testing::IpuPod("p", "uid-p", 8)); };
  EXPECT_THAT(Bind("p", "uid-p", 8, "head-1"), HasSubstr("deleted while binding"));
  WaitForRemovals();
  testing::WaitUntil([&] { return !ext_->tracker().Find("uid-p").has_value(); }, 1s);
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

// No step shortens a reservation: while the Binding is written, the pool bind's hold lasts at
// least the reservation timeout plus the writer's longest write from now (issue 18 row 1).
TEST_F(ExtenderPoolsTest, ThePoolStepNeverShortensTheWritesDeadline) {
  const int64_t now = int64_t{1000} * 1'000'000'000;
  ExtenderOptions options;
  options.resources.device.push_back("graphcore.ai/ipu");
  options.pools = &pools_;
  options.provisioner = &provisioner_;
  options.removal_retry = 20ms;
  options.reservation_timeout = 30s;
  writer_.max_write = 40s;
  ext_ = std::make_unique<ExtenderService>(
      topology::Catalog::Embedded(), options, writer_, metrics_, [now] { return now; },
      [] { return int64_t{1743574052764891534}; });
  ext_->ReplaceNodes({testing::PoolNode("head-1", "pod-a")});
  ext_->ReplacePods({});
  int64_t deadline = 0;
  writer_.on_bind = [&] { deadline = ext_->tracker().Find("uid-p")->deadline_ns; };
  ASSERT_EQ(Bind("p", "uid-p", 4, "head-1"), "");
  EXPECT_GE(deadline, now + std::chrono::nanoseconds(30s + 40s).count());
}

// A pool bind whose Binding's outcome is unknown keeps its partition and ids while the pod is
// read back; the pod, deleted meanwhile, is then released whole (partition removed, ids freed).
TEST_F(ExtenderPoolsTest, AnUnknownBindingKeepsThePartitionUntilThePodIsSeenGone) {
  writer_.lose_answers = true;
  writer_.read_back = testing::IpuPod("p", "uid-p", 8);  // exists, not bound
  EXPECT_THAT(Bind("p", "uid-p", 8, "head-1"), HasSubstr("not bound yet"));
  EXPECT_EQ(ext_->tracker().Find("uid-p")->state, tracker::HoldState::kReserved);
  ASSERT_EQ(fake_.Snapshot().size(), 1u);  // the partition stays: the write may still land
  EXPECT_EQ(PoolBusy(), 0xFFu);
  ext_->DeletePod(testing::IpuPod("p", "uid-p", 8));  // the watch: deleted
  EXPECT_EQ(fake_.Snapshot().size(), 1u);             // left to the bind
  {
    std::lock_guard lock(writer_.mu);
    writer_.read_back.reset();
  }
  EXPECT_EQ(ext_->ResolveUnknownBinds(), 0u);  // read back: gone
  WaitForRemovals();
  testing::WaitUntil([&] { return !ext_->tracker().Find("uid-p").has_value(); }, 1s);
  EXPECT_FALSE(ext_->tracker().Find("uid-p").has_value());
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

// A partition create whose answer is lost (504) although it was made: the provisioner reads it
// back and uses it, instead of removing it and failing the bind.
TEST_F(ExtenderPoolsTest, ACreateMadeButAnswered504IsReadBackAndUsed) {
  fake_.SetLostCreateAnswers(1);
  EXPECT_EQ(Bind("p", "uid-p", 8, "head-1"), "");
  ASSERT_EQ(fake_.Snapshot().size(), 1u);
  EXPECT_EQ(fake_.Snapshot()[0].state, provision::PartitionState::kActive);
  EXPECT_EQ(ext_->tracker().Find("uid-p")->state, tracker::HoldState::kCommitted);
  ExpectNoLeak();
}

TEST_F(ExtenderPoolsTest, RestartRemovesOrphansAndReportsMissingPartitions) {
  // Before the restart: two pods bound, then one pod's partition is removed behind our back and
  // the other pod is deleted while we were down.
  ASSERT_EQ(Bind("live", "uid-live", 4, "head-1"), "");
  ASSERT_EQ(Bind("dead", "uid-dead", 8, "head-2"), "");
  ASSERT_EQ(Bind("lost", "uid-lost", 2, "head-2"), "");
  ASSERT_TRUE(provisioner_.RemoveAndWait("ts-uid-lost", 500ms).ok());
  fake_.SetRemoveLatency(300ms);
  std::vector<kube::Pod> pods;
  for (const char* name : {"live", "lost"}) {
    const std::string uid = std::string("uid-") + name;
    auto pod = testing::IpuPod(name, uid, 1);
    pod.containers[0].requests["graphcore.ai/ipu"] = name == std::string("live") ? 4 : 2;
    pod.containers[0].limits = pod.containers[0].requests;
    pod.phase = "Running";
    const auto& b = writer_.bindings.at(uid);
    pod.node_name = b.node;
    for (const auto& [k, v] : b.annotations) pod.annotations[k] = v;
    pods.push_back(pod);
  }
  Start(pods);
  EXPECT_TRUE(ext_->Ready());
  // The orphan's IPUs (8-15) are held while it is being removed, the live pod's (0-3) stay.
  EXPECT_EQ(PoolBusy() & 0xFF0Fu, 0xFF0Fu);
  {
    std::lock_guard lock(writer_.mu);
    ASSERT_EQ(writer_.events.size(), 1u);
    EXPECT_EQ(writer_.events[0].uid, "uid-lost");
    EXPECT_EQ(writer_.events[0].reason, "PartitionMissing");
    EXPECT_THAT(writer_.events[0].message, HasSubstr("ts-uid-lost"));
  }
  WaitForRemovals();
  auto parts = fake_.Snapshot();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].name, "ts-uid-live");
  EXPECT_EQ(PoolBusy() & 0xFF00u, 0u);
  EXPECT_EQ(ext_->tracker().Find("uid-live")->state, tracker::HoldState::kCommitted);
}

// A partition is an orphan only when its owner pod is gone. Here the owner is listed alive but
// its hold cannot be rebuilt (its record names an IPU the pool does not have); before the fix the
// restart took "no hold" for "no pod" and destroyed the running pod's partition.
TEST_F(ExtenderPoolsTest, RestartKeepsALivePodsPartitionWhenItsHoldFailsToRebuild) {
  ASSERT_EQ(Bind("live", "uid-live", 4, "head-1"), "");
  auto pod = testing::IpuPod("live", "uid-live", 4);
  pod.phase = "Running";
  const auto& b = writer_.bindings.at("uid-live");
  pod.node_name = b.node;
  for (const auto& [k, v] : b.annotations) pod.annotations[k] = v;
  pod.annotations["AWS_NEURON_IDS"] = "0,1,2,99";  // not restorable
  pod.annotations.erase("toposched.io/allocation");
  Start({pod});
  EXPECT_TRUE(ext_->Ready());
  WaitForRemovals();
  auto parts = fake_.Snapshot();
  ASSERT_EQ(parts.size(), 1u) << "the live pod's partition was removed as an orphan";
  EXPECT_EQ(parts[0].name, "ts-uid-live");
  // Its IPUs stay held while the partition exists, so no other pod is given them.
  EXPECT_EQ(PoolBusy() & 0xFu, 0xFu);
  // When the pod is deleted the partition goes, then its IPUs are free.
  ext_->DeletePod(pod);
  WaitForRemovals();
  testing::WaitUntil([&] { return PoolBusy() == 0; }, 3s);
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

// Liveness comes from every listed pod, whatever the resource flags: after a restart with another
// --device-resource (an upgrade, a renamed resource) a running pod whose record names a resource
// the extender no longer manages still runs on its partition. It is reported, never stripped.
TEST_F(ExtenderPoolsTest, ARestartUnderAnotherResourceNameKeepsARunningPodsPartition) {
  ASSERT_EQ(Bind("old", "uid-old", 4, "head-1"), "");
  auto pod = testing::IpuPod("old", "uid-old", 4);  // asks graphcore.ai/ipu
  pod.phase = "Running";
  const auto& b = writer_.bindings.at("uid-old");
  pod.node_name = b.node;
  for (const auto& [k, v] : b.annotations) pod.annotations[k] = v;
  ipu_resource_ = "example.com/ipu";  // the restarted extender manages another name
  Start({pod});
  EXPECT_TRUE(ext_->Ready());
  WaitForRemovals();
  auto parts = fake_.Snapshot();
  ASSERT_EQ(parts.size(), 1u) << "the running pod's partition was removed as an orphan";
  EXPECT_EQ(parts[0].name, "ts-uid-old");
  EXPECT_EQ(PoolBusy() & 0xFu, 0xFu) << "its IPUs must not be given to another pod";
  {
    std::lock_guard lock(writer_.mu);
    ASSERT_FALSE(writer_.events.empty());
    EXPECT_EQ(writer_.events.back().uid, "uid-old");
    EXPECT_EQ(writer_.events.back().reason, "PartitionKept");
    EXPECT_THAT(writer_.events.back().message, HasSubstr("no resource this extender manages"));
  }
  // Deleted, its partition goes and the IPUs are free again.
  ext_->DeletePod(pod);
  WaitForRemovals();
  testing::WaitUntil([&] { return PoolBusy() == 0; }, 3s);
  EXPECT_EQ(PoolBusy(), 0u);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ExtenderPoolsTest, NotReadyUntilThePartitionServiceWasListed) {
  fake_.SetGarbage(true);
  Start();
  EXPECT_FALSE(ext_->Ready());
  EXPECT_FALSE(ext_->ReconcilePartitions().ok());
  fake_.SetGarbage(false);
  EXPECT_TRUE(ext_->ReconcilePartitions().ok());
  EXPECT_TRUE(ext_->Ready());
}

// With leader election: a standby lists the pods but leaves the partition service alone (the
// leader may be making a partition for a bind in flight); once it leads it reconciles, removing
// what a dead leader left half-made (a partition whose Binding was never written), and it does so
// again at each new leadership.
TEST_F(ExtenderPoolsTest, OnlyTheLeaderReconcilesAndATakeoverRemovesAHalfMadePartition) {
  ASSERT_EQ(Bind("inflight", "uid-inflight", 8, "head-2"), "");  // the old leader's last bind...
  ASSERT_EQ(fake_.Snapshot().size(), 1u);                        // ...whose Binding never landed
  std::atomic<bool> leader{false};
  Start({}, [&leader] { return leader.load(); });
  EXPECT_FALSE(ext_->Ready());
  EXPECT_TRUE(ext_->ReconcilePartitions().ok());
  EXPECT_FALSE(ext_->Ready());
  ASSERT_EQ(fake_.Snapshot().size(), 1u);  // a standby removed nothing

  leader = true;  // takes over
  ASSERT_TRUE(ext_->ReconcilePartitions().ok());
  EXPECT_TRUE(ext_->Ready());
  WaitForRemovals();
  EXPECT_TRUE(fake_.Snapshot().empty());
  EXPECT_EQ(PoolBusy(), 0u);

  ext_->RequireReconcile();  // leadership lost and regained
  EXPECT_FALSE(ext_->Ready());
  ASSERT_TRUE(ext_->ReconcilePartitions().ok());
  EXPECT_TRUE(ext_->Ready());
}

}  // namespace
}  // namespace toposched::extender
