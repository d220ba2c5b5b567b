// Shared pools in tests: a PartitionService that talks to an in-process FakePartitionService
// through its JSON API (so the answers go through the same parsers as over HTTP), and helpers to
// make IPU head nodes and pods.
#ifndef TOPOSCHED_TEST_POOLS_FIXTURES_H_
#define TOPOSCHED_TEST_POOLS_FIXTURES_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "claims/keys.h"
#include "kube/objects.h"
#include "provision/fake_service.h"
#include "provision/service.h"
#include "support/pods.h"
#include "topology/pools.h"

namespace toposched::testing {

inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class InProcessService : public provision::PartitionService {
 public:
  explicit InProcessService(provision::FakePartitionService& fake) : fake_(fake) {}

  // Runs after each create the service accepted, in the caller's thread: what happens in the
  // cluster while the partition is being made.
  std::function<void()> after_create;

  Status Create(const provision::Partition& p) override {
    auto a = fake_.Handle("POST", "/partitions",
                          fmt::format(R"({{"name":"{}","pool":"{}","ipus":[{}]}})", p.name, p.pool,
                                      fmt::join(p.ipus, ",")),
                          "");
    if (a.status != 201) return Error{fmt::format("HTTP {}: {}", a.status, a.body)};
    if (after_create) after_create();
    return OkStatus();
  }
  Result<std::optional<provision::Partition>> Get(const std::string& name) override {
    auto a = fake_.Handle("GET", "/partitions/" + name, "", "");
    if (a.status == 404) return std::optional<provision::Partition>{};
    if (a.status != 200) return Error{fmt::format("HTTP {}", a.status)};
    auto p = provision::ParsePartition(a.body);
    if (!p.ok()) return Error{p.error()};
    return std::optional<provision::Partition>(*p);
  }
  Status Remove(const std::string& name) override {
    auto a = fake_.Handle("DELETE", "/partitions/" + name, "", "");
    if (a.status == 404 || a.status == 202) return OkStatus();
    return Error{fmt::format("HTTP {}: {}", a.status, a.body)};
  }
  Result<std::vector<provision::Partition>> List() override {
    auto a = fake_.Handle("GET", "/partitions", "", "");
    if (a.status != 200) return Error{fmt::format("HTTP {}", a.status)};
    return provision::ParsePartitionList(a.body);
  }

 private:
  provision::FakePartitionService& fake_;
};

inline provision::Provisioner::Sleep RealSleep() {
  return [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
}

// An IPU head node on a shared pool.
inline kube::Node PoolNode(const std::string& name, const std::string& pool) {
  kube::Node node;
  node.name = name;
  node.instance_type = "m5.8xlarge";
  node.labels[std::string(claims::kPoolLabel)] = pool;
  return node;
}

// A pending pod asking for `count` IPUs in one container.
inline kube::Pod IpuPod(const std::string& name, const std::string& uid, int count) {
  kube::Pod pod = MakePod(name, {{"main", "graphcore.ai/ipu", count}}, {}, /*node=*/"");
  pod.uid = uid;
  return pod;
}

inline constexpr const char* kTwoPools = R"(pools:
  - name: pod-a
    kind: ipu-pod16
  - name: pod64
    kind: ipu-pod16
    size: 64
)";

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_POOLS_FIXTURES_H_
