// The ResourceSlice publisher against the loopback fake API server: slices within the limits at
// one generation, nothing written when nothing changed (also after a restart), an unhealthy
// device withdrawn with a generation bump, a server without partitionable devices (field dropped
// or refused) leaves whole devices only, a conflicting update is retried, failures name the
// slice and the next call reads afresh, paginated reads, DeleteAll.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra/offers.h"
#include "dra/slices.h"
#include "dra_slice_limits.h"
#include "draplugin/slice_publisher.h"
#include "kube/client.h"
#include "support/fake_apiserver.h"
#include "topology/catalog.h"

namespace toposched::draplugin {
namespace {

using nlohmann::json;
using testing::FakeApiServer;
using ::testing::HasSubstr;
using testing::SharedCountersMode;

constexpr std::string_view kSlices = "/apis/resource.k8s.io/v1/resourceslices";

topology::NodeShape ShapeOf(const std::string& type, int lnc = 0) {
  const topology::InstanceType* t = topology::Catalog::Embedded().Find(type);
  if (t == nullptr) throw std::runtime_error("no instance type " + type);
  return topology::NodeShape::Make(*t, lnc).value();
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kube::ClientConfig config;
    config.server = server_.url();
    config.ca_pem = server_.ca_pem();
    config.token = "test-token";
    config.request_timeout = std::chrono::seconds(5);
    auto client = kube::ApiClient::Create(config);
    ASSERT_TRUE(client.ok()) << client.error();
    client_ = std::move(*client);
  }

  PublisherConfig Config(const std::string& type = "inf2.48xlarge", int lnc = 0,
                         Partitionable partitionable = Partitionable::kAuto) {
    PublisherConfig config;
    config.facts.node_name = "node-a";
    config.facts.node_uid = "uid-node-a";
    config.facts.dra_driver_version = "0.1.0";
    config.shape = ShapeOf(type, lnc);
    config.partitionable = partitionable;
    config.core_offers = true;
    return config;
  }

  std::vector<json> StoredSlices() const {
    std::vector<json> out;
    for (const std::string& name : server_.ResourceSliceNames()) {
      out.push_back(json::parse(*server_.GetResourceSliceJson(name)));
    }
    return out;
  }
  int Requests(std::string_view method) const {
    return static_cast<int>(server_.RequestsMatching(method, kSlices).size());
  }
  int Writes() const { return Requests("POST") + Requests("PUT") + Requests("DELETE"); }

  // The device names published, and every slice checked: limits, one generation, the count.
  std::vector<std::string> CheckPool(int64_t generation) const {
    const std::vector<json> slices = StoredSlices();
    std::vector<std::string> devices;
    for (const json& slice : slices) {
      testing::ExpectSliceWithinLimits(slice);
      EXPECT_EQ(slice["spec"]["pool"]["generation"], generation) << slice["metadata"]["name"];
      EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], slices.size());
      EXPECT_EQ(slice["spec"]["pool"]["name"], "node-a");
      for (const json& device : slice["spec"].value("devices", json::array())) {
        devices.push_back(device["name"]);
      }
    }
    return devices;
  }

  FakeApiServer server_;
  std::unique_ptr<kube::ApiClient> client_;
};

TEST_F(PublisherTest, PartitionableInf2WithinLimitsAtOneGeneration) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_TRUE(publisher.partitionable());
  EXPECT_EQ(publisher.generation(), 1);
  const std::vector<std::string> devices = CheckPool(1);
  const auto offers =
      dra::LegalOffers(ShapeOf("inf2.48xlarge"), dra::OfferScope::kDeviceSetsAndCores);
  EXPECT_EQ(std::set<std::string>(devices.begin(), devices.end()).size(), devices.size());
  EXPECT_EQ(devices.size(), offers.size());
  EXPECT_THAT(
      server_.ResourceSliceNames(),
      ::testing::ElementsAre("node-a-neuron-00", "node-a-neuron-01", "node-a-neuron-zc-00"));
  // Counter slice created before the device slices that consume it.
  const auto posts = server_.RequestsMatching("POST", kSlices);
  ASSERT_EQ(posts.size(), 3u);
  EXPECT_THAT(posts[0].body, HasSubstr("node-a-neuron-zc-00"));

  // Nothing changed: no request at all.
  const size_t before = server_.requests().size();
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_EQ(server_.requests().size(), before);

  // A restarted plugin reads the slices, recognises its own plan and writes nothing.
  SlicePublisher restarted(*client_, Config());
  const int writes = Writes();
  ASSERT_TRUE(restarted.Publish(0, {}).ok());
  EXPECT_EQ(Writes(), writes);
  EXPECT_TRUE(restarted.partitionable());
  EXPECT_EQ(restarted.generation(), 1);
}

// kubelet wipes a node's slices when it starts: the plugin's periodic fresh read puts them back.
TEST_F(PublisherTest, SlicesWipedBehindItsBackComeBackAfterAFreshRead) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  for (const std::string& name : server_.ResourceSliceNames()) {
    ASSERT_TRUE(client_->Delete(std::string(kSlices) + "/" + name).ok());
  }
  ASSERT_TRUE(server_.ResourceSliceNames().empty());
  // Trusting what it wrote, it sees nothing to do...
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_TRUE(server_.ResourceSliceNames().empty());
  // ...until it is told to look again.
  publisher.ForgetPublished();
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_EQ(server_.ResourceSliceNames().size(), 3u);
  CheckPool(publisher.generation());
}

TEST_F(PublisherTest, Trn2AtLnc1NeedsSeveralSlices) {
  SlicePublisher publisher(*client_, Config("trn2.48xlarge", 1));
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  const std::vector<std::string> devices = CheckPool(1);
  EXPECT_EQ(
      devices.size(),
      dra::LegalOffers(ShapeOf("trn2.48xlarge", 1), dra::OfferScope::kDeviceSetsAndCores).size());
  EXPECT_GT(server_.ResourceSliceNames().size(), 3u);
}

// Core ranges are published only with --core-offers: without it (and with --set-offers on) a
// trn2.48xlarge offers its 16 devices and 7 sets (not 183 offers) and only the device counters,
// which is what kube-scheduler's allocator converts and matches per pod per node.
TEST_F(PublisherTest, WithoutCoreOffersOnlyDevicesSetsAndDeviceCounters) {
  PublisherConfig config = Config("trn2.48xlarge", 2);
  config.core_offers = false;
  config.set_offers = dra::SetOffers::kOn;
  SlicePublisher publisher(*client_, config);
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  const std::vector<std::string> devices = CheckPool(1);
  EXPECT_EQ(devices.size(), 23u);
  for (const std::string& name : devices) EXPECT_FALSE(name.starts_with("neuroncores")) << name;
  size_t counter_sets = 0;
  for (const json& slice : StoredSlices()) {
    for (const json& set : slice["spec"].value("sharedCounters", json::array())) {
      EXPECT_EQ(set["name"], "neurondevices");
      EXPECT_EQ(set["counters"].size(), 16u);
      ++counter_sets;
    }
  }
  EXPECT_EQ(counter_sets, 1u);
}

// --set-offers auto on Trainium: AWS's form (16 whole devices, one slice, no counter slice, no
// question to the API server about counters), each device naming its aligned groups; an
// Inferentia ring keeps its sets, which no attribute could say.
TEST_F(PublisherTest, AutoSetOffersPublishWholeDevicesOnTrainiumSetsOnInferentia) {
  PublisherConfig config = Config("trn2.48xlarge", 2);
  config.core_offers = false;
  SlicePublisher publisher(*client_, config);
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_FALSE(publisher.partitionable());
  EXPECT_TRUE(publisher.Offers(dra::OfferKind::kDevice));
  EXPECT_FALSE(publisher.Offers(dra::OfferKind::kDeviceSet));
  EXPECT_FALSE(publisher.Offers(dra::OfferKind::kCores));
  const std::vector<std::string> devices = CheckPool(1);
  ASSERT_EQ(devices.size(), 16u);
  const std::vector<json> slices = StoredSlices();
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_FALSE(slices[0]["spec"].contains("sharedCounters"));
  for (const json& device : slices[0]["spec"]["devices"]) {
    EXPECT_FALSE(device.contains("consumesCounters")) << device["name"];
    const int id = device["attributes"]["deviceId"]["int"];
    for (int size : {4, 8, 16}) {
      const std::string group = "resource.aws.com/devicegroup" + std::to_string(size) + "_id";
      ASSERT_TRUE(device["attributes"].contains(group)) << device["name"] << " " << group;
      // Same value exactly on the devices of one aligned group.
      for (const json& other : slices[0]["spec"]["devices"]) {
        const int other_id = other["attributes"]["deviceId"]["int"];
        EXPECT_EQ(other["attributes"][group] == device["attributes"][group],
                  other_id / size == id / size)
            << device["name"] << " " << other["name"] << " " << group;
      }
    }
  }
  PublisherConfig ring = Config("inf2.48xlarge");
  ring.core_offers = false;
  ring.facts.node_name = "node-b";
  SlicePublisher ring_publisher(*client_, ring);
  ASSERT_TRUE(ring_publisher.Publish(0, {}).ok());
  EXPECT_TRUE(ring_publisher.partitionable());
  EXPECT_TRUE(ring_publisher.Offers(dra::OfferKind::kDeviceSet));
  EXPECT_FALSE(ring_publisher.Offers(dra::OfferKind::kCores));
  EXPECT_EQ(server_.ResourceSliceNames().size(), 1u + 3u);  // trn2's one; inf2's 2 + 1 counters
}

// A node restarted from sets to AWS's form (the flag's default changed, or set by hand): the set
// offers and the counter slice are gone after the first publish, the devices stay.
TEST_F(PublisherTest, FromSetOffersToWholeDevicesRemovesTheSetsAndCounters) {
  PublisherConfig config = Config("trn2.48xlarge", 2);
  config.core_offers = false;
  config.set_offers = dra::SetOffers::kOn;
  {
    SlicePublisher publisher(*client_, config);
    ASSERT_TRUE(publisher.Publish(0, {}).ok());
    EXPECT_EQ(CheckPool(1).size(), 23u);
  }
  config.set_offers = dra::SetOffers::kAuto;
  SlicePublisher publisher(*client_, config);
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  const std::vector<std::string> devices = CheckPool(2);
  EXPECT_EQ(devices.size(), 16u);
  for (const std::string& name : devices) EXPECT_TRUE(name.starts_with("neurondevice")) << name;
  for (const json& slice : StoredSlices()) EXPECT_FALSE(slice["spec"].contains("sharedCounters"));
}

TEST_F(PublisherTest, UnhealthyDeviceWithdrawsEveryOfferTouchingIt) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  const topology::DeviceMask unhealthy = topology::DeviceMask{1} << 3;
  ASSERT_TRUE(publisher.Publish(unhealthy, {}).ok());
  EXPECT_EQ(publisher.generation(), 2);
  const auto shape = ShapeOf("inf2.48xlarge");
  const std::vector<std::string> devices = CheckPool(2);
  EXPECT_EQ(devices.size(),
            dra::LegalOffers(shape, dra::OfferScope::kDeviceSetsAndCores, unhealthy).size());
  for (const std::string& name : devices) {
    auto offer = dra::OfferFromName(shape, name);
    ASSERT_TRUE(offer.ok()) << offer.error();
    EXPECT_EQ(offer->placement.devices & unhealthy, 0u) << name;
  }
  // Healthy again: the offers come back, one generation later.
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_EQ(CheckPool(3).size(),
            dra::LegalOffers(shape, dra::OfferScope::kDeviceSetsAndCores).size());
}

TEST_F(PublisherTest, UsageReordersTheOffers) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  topology::NodeUsage usage;
  const auto shape = ShapeOf("inf2.48xlarge");
  ASSERT_TRUE(usage.Take(shape, topology::Unit::kDevice, {0}));
  publisher.ObserveRequest({topology::Unit::kDevice, 1});
  ASSERT_TRUE(publisher.Publish(0, usage).ok());
  const std::vector<std::string> devices = CheckPool(publisher.generation());
  ASSERT_FALSE(devices.empty());
  EXPECT_NE(devices.front(), "neurondevice0");  // taken: not the first a claim meets
}

TEST_F(PublisherTest, IndexOrderStartsWithDeviceZero) {
  PublisherConfig config = Config();
  config.order = PublishOrder::kIndex;
  SlicePublisher publisher(*client_, config);
  topology::NodeUsage usage;
  ASSERT_TRUE(usage.Take(ShapeOf("inf2.48xlarge"), topology::Unit::kDevice, {0}));
  ASSERT_TRUE(publisher.Publish(0, usage).ok());
  EXPECT_EQ(CheckPool(1).front(), "neurondevice0");
}

TEST_F(PublisherTest, GateOffServerDropsTheCountersWholeDevicesOnly) {
  server_.set_shared_counters_mode(SharedCountersMode::kDrop);
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_FALSE(publisher.partitionable());
  EXPECT_THAT(server_.ResourceSliceNames(), ::testing::ElementsAre("node-a-neuron-00"));
  const std::vector<std::string> devices = CheckPool(publisher.generation());
  EXPECT_EQ(devices.size(), 12u);
  for (const std::string& name : devices) EXPECT_THAT(name, ::testing::StartsWith("neurondevice"));
  // The probe slice was created, found without its counters, and deleted.
  const auto deletes = server_.RequestsMatching("DELETE", kSlices);
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_THAT(deletes[0].path, HasSubstr("node-a-neuron-zc-00"));
  // Decided once: later calls do not probe again.
  ASSERT_TRUE(publisher.Publish(topology::DeviceMask{1}, {}).ok());
  EXPECT_EQ(server_.RequestsMatching("DELETE", kSlices).size(), 1u);
  EXPECT_EQ(CheckPool(publisher.generation()).size(), 11u);
}

TEST_F(PublisherTest, ServerRefusingTheFieldMeansWholeDevicesToo) {
  server_.set_shared_counters_mode(SharedCountersMode::kRefuse);
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_FALSE(publisher.partitionable());
  EXPECT_THAT(server_.ResourceSliceNames(), ::testing::ElementsAre("node-a-neuron-00"));
  EXPECT_EQ(CheckPool(publisher.generation()).size(), 12u);
}

TEST_F(PublisherTest, OnAgainstAGateOffServerIsAnError) {
  server_.set_shared_counters_mode(SharedCountersMode::kDrop);
  SlicePublisher publisher(*client_, Config("inf2.48xlarge", 0, Partitionable::kOn));
  Status status = publisher.Publish(0, {});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error(), HasSubstr("sharedCounters"));
  EXPECT_THAT(status.error(), HasSubstr("node-a-neuron-zc-00"));
}

TEST_F(PublisherTest, OffNeverWritesCounters) {
  SlicePublisher publisher(*client_, Config("inf2.48xlarge", 0, Partitionable::kOff));
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_FALSE(publisher.partitionable());
  EXPECT_EQ(CheckPool(1).size(), 12u);
  EXPECT_EQ(Requests("DELETE"), 0);
}

TEST_F(PublisherTest, SwitchingToWholeDevicesDeletesTheCounterSlicesLast) {
  {
    SlicePublisher publisher(*client_, Config());
    ASSERT_TRUE(publisher.Publish(0, {}).ok());
  }
  SlicePublisher off(*client_, Config("inf2.48xlarge", 0, Partitionable::kOff));
  ASSERT_TRUE(off.Publish(0, {}).ok());
  EXPECT_EQ(off.generation(), 2);
  EXPECT_THAT(server_.ResourceSliceNames(), ::testing::ElementsAre("node-a-neuron-00"));
  EXPECT_EQ(CheckPool(2).size(), 12u);
  const auto requests = server_.requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests.back().method, "DELETE");
}

TEST_F(PublisherTest, StaleResourceVersionIsReadAgainAndRetried) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  // Someone else updates one of our slices: our resourceVersion for it is stale now.
  server_.PutResourceSlice(*server_.GetResourceSliceJson("node-a-neuron-01"));
  ASSERT_TRUE(publisher.Publish(topology::DeviceMask{1} << 11, {}).ok());
  EXPECT_EQ(server_.RequestsMatching("GET", std::string(kSlices) + "/node-a-neuron-01").size(), 1u);
  EXPECT_EQ(server_.RequestsMatching("PUT", std::string(kSlices) + "/node-a-neuron-01").size(), 2u);
  CheckPool(2);
}

TEST_F(PublisherTest, FailureNamesTheSliceAndTheNextCallReadsAfresh) {
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  server_.InjectFailure({"PUT", std::string(kSlices) + "/node-a-neuron-00", 500});
  Status status = publisher.Publish(topology::DeviceMask{1}, {});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error(), HasSubstr("node-a-neuron-00"));
  EXPECT_THAT(status.error(), HasSubstr("HTTP 500"));
  EXPECT_THAT(status.error(), HasSubstr("injected failure"));
  const size_t lists = server_.RequestsMatching("GET", kSlices).size();
  ASSERT_TRUE(publisher.Publish(topology::DeviceMask{1}, {}).ok());
  EXPECT_EQ(server_.RequestsMatching("GET", kSlices).size(), lists + 1);  // the fresh read
  // The pool is whole again at one generation, above every half-written one.
  EXPECT_EQ(
      CheckPool(publisher.generation()).size(),
      dra::LegalOffers(ShapeOf("inf2.48xlarge"), dra::OfferScope::kDeviceSetsAndCores, 1).size());
}

TEST_F(PublisherTest, ReadsEveryPageAndDeletesWhatIsNotInThePlan) {
  // 150 leftovers of ours on this node (an older driver's naming), a slice of another node and
  // one of another driver: the publisher lists its own over two pages and removes them.
  for (int i = 0; i < 150; ++i) {
    server_.PutResourceSlice(
        json{{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceSlice"},
             {"metadata", {{"name", "node-a-old-" + std::to_string(i)}}},
             {"spec",
              {{"driver", "neuron.aws.com"},
               {"nodeName", "node-a"},
               {"pool", {{"name", "node-a"}, {"generation", 5}, {"resourceSliceCount", 150}}}}}}
            .dump());
  }
  const json other = {
      {"metadata", {{"name", "node-b-neuron-00"}}},
      {"spec",
       {{"driver", "neuron.aws.com"},
        {"nodeName", "node-b"},
        {"pool", {{"name", "node-b"}, {"generation", 1}, {"resourceSliceCount", 1}}}}}};
  const json foreign = {
      {"metadata", {{"name", "node-a-gpu"}}},
      {"spec",
       {{"driver", "gpu.example.com"},
        {"nodeName", "node-a"},
        {"pool", {{"name", "node-a"}, {"generation", 9}, {"resourceSliceCount", 1}}}}}};
  server_.PutResourceSlice(other.dump());
  server_.PutResourceSlice(foreign.dump());
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_EQ(publisher.generation(), 6);  // above the leftovers' 5
  const auto lists = server_.RequestsMatching("GET", kSlices);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_THAT(lists[1].query, HasSubstr("continue="));
  EXPECT_THAT(server_.ResourceSliceNames(),
              ::testing::ElementsAre("node-a-gpu", "node-a-neuron-00", "node-a-neuron-01",
                                     "node-a-neuron-zc-00", "node-b-neuron-00"));
}

TEST_F(PublisherTest, DeleteAllRemovesOnlyOurSlicesOfThisNode) {
  const json other = {
      {"metadata", {{"name", "node-b-neuron-00"}}},
      {"spec",
       {{"driver", "neuron.aws.com"},
        {"nodeName", "node-b"},
        {"pool", {{"name", "node-b"}, {"generation", 1}, {"resourceSliceCount", 1}}}}}};
  server_.PutResourceSlice(other.dump());
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  ASSERT_TRUE(publisher.DeleteAll().ok());
  EXPECT_THAT(server_.ResourceSliceNames(), ::testing::ElementsAre("node-b-neuron-00"));
  // And publishing again recreates the pool.
  ASSERT_TRUE(publisher.Publish(0, {}).ok());
  EXPECT_EQ(server_.ResourceSliceNames().size(), 4u);
}

TEST(PublisherFlags, Parse) {
  EXPECT_EQ(*ParsePartitionable("auto"), Partitionable::kAuto);
  EXPECT_EQ(*ParsePartitionable("on"), Partitionable::kOn);
  EXPECT_EQ(*ParsePartitionable("off"), Partitionable::kOff);
  EXPECT_FALSE(ParsePartitionable("yes").ok());
  EXPECT_EQ(*ParsePublishOrder("scarcity"), PublishOrder::kScarcity);
  EXPECT_EQ(*ParsePublishOrder("index"), PublishOrder::kIndex);
  EXPECT_FALSE(ParsePublishOrder("random").ok());
  EXPECT_EQ(*dra::ParseSetOffers("auto"), dra::SetOffers::kAuto);
  EXPECT_EQ(*dra::ParseSetOffers("on"), dra::SetOffers::kOn);
  EXPECT_EQ(*dra::ParseSetOffers("off"), dra::SetOffers::kOff);
  EXPECT_FALSE(dra::ParseSetOffers("sets").ok());
}

// On a cluster that serves device taints (1.37), a failed device's offers stay published with the
// taint, found out by one dry-run create; every other offer is as before; recovery removes it.
TEST_F(PublisherTest, FailedDeviceTaintsItsOffersWhereTheClusterServesTaints) {
  for (const bool evict : {false, true}) {
    SCOPED_TRACE(evict ? "evict" : "event");
    FakeApiServer server;
    kube::ClientConfig client_config;
    client_config.server = server.url();
    client_config.ca_pem = server.ca_pem();
    client_config.token = "test-token";
    auto client = kube::ApiClient::Create(client_config);
    ASSERT_TRUE(client.ok()) << client.error();
    PublisherConfig config = Config();
    if (evict) config.failure_effect = dra::TaintEffect::kNoExecute;
    SlicePublisher publisher(**client, config);
    ASSERT_TRUE(publisher.Publish(0, {}, {}).ok());
    EXPECT_FALSE(publisher.taints_served().has_value());  // nothing failed: nothing asked
    auto devices_now = [&] {
      std::map<std::string, json> out;
      for (const std::string& name : server.ResourceSliceNames()) {
        const json slice = json::parse(*server.GetResourceSliceJson(name));
        testing::ExpectSliceWithinLimits(slice);
        for (const json& device : slice["spec"].value("devices", json::array())) {
          out[device["name"]] = device;
        }
      }
      return out;
    };
    const auto healthy = devices_now();

    const dra::DeviceFaults faults = {{3, {"device-node-missing", "2026-11-29T12:00:00Z"}}};
    ASSERT_TRUE(publisher.Publish(0, faults, {}).ok());
    EXPECT_EQ(publisher.taints_served(), std::optional<bool>(true));
    EXPECT_EQ(server.RequestsMatching("POST", kSlices).back().query, "dryRun=All");
    EXPECT_EQ(publisher.generation(), 2);
    const auto tainted = devices_now();
    ASSERT_EQ(tainted.size(), healthy.size());  // nothing withdrawn
    const auto shape = ShapeOf("inf2.48xlarge");
    int with_taint = 0;
    for (const auto& [name, device] : tainted) {
      auto offer = dra::OfferFromName(shape, name);
      ASSERT_TRUE(offer.ok()) << offer.error();
      const bool touches = (offer->placement.devices >> 3 & 1) != 0;
      EXPECT_EQ(device.contains("taints"), touches) << name;
      if (!touches) {
        EXPECT_EQ(device.dump(), healthy.at(name).dump()) << name;
        continue;
      }
      ++with_taint;
      EXPECT_EQ(device["taints"][0]["key"], "toposched.io/unhealthy");
      EXPECT_EQ(device["taints"][0]["effect"], evict ? "NoExecute" : "NoSchedule");
      EXPECT_EQ(device["taints"][0]["value"], "neuron3-device-node-missing");
      EXPECT_EQ(device["taints"][0]["timeAdded"], "2026-11-29T12:00:00Z");
    }
    EXPECT_GT(with_taint, 3);  // the device, sets through it, its core ranges

    // The same fault again: nothing written, nothing asked.
    const size_t before = server.requests().size();
    ASSERT_TRUE(publisher.Publish(0, faults, {}).ok());
    EXPECT_EQ(server.requests().size(), before);

    // A device also held outside DRA stays withdrawn.
    ASSERT_TRUE(publisher.Publish(topology::DeviceMask{1} << 3, faults, {}).ok());
    for (const auto& [name, device] : devices_now()) {
      EXPECT_FALSE(device.contains("taints")) << name;
      EXPECT_EQ(dra::OfferFromName(shape, name)->placement.devices >> 3 & 1, 0u) << name;
    }

    // Healthy again: the taint goes, every offer as before.
    ASSERT_TRUE(publisher.Publish(0, {}, {}).ok());
    const auto recovered = devices_now();
    ASSERT_EQ(recovered.size(), healthy.size());
    for (const auto& [name, device] : recovered) EXPECT_EQ(device.dump(), healthy.at(name).dump());
  }
}

// Where the cluster drops device taints (1.34), a failed device's offers are withdrawn as before,
// and the probe is not repeated.
TEST_F(PublisherTest, FailedDeviceWithdrawnWhereTheClusterDropsTaints) {
  server_.set_device_taints_mode(testing::DeviceTaintsMode::kDrop);
  SlicePublisher publisher(*client_, Config());
  ASSERT_TRUE(publisher.Publish(0, {}, {}).ok());
  const dra::DeviceFaults faults = {{3, {"device-node-missing", "2026-11-29T12:00:00Z"}}};
  ASSERT_TRUE(publisher.Publish(0, faults, {}).ok());
  EXPECT_EQ(publisher.taints_served(), std::optional<bool>(false));
  const auto shape = ShapeOf("inf2.48xlarge");
  const topology::DeviceMask dead = topology::DeviceMask{1} << 3;
  const std::vector<std::string> devices = CheckPool(2);
  EXPECT_EQ(devices.size(),
            dra::LegalOffers(shape, dra::OfferScope::kDeviceSetsAndCores, dead).size());
  for (const std::string& name : devices) {
    EXPECT_EQ(dra::OfferFromName(shape, name)->placement.devices & dead, 0u) << name;
  }
  for (const json& slice : StoredSlices()) {
    for (const json& device : slice["spec"].value("devices", json::array())) {
      EXPECT_FALSE(device.contains("taints"));
    }
  }
  // Another device fails: decided already, no second probe.
  auto probes = [&] {
    int n = 0;
    for (const auto& request : server_.RequestsMatching("POST", kSlices)) {
      n += request.query == "dryRun=All" ? 1 : 0;
    }
    return n;
  };
  EXPECT_EQ(probes(), 1);
  ASSERT_TRUE(publisher.Publish(0, {{3, faults.at(3)}, {4, faults.at(3)}}, {}).ok());
  EXPECT_EQ(probes(), 1);
  // Recovery brings every offer back.
  ASSERT_TRUE(publisher.Publish(0, {}, {}).ok());
  EXPECT_EQ(CheckPool(4).size(),
            dra::LegalOffers(shape, dra::OfferScope::kDeviceSetsAndCores).size());
}

// --device-taints off withdraws without asking; on taints without asking.
TEST_F(PublisherTest, DeviceTaintsFlagDecidesWithoutAProbe) {
  const dra::DeviceFaults faults = {{0, {"device-node-missing", "2026-11-29T12:00:00Z"}}};
  PublisherConfig off = Config();
  off.device_taints = DeviceTaints::kOff;
  SlicePublisher withdrawing(*client_, off);
  ASSERT_TRUE(withdrawing.Publish(0, faults, {}).ok());
  EXPECT_EQ(withdrawing.taints_served(), std::optional<bool>(false));
  for (const std::string& name : CheckPool(1)) EXPECT_NE(name, "neurondevice0");
  PublisherConfig on = Config();
  on.device_taints = DeviceTaints::kOn;
  SlicePublisher tainting(*client_, on);
  ASSERT_TRUE(tainting.Publish(0, faults, {}).ok());
  const std::vector<std::string> names = CheckPool(2);
  EXPECT_NE(std::find(names.begin(), names.end(), "neurondevice0"), names.end());
  for (const auto& request : server_.RequestsMatching("POST", kSlices)) {
    EXPECT_EQ(request.query, "") << request.target;
  }
}

TEST(PublisherFlags, OnDeviceFailureAndDeviceTaintsParse) {
  EXPECT_EQ(ParseOnDeviceFailure("event").value(), dra::TaintEffect::kNoSchedule);
  EXPECT_EQ(ParseOnDeviceFailure("evict").value(), dra::TaintEffect::kNoExecute);
  EXPECT_THAT(ParseOnDeviceFailure("drain").error(), HasSubstr("event or evict"));
  EXPECT_EQ(ParseDeviceTaints("auto").value(), DeviceTaints::kAuto);
  EXPECT_THAT(ParseDeviceTaints("yes").error(), HasSubstr("auto, on or off"));
}

}  // namespace
}  // namespace toposched::draplugin
