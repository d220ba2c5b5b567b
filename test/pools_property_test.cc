// Randomized properties over shared pools: (1) the tracker alone, long random sequences of every
// operation on pools shared by several head nodes, checked after every step against a model;
// (2) the extender with provisioning against the fake service with random delays, failures,
// garbage answers and refused removals, several threads binding and deleting at once. After
// (2) settles: every device of a pool is either in a partition the service has, held by exactly
// the pod that owns it, or free; the service never saw an overlapping create.
#include <algorithm>
#include <bit>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "extender/offline.h"
#include "extender/service.h"
#include "pools_fixtures.h"
#include "support/legality_oracle.h"
#include "support/wait.h"
#include "tracker/tracker.h"

namespace toposched {
namespace {

using namespace std::chrono_literals;
using testing::MaskOf;
using tracker::HoldState;

struct Head {
  const char* node;
  const char* pool;
};
const Head kHeads[] = {
    {"a1", "pod-a"}, {"a2", "pod-a"}, {"a3", "pod-a"}, {"b1", "pod64"}, {"b2", "pod64"}};

TEST(PoolTrackerPropertyTest, RandomOperationsKeepPoolsConsistent) {
  auto pools =
      topology::PoolSet::Parse(testing::kTwoPools, "pools.yaml", topology::Catalog::Embedded())
          .value();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    tracker::Tracker t(topology::Catalog::Embedded(), topology::Policy::kBestFit, &pools);
    for (const auto& h : kHeads) ASSERT_TRUE(t.UpsertNode({h.node, "m5.large", 0, h.pool}).ok());
    struct Model {
      std::string pool;
      uint64_t mask;
      HoldState state;
    };
    std::map<std::string, Model> model;
    int next = 0;
    auto pick = [&](auto pred) -> std::string {
      std::vector<std::string> c;
      for (const auto& [uid, m] : model) {
        if (pred(m)) c.push_back(uid);
      }
      if (c.empty()) return {};
      return c[std::uniform_int_distribution<size_t>(0, c.size() - 1)(rng)];
    };
    for (int step = 0; step < 400; ++step) {
      const int op = std::uniform_int_distribution<int>(0, 9)(rng);
      if (op <= 3) {
        const Head& h = kHeads[std::uniform_int_distribution<int>(0, 4)(rng)];
        const int sizes[] = {1, 1, 2, 4, 8, 16, 3, 32};
        const int n = sizes[std::uniform_int_distribution<int>(0, 7)(rng)];
        const std::string uid = "u" + std::to_string(next++);
        auto r =
            t.Reserve({uid, uid, {{"main", {topology::Unit::kDevice, n}, false}}}, h.node, 1000);
        if (r.ok()) {
          const auto& ids = r->containers.at(0).placement.ids;
          ASSERT_TRUE(std::has_single_bit(ids.size())) << seed << ":" << step;
          ASSERT_EQ(ids.front() % static_cast<int>(ids.size()), 0) << "unaligned";
          ASSERT_EQ(ids.back() - ids.front() + 1, static_cast<int>(ids.size()));
          model[uid] = {h.pool, MaskOf(ids), HoldState::kReserved};
        }
      } else if (op == 4) {
        auto uid = pick([](const Model& m) { return m.state == HoldState::kReserved; });
        if (!uid.empty()) {
          ASSERT_TRUE(t.Commit(uid).ok());
          model[uid].state = HoldState::kCommitted;
        }
      } else if (op == 5) {
        auto uid = pick([](const Model& m) { return m.state == HoldState::kReserved; });
        if (!uid.empty()) {
          ASSERT_TRUE(t.Rollback(uid).ok());
          model.erase(uid);
        }
      } else if (op == 6) {
        auto uid = pick([](const Model& m) { return m.state != HoldState::kReleasing; });
        if (!uid.empty()) {
          ASSERT_TRUE(t.BeginRelease(uid).ok());
          model[uid].state = HoldState::kReleasing;
        }
      } else if (op == 7) {
        auto uid = pick([](const Model&) { return true; });
        if (!uid.empty()) {
          ASSERT_TRUE(t.Forget(uid));
          model.erase(uid);
        }
      } else if (op == 8) {
        // A head node goes and comes back: the pool's holds stay.
        const Head& h = kHeads[std::uniform_int_distribution<int>(0, 4)(rng)];
        t.RemoveNode(h.node);
        ASSERT_TRUE(t.UpsertNode({h.node, "m5.large", 0, h.pool}).ok());
      } else {
        // Reservations expire; releasing holds do not.
        for (const auto& uid : t.ExpireReservations(2000).pods) model.erase(uid);
        for (const auto& [uid, m] : model) ASSERT_NE(m.state, HoldState::kReserved);
      }
      // Invariants: holds in one pool are disjoint and their union is the pool's usage.
      std::map<std::string, uint64_t> used;
      for (const auto& [uid, m] : model) {
        ASSERT_EQ(used[m.pool] & m.mask, 0u) << "overlap at seed " << seed << " step " << step;
        used[m.pool] |= m.mask;
        auto hold = t.Find(uid);
        ASSERT_TRUE(hold.has_value());
        ASSERT_EQ(hold->state, m.state);
        ASSERT_EQ(hold->pool, m.pool);
      }
      for (const char* pool : {"pod-a", "pod64"}) {
        ASSERT_EQ(t.PoolUsage(pool)->busy_devices(), used[pool]) << seed << ":" << step;
      }
      const auto stats = t.Stats();
      ASSERT_EQ(stats.reserved + stats.committed + stats.releasing, static_cast<int>(model.size()));
    }
  }
}

class Writer : public extender::ClusterWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string&, const std::string&,
              const std::map<std::string, std::string>&) override {
    std::lock_guard lock(mu_);
    if (std::uniform_int_distribution<int>(0, 9)(rng_) == 0) return Error{"conflict"};
    return OkStatus();
  }
  void Event(const std::string&, const std::string&, const std::string&, std::string_view,
             std::string_view, std::string_view) override {}

 private:
  std::mutex mu_;
  std::mt19937_64 rng_{99};
};

TEST(PoolProvisioningPropertyTest, ConcurrentBindsAndDeletesWithFailuresNeverLeak) {
  auto pools =
      topology::PoolSet::Parse(testing::kTwoPools, "pools.yaml", topology::Catalog::Embedded())
          .value();
  provision::FakePartitionService fake({5ms, 5ms, 0.25, "", 3}, testing::SteadyNowNs);
  testing::InProcessService service(fake);
  provision::Provisioner provisioner(service, {60ms, 2ms, 40ms}, testing::SteadyNowNs,
                                     testing::RealSleep());
  Writer writer;
  extender::Metrics metrics;
  extender::ExtenderOptions options;
  options.resources.device.push_back("graphcore.ai/ipu");
  options.pools = &pools;
  options.provisioner = &provisioner;
  options.removal_retry = 5ms;
  extender::ExtenderService ext(topology::Catalog::Embedded(), options, writer, metrics,
                                testing::SteadyNowNs, [] { return int64_t{1}; });
  std::vector<kube::Node> nodes;
  for (const auto& h : kHeads) nodes.push_back(testing::PoolNode(h.node, h.pool));
  ext.ReplaceNodes(nodes);
  ext.ReplacePods({});
  ASSERT_TRUE(ext.Ready());

  std::atomic<int> bound{0};
  std::atomic<int> overlaps{0};
  std::atomic<bool> chaos_done{false};
  std::thread chaos([&] {
    std::mt19937_64 rng(5);
    while (!chaos_done) {
      const int c = std::uniform_int_distribution<int>(0, 9)(rng);
      if (c == 0) fake.SetGarbage(true);
      if (c == 1) fake.SetRemoveRefusals(3);
      if (c == 2) fake.SetLatency(std::chrono::milliseconds(80));  // over the create timeout
      std::this_thread::sleep_for(3ms);
      fake.SetGarbage(false);
      fake.SetLatency(5ms);
    }
  });
  std::vector<std::thread> workers;
  std::vector<std::vector<kube::Pod>> left(4);
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      std::vector<kube::Pod>& mine = left[static_cast<size_t>(w)];
      for (int i = 0; i < 60; ++i) {
        if (!mine.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
          const size_t k = std::uniform_int_distribution<size_t>(0, mine.size() - 1)(rng);
          ext.DeletePod(mine[k]);
          mine.erase(mine.begin() + static_cast<long>(k));
          continue;
        }
        const Head& h = kHeads[std::uniform_int_distribution<int>(0, 4)(rng)];
        const int sizes[] = {1, 2, 4, 8, 16};
        const int n = sizes[std::uniform_int_distribution<int>(0, 4)(rng)];
        const std::string uid = fmt::format("w{}-{}", w, i);
        auto pod = testing::IpuPod(uid, uid, n);
        ext.UpsertPod(pod);
        const std::string answer = ext.Bind({uid, "default", uid, h.node});
        if (answer.find("is in partition") != std::string::npos) ++overlaps;
        if (answer == R"({"Error":""})") {
          ++bound;
          pod.node_name = h.node;
        }
        mine.push_back(pod);  // deleted later whether bound or not
      }
    });
  }
  for (auto& w : workers) w.join();
  chaos_done = true;
  chaos.join();
  testing::WaitUntil([&] { return ext.PendingRemovals() == 0; }, 5s);
  ASSERT_EQ(ext.PendingRemovals(), 0u);
  EXPECT_GT(bound.load(), 10);
  EXPECT_EQ(overlaps.load(), 0);

  // Settled: every partition at the service is active and is exactly the devices its live,
  // committed pod holds; every held device is in such a partition.
  std::map<std::string, uint64_t> in_partitions;
  for (const auto& p : fake.Snapshot()) {
    EXPECT_EQ(p.state, provision::PartitionState::kActive) << p.name;
    const std::string owner = provision::OwnerOf(p.name);
    auto hold = ext.tracker().Find(owner);
    ASSERT_TRUE(hold.has_value()) << "partition " << p.name << " has no holder";
    EXPECT_EQ(hold->state, HoldState::kCommitted) << p.name;
    EXPECT_EQ(hold->pool, p.pool);
    EXPECT_EQ(MaskOf(hold->allocation.containers.at(0).placement.ids), MaskOf(p.ipus));
    EXPECT_EQ(in_partitions[p.pool] & MaskOf(p.ipus), 0u);
    in_partitions[p.pool] |= MaskOf(p.ipus);
  }
  for (const char* pool : {"pod-a", "pod64"}) {
    EXPECT_EQ(ext.tracker().PoolUsage(pool)->busy_devices(), in_partitions[pool]) << pool;
  }

  for (const auto& mine : left) {
    for (const auto& pod : mine) ext.DeletePod(pod);
  }
  testing::WaitUntil([&] { return ext.PendingRemovals() == 0; }, 5s);
  ASSERT_EQ(ext.PendingRemovals(), 0u);
  // Every pod was deleted: nothing is held and nothing is left at the service.
  EXPECT_TRUE(fake.Snapshot().empty());
  EXPECT_EQ(ext.tracker().PoolUsage("pod-a")->busy_devices(), 0u);
  EXPECT_EQ(ext.tracker().PoolUsage("pod64")->busy_devices(), 0u);
  const auto stats = ext.tracker().Stats();
  EXPECT_EQ(stats.reserved + stats.committed + stats.releasing, 0);
}

}  // namespace
}  // namespace toposched
