// What the DRA plugin's tests share: a publisher that records what the plugin published (the
// devices it withheld and the cores in use), a ResourceClaim as the API server serves it, and the
// node a fake host tree describes.
#ifndef TOPOSCHED_TEST_DRAPLUGIN_FIXTURES_H_
#define TOPOSCHED_TEST_DRAPLUGIN_FIXTURES_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "draplugin/plugin.h"
#include "node_fixtures.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/sysfs.h"
#include "topology/catalog.h"

namespace toposched::testing {

inline constexpr char kDraNode[] = "node-a";  // the node, and so the pool, of the tests

// The plugin's Node as the API server has it (labelled for DRA): the plugin labels it
// toposched.io/dra-claims-held while claims are prepared.
inline std::string DraNodeJson() {
  return std::string(R"({"kind":"Node","apiVersion":"v1","metadata":{"name":")") + kDraNode +
         R"(","uid":"node-a-uid","labels":{"toposched.io/neuron-management":"dra"}}})";
}

class FakePublisher : public draplugin::UsagePublisher {
 public:
  // `unhealthy()` is every device the plugin withheld or reported failed.
  Status Publish(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                 const topology::NodeUsage& usage) override {
    std::lock_guard lock(mutex_);
    ++publishes_;
    unhealthy_ = withheld;
    for (const auto& [device, fault] : faults) unhealthy_ |= topology::DeviceMask{1} << device;
    faults_ = faults;
    used_cores_ = usage.used_core_count();
    if (fail_) return Error{"the API server is away"};
    return OkStatus();
  }
  void ObserveRequest(const topology::Request& request) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
  }
  int publishes() const {
    std::lock_guard lock(mutex_);
    return publishes_;
  }
  int used_cores() const {
    std::lock_guard lock(mutex_);
    return used_cores_;
  }
  topology::DeviceMask unhealthy() const {
    std::lock_guard lock(mutex_);
    return unhealthy_;
  }
  dra::DeviceFaults faults() const {
    std::lock_guard lock(mutex_);
    return faults_;
  }
  std::vector<topology::Request> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  void set_fail(bool fail) {
    std::lock_guard lock(mutex_);
    fail_ = fail;
  }
  void ForgetPublished() override { ++forgets_; }
  bool Offers(dra::OfferKind kind) const override {
    std::lock_guard lock(mutex_);
    return kind != dra::OfferKind::kDeviceSet || sets_offered_;
  }
  void set_sets_offered(bool offered) {
    std::lock_guard lock(mutex_);
    sets_offered_ = offered;
  }
  int forgets() const { return forgets_; }

 private:
  mutable std::mutex mutex_;
  int publishes_ = 0;
  int used_cores_ = 0;
  topology::DeviceMask unhealthy_ = 0;
  dra::DeviceFaults faults_;
  bool sets_offered_ = true;
  bool fail_ = false;
  std::vector<topology::Request> requests_;
  std::atomic<int> forgets_{0};
};

// A resource.k8s.io/v1 ResourceClaim allocated `devices` (request "neurons") on `pool`.
inline std::string ClaimJson(const std::string& name, const std::string& uid,
                             const std::vector<std::string>& devices,
                             const std::string& pool = kDraNode,
                             const nlohmann::json& spec_config = nlohmann::json::array()) {
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& device : devices) {
    results.push_back(
        {{"request", "neurons"}, {"driver", "neuron.aws.com"}, {"pool", pool}, {"device", device}});
  }
  nlohmann::json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"namespace", "default"}, {"name", name}, {"uid", uid}}},
      {"spec",
       {{"devices",
         {{"requests", {{{"name", "neurons"}, {"exactly", {{"deviceClassName", "x"}}}}}},
          {"config", spec_config}}}}},
      {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
  return claim.dump();
}

inline std::string ClaimPath(const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + name;
}

// The paths of `host` and the node they describe (ASSERTs on failure: call through
// ASSERT_NO_FATAL_FAILURE).
inline void DiscoverFakeHost(const toposched::testing::FakeHost& host, nodeagent::HostPaths& paths,
                             std::unique_ptr<nodeagent::NodeTopology>& topology) {
  paths.sysfs_root = host.sys();
  paths.dev_root = host.dev();
  paths.opt_aws_root = host.opt();
  auto inventory = nodeagent::Discover(paths);
  ASSERT_TRUE(inventory.ok()) << inventory.error();
  auto resolved = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(resolved.ok()) << resolved.error();
  topology = std::make_unique<nodeagent::NodeTopology>(std::move(resolved).value());
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_DRAPLUGIN_FIXTURES_H_
