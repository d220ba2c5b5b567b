// What a node offers through DRA (dra/offers.h) and the slices that publish it (dra/slices.h),
// pure: the shared counters make exactly the overlapping offers exclusive (brute force over every
// pair), the offers are exactly the legal sets of the topology engine, names round-trip, the
// publish order, slice names and the per-slice limits.
#include <algorithm>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra/offers.h"
#include "dra/slices.h"
#include "dra_slice_limits.h"
#include "support/legality_oracle.h"
#include "topology/catalog.h"
#include "topology/demand.h"

namespace toposched::dra {
namespace {

using ::testing::HasSubstr;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Unit;

NodeShape ShapeOf(const std::string& type, int lnc = 0) {
  const topology::InstanceType* t = topology::Catalog::Embedded().Find(type);
  if (t == nullptr) throw std::runtime_error("no instance type " + type);
  auto shape = NodeShape::Make(*t, lnc);
  if (!shape.ok()) throw std::runtime_error(shape.error());
  return shape.value();
}

// The shapes the brute-force checks cover: a ring, the Trainium torus at both LNCs, and the
// ring with 4 cores per device.
std::vector<std::pair<std::string, NodeShape>> Shapes() {
  return {{"inf2.48xlarge", ShapeOf("inf2.48xlarge")},
          {"trn1.32xlarge", ShapeOf("trn1.32xlarge")},
          {"trn2.48xlarge lnc1", ShapeOf("trn2.48xlarge", 1)},
          {"trn2.48xlarge lnc2", ShapeOf("trn2.48xlarge", 2)},
          {"inf1.24xlarge", ShapeOf("inf1.24xlarge")}};
}

std::set<int> CoreSet(const NodeShape& shape, const Offer& offer) {
  const std::vector<int> cores = CoresOfOffer(shape, offer);
  return {cores.begin(), cores.end()};
}

bool Intersect(const std::set<int>& a, const std::set<int>& b) {
  return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) != 0; });
}

using Consumption = std::map<std::pair<std::string, std::string>, int64_t>;

Consumption ConsumptionOf(const NodeShape& shape, const Offer& offer) {
  Consumption out;
  for (const CounterUse& use : CountersConsumedBy(shape, offer)) {
    for (const auto& [counter, value] : use.counters) out[{use.counter_set, counter}] += value;
  }
  return out;
}

TEST(DraCounters, OverlapIffTheCountersWouldBeOverdrawn) {
  for (const auto& [label, shape] : Shapes()) {
    SCOPED_TRACE(label);
    const auto sets = CounterSetsOf(shape, true);
    std::map<std::pair<std::string, std::string>, int64_t> available;
    for (const auto& [set, counters] : sets) {
      EXPECT_LE(counters.size(), size_t{kMaxCountersPerSet}) << set;
      for (const auto& [counter, value] : counters) available[{set, counter}] = value;
    }
    const std::vector<Offer> offers = LegalOffers(shape, OfferScope::kDeviceSetsAndCores);
    std::vector<Consumption> consumption;
    std::vector<std::set<int>> cores;
    for (const Offer& offer : offers) {
      SCOPED_TRACE(offer.name);
      const std::vector<CounterUse> uses = CountersConsumedBy(shape, offer);
      EXPECT_LE(uses.size(), size_t{kMaxConsumptionsPerDevice});
      for (const CounterUse& use : uses) EXPECT_LE(use.counters.size(), size_t{kMaxCountersPerSet});
      consumption.push_back(ConsumptionOf(shape, offer));
      // Alone, every offer fits: each counter it names exists and holds enough.
      for (const auto& [key, value] : consumption.back()) {
        ASSERT_EQ(available.count(key), 1u) << key.first << "/" << key.second;
        EXPECT_LE(value, available[key]) << key.second;
      }
      cores.push_back(CoreSet(shape, offer));
    }
    int overlapping = 0;
    for (size_t i = 0; i < offers.size(); ++i) {
      for (size_t j = i + 1; j < offers.size(); ++j) {
        const bool overlap = Intersect(cores[i], cores[j]);
        bool overdrawn = false;
        for (const auto& [key, value] : consumption[i]) {
          auto other = consumption[j].find(key);
          if (other != consumption[j].end() && value + other->second > available[key]) {
            overdrawn = true;
            break;
          }
        }
        overlapping += overlap;
        ASSERT_EQ(overlap, overdrawn) << offers[i].name << " and " << offers[j].name;
      }
    }
    EXPECT_GT(overlapping, 0);
  }
}

// The request an offer answers.
topology::Request RequestOf(const Offer& offer) {
  return {offer.kind == OfferKind::kCores ? Unit::kCore : Unit::kDevice,
          static_cast<int>(offer.placement.ids.size())};
}

TEST(DraOffers, ExactlyTheLegalSetsAreOffered) {
  const NodeUsage empty;
  for (const auto& [label, shape] : Shapes()) {
    SCOPED_TRACE(label);
    const std::vector<Offer> offers = LegalOffers(shape, OfferScope::kDeviceSetsAndCores);
    std::set<std::pair<OfferKind, std::vector<int>>> offered;
    std::set<std::string> names;
    for (const Offer& offer : offers) {
      offered.insert({offer.kind, offer.placement.ids});
      EXPECT_TRUE(names.insert(offer.name).second) << "duplicate name " << offer.name;
      // Never an illegal set: the independent oracle agrees, and so does the allocator.
      EXPECT_EQ(testing::WhyIllegal(shape, offer.placement), "") << offer.name;
      EXPECT_EQ(topology::CheckRequestShape(shape, RequestOf(offer)), "") << offer.name;
      if (offer.kind == OfferKind::kCores) {
        EXPECT_EQ(std::popcount(offer.placement.devices), 1) << offer.name;
      }
      EXPECT_EQ(offer.kind == OfferKind::kDevice,
                offer.kind != OfferKind::kCores && offer.placement.ids.size() == 1)
          << offer.name;
    }
    // Every legal set of the topology engine is offered.
    for (int n = 1; n <= shape.devices; ++n) {
      for (const topology::Placement& p :
           topology::LegalPlacements(shape, empty, {Unit::kDevice, n})) {
        if (n > 1 && shape.type->rule == topology::LegalSetRule::kAny && n != shape.devices)
          continue;
        const OfferKind kind = n == 1 ? OfferKind::kDevice : OfferKind::kDeviceSet;
        EXPECT_EQ(offered.count({kind, p.ids}), 1u) << n << " devices from " << p.ids.front();
      }
    }
    for (int n = 1; n <= shape.cores_per_device; ++n) {
      for (const topology::Placement& p :
           topology::LegalPlacements(shape, empty, {Unit::kCore, n})) {
        if (std::popcount(p.devices) != 1) continue;  // spans devices: claimed as a device set
        EXPECT_EQ(offered.count({OfferKind::kCores, p.ids}), 1u)
            << n << " cores from " << p.ids.front();
      }
    }
    // And nothing else: each offer is one of the engine's placements for its request.
    for (const Offer& offer : offers) {
      const auto legal = topology::LegalPlacements(shape, empty, RequestOf(offer));
      const bool found = std::any_of(legal.begin(), legal.end(), [&](const topology::Placement& p) {
        return p.ids == offer.placement.ids;
      });
      EXPECT_TRUE(found) << offer.name;
    }
  }
  // Concretely: a ring offers 3-device sets, the torus never does.
  auto has = [](const std::vector<Offer>& offers, const std::string& name) {
    return std::any_of(offers.begin(), offers.end(),
                       [&](const Offer& o) { return o.name == name; });
  };
  EXPECT_TRUE(has(LegalOffers(ShapeOf("inf2.48xlarge"), OfferScope::kDeviceSetsAndCores),
                  "neurondevices-0-2"));
  EXPECT_TRUE(has(LegalOffers(ShapeOf("inf2.48xlarge"), OfferScope::kDeviceSetsAndCores),
                  "neurondevices-5-7"));
  for (const Offer& o : LegalOffers(ShapeOf("trn1.32xlarge"), OfferScope::kDeviceSetsAndCores)) {
    const size_t n = o.placement.ids.size();
    if (o.kind != OfferKind::kCores) {
      EXPECT_TRUE(n == 1 || n == 4 || n == 8 || n == 16) << o.name;
      EXPECT_EQ(o.placement.ids.front() % n, 0u) << o.name;
    }
  }
  EXPECT_TRUE(has(LegalOffers(ShapeOf("trn1.32xlarge"), OfferScope::kDeviceSetsAndCores),
                  "neurondevices-4-7"));
  EXPECT_FALSE(has(LegalOffers(ShapeOf("trn1.32xlarge"), OfferScope::kDeviceSetsAndCores),
                   "neurondevices-2-5"));
}

TEST(DraOffers, WholeDevicesOnlyWithoutPartitionableAndUnhealthyLeftOut) {
  const NodeShape shape = ShapeOf("inf2.48xlarge");
  const std::vector<Offer> whole = LegalOffers(shape, OfferScope::kWholeDevices);
  ASSERT_EQ(whole.size(), 12u);
  for (const Offer& o : whole) EXPECT_EQ(o.kind, OfferKind::kDevice);
  const topology::DeviceMask unhealthy = topology::DeviceMask{1} << 5;
  for (const Offer& o : LegalOffers(shape, OfferScope::kDeviceSetsAndCores, unhealthy)) {
    EXPECT_EQ(o.placement.devices & unhealthy, 0u) << o.name;
  }
  EXPECT_EQ(LegalOffers(shape, OfferScope::kWholeDevices, unhealthy).size(), 11u);
}

// --set-offers auto leaves the sets out exactly where the whole devices' group attributes name
// every legal set: on each such type of the catalog, the devices of every legal set of N (and no
// other device) share one resource.aws.com/devicegroupN_id, so a claim's matchAttribute on it gets
// a legal set and nothing else; every other type keeps its set offers.
TEST(DraOffers, AutoSetOffersLeaveOutOnlySetsTheGroupAttributesName) {
  NodeFacts facts;
  facts.node_name = "node-a";
  for (const auto& [name, type] : topology::Catalog::Embedded().types()) {
    const NodeShape shape = ShapeOf(name);
    SCOPED_TRACE(name);
    EXPECT_EQ(ScopeFor(shape, SetOffers::kOn, false), OfferScope::kDeviceSets);
    EXPECT_EQ(ScopeFor(shape, SetOffers::kOff, false), OfferScope::kWholeDevices);
    EXPECT_EQ(ScopeFor(shape, SetOffers::kAuto, true), OfferScope::kDeviceSetsAndCores);
    if (ScopeFor(shape, SetOffers::kAuto, false) != OfferScope::kWholeDevices) {
      EXPECT_NE(type.rule, topology::LegalSetRule::kAligned);
      continue;
    }
    const auto slices = BuildSlices(facts, shape, LegalOffers(shape, OfferScope::kWholeDevices),
                                    {.partitionable = false, .generation = 1});
    ASSERT_EQ(slices.size(), 1u);
    const nlohmann::json devices = nlohmann::json::parse(slices[0].json)["spec"]["devices"];
    for (int n = 2; n <= shape.devices; ++n) {
      const topology::Request request{Unit::kDevice, n};
      const auto legal = topology::LegalPlacements(shape, NodeUsage{}, request);
      const std::string key = fmt::format("resource.aws.com/devicegroup{}_id", n);
      if (legal.empty()) continue;
      for (const topology::Placement& set : legal) {
        std::set<int> named;
        const auto& first = devices[set.ids.front()]["attributes"];
        ASSERT_TRUE(first.contains(key)) << key;
        for (const auto& device : devices) {
          if (device["attributes"].value(key, nlohmann::json()) == first[key]) {
            named.insert(device["attributes"]["deviceId"]["int"].get<int>());
          }
        }
        EXPECT_EQ(named, std::set<int>(set.ids.begin(), set.ids.end())) << key;
      }
    }
  }
}

TEST(DraOffers, OfferFromNameRoundTripsAndRejectsJunk) {
  for (const auto& [label, shape] : Shapes()) {
    SCOPED_TRACE(label);
    for (const Offer& offer : LegalOffers(shape, OfferScope::kDeviceSetsAndCores)) {
      auto back = OfferFromName(shape, offer.name);
      ASSERT_TRUE(back.ok()) << back.error();
      EXPECT_EQ(back.value(), offer);
      EXPECT_EQ(back->placement.devices, offer.placement.devices) << offer.name;
    }
  }
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");
  for (const char* junk : {"neurondevices-0-2", "neurondevice99", "x", "", "neurondevice",
                           "neurondevice01", "neurondevice-1", "neuroncores-0-99",
                           "neuroncores-1-0", "neurondevices-0-3-", "NEURONDEVICE0"}) {
    auto offer = OfferFromName(trn1, junk);
    ASSERT_FALSE(offer.ok()) << junk;
    EXPECT_THAT(offer.error(), HasSubstr(std::string("'") + junk + "'"));
  }
  // A name much longer than a DNS label is refused before any enumeration.
  EXPECT_FALSE(OfferFromName(trn1, "neurondevice" + std::string(1000, '1')).ok());
}

TEST(DraOrder, IndexOrderWithoutCosts) {
  const NodeShape shape = ShapeOf("trn2.48xlarge", 2);
  const std::vector<Offer> offers = LegalOffers(shape, OfferScope::kDeviceSetsAndCores);
  std::vector<Offer> shuffled = offers;
  std::mt19937 rng(7);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  NodeUsage usage;
  ASSERT_TRUE(usage.Take(shape, Unit::kDevice, {0, 1, 2, 3}));
  const std::vector<Offer> ordered = OrderForFirstFit(shuffled, shape, usage, nullptr);
  ASSERT_EQ(ordered.size(), offers.size());
  // Each row's set right before the row's devices, the larger sets after the last row, then the
  // core ranges: a claim for one device or for a row meets a free one within a few devices.
  std::vector<std::string> expected;
  for (int row = 0; row < 4; ++row) {
    expected.push_back(fmt::format("neurondevices-{}-{}", 4 * row, 4 * row + 3));
    for (int d = 4 * row; d < 4 * row + 4; ++d)
      expected.push_back(fmt::format("neurondevice{}", d));
  }
  for (const char* name : {"neurondevices-0-7", "neurondevices-8-15", "neurondevices-0-15"}) {
    expected.push_back(name);
  }
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (i < expected.size()) {
      EXPECT_EQ(ordered[i].name, expected[i]) << i;
    } else {
      EXPECT_EQ(ordered[i].kind, OfferKind::kCores) << ordered[i].name;
    }
  }
  // A ring has more sets than devices: its whole devices come first, then the sets by size.
  const NodeShape ring = ShapeOf("inf2.48xlarge");
  const std::vector<Offer> ring_offers = LegalOffers(ring, OfferScope::kDeviceSets);
  std::vector<Offer> ring_shuffled = ring_offers;
  std::shuffle(ring_shuffled.begin(), ring_shuffled.end(), rng);
  EXPECT_EQ(OrderForFirstFit(ring_shuffled, ring, NodeUsage{}, nullptr), ring_offers);
}

TEST(DraOrder, CostsPutTheFreeLowCostOffersFirst) {
  for (const auto& [label, shape] : Shapes()) {
    SCOPED_TRACE(label);
    NodeUsage usage;
    // Part of the node in use: one core of device 1, all of device 2.
    ASSERT_TRUE(usage.Take(shape, Unit::kCore, {shape.cores_per_device}));
    ASSERT_TRUE(usage.Take(shape, Unit::kDevice, {2}));
    topology::DemandModel demand;
    std::vector<int64_t> supply;
    for (const auto& entry : demand.classes()) {
      supply.push_back(topology::FreeSlots(shape, usage, entry.request));
    }
    const auto costs = topology::SlotCosts::From(demand, supply, topology::FreeUnits(shape, usage));
    const std::vector<Offer> ordered =
        OrderForFirstFit(LegalOffers(shape, OfferScope::kDeviceSetsAndCores), shape, usage, &costs);
    ASSERT_EQ(ordered.size(), LegalOffers(shape, OfferScope::kDeviceSetsAndCores).size());
    // Walk positions in blocks; inside each kind of one, free offers by ascending cost, then the
    // taken ones.
    for (size_t i = 1; i < ordered.size(); ++i) {
      const Offer& a = ordered[i - 1];
      const Offer& b = ordered[i];
      ASSERT_LE(OfferWalkPosition(shape, a), OfferWalkPosition(shape, b))
          << a.name << " " << b.name;
      if (a.kind != b.kind || OfferWalkPosition(shape, a) != OfferWalkPosition(shape, b)) continue;
      const Unit unit = a.kind == OfferKind::kCores ? Unit::kCore : Unit::kDevice;
      const bool free_a = usage.AllFree(shape, unit, a.placement.ids);
      const bool free_b = usage.AllFree(shape, unit, b.placement.ids);
      ASSERT_FALSE(!free_a && free_b) << a.name << " (taken) before " << b.name << " (free)";
      if (free_a && free_b) {
        auto cost = [&](const Offer& o) {
          NodeUsage after = usage;
          after.Take(shape, unit, o.placement.ids);
          return topology::PlacementCost(shape, usage, after, costs);
        };
        EXPECT_LE(cost(a), cost(b)) << a.name << " before " << b.name;
      }
    }
    // The first whole device is free, and not the one whose neighbour is taken.
    const auto first_device = std::find_if(ordered.begin(), ordered.end(), [](const Offer& o) {
      return o.kind == OfferKind::kDevice;
    });
    ASSERT_NE(first_device, ordered.end());
    EXPECT_TRUE(usage.AllFree(shape, Unit::kDevice, first_device->placement.ids));
    EXPECT_NE(first_device->name, "neurondevice2");
  }
}

const std::regex kDnsSubdomain("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");

TEST(DraSlices, SliceNamePrefixStaysADnsSubdomain) {
  EXPECT_EQ(SliceNamePrefix("ip-10-0-0-1.ec2.internal"), "ip-10-0-0-1.ec2.internal-neuron");
  // 253 characters, the longest node name: labels of 63 joined by dots.
  std::string longest;
  while (longest.size() < 253) {
    if (!longest.empty()) longest += '.';
    longest += std::string(std::min<size_t>(63, 253 - longest.size()), 'a' + longest.size() % 26);
  }
  ASSERT_EQ(longest.size(), 253u);
  ASSERT_TRUE(std::regex_match(longest, kDnsSubdomain));
  std::string other = longest;
  other.back() = other.back() == 'z' ? 'y' : 'z';
  for (const std::string& node : {longest, other, std::string(237, 'n'), std::string(238, 'n'),
                                  longest.substr(0, 219) + "." + std::string(33, 'q')}) {
    const std::string prefix = SliceNamePrefix(node);
    for (const std::string& name : {prefix + "-00", prefix + "-zc-99"}) {
      EXPECT_LE(name.size(), 253u) << name;
      EXPECT_TRUE(std::regex_match(name, kDnsSubdomain)) << name;
    }
  }
  EXPECT_NE(SliceNamePrefix(longest), SliceNamePrefix(other));
  EXPECT_EQ(SliceNamePrefix(std::string(237, 'n')), std::string(237, 'n') + "-neuron");
}

TEST(DraSlices, WithinTheLimitsInPublishOrder) {
  NodeFacts facts;
  facts.node_name = "node-a";
  facts.node_uid = "uid-a";
  facts.dra_driver_version = "1.2.3";
  facts.neuron_driver_version = "2.21.37.0";
  facts.network_node_layers = {"nn-1", "nn-2", "nn-3"};
  for (const auto& [label, shape] : Shapes()) {
    for (bool partitionable : {true, false}) {
      SCOPED_TRACE(label + (partitionable ? " partitionable" : " whole devices"));
      const std::vector<Offer> ordered = LegalOffers(
          shape, partitionable ? OfferScope::kDeviceSetsAndCores : OfferScope::kWholeDevices);
      const auto slices =
          BuildSlices(facts, shape, ordered, {.partitionable = partitionable, .generation = 7});
      std::vector<std::string> published;
      std::set<std::string> counter_sets;
      std::vector<std::string> names;
      for (const ResourceSliceObject& slice : slices) {
        const nlohmann::json json = nlohmann::json::parse(slice.json);
        testing::ExpectSliceWithinLimits(json);
        EXPECT_EQ(json["metadata"]["name"], slice.name);
        EXPECT_EQ(json["spec"]["pool"]["generation"], 7);
        EXPECT_EQ(json["spec"]["pool"]["name"], "node-a");
        EXPECT_EQ(json["spec"]["pool"]["resourceSliceCount"], slices.size());
        EXPECT_EQ(json["metadata"]["ownerReferences"][0]["uid"], "uid-a");
        for (const auto& device : json["spec"].value("devices", nlohmann::json::array())) {
          published.push_back(device["name"]);
          EXPECT_EQ(device.contains("consumesCounters"), partitionable);
        }
        for (const auto& set : json["spec"].value("sharedCounters", nlohmann::json::array())) {
          EXPECT_TRUE(counter_sets.insert(set["name"]).second) << set["name"];
        }
        names.push_back(slice.name);
      }
      EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
      ASSERT_EQ(published.size(), ordered.size());
      for (size_t i = 0; i < ordered.size(); ++i) EXPECT_EQ(published[i], ordered[i].name);
      EXPECT_EQ(counter_sets.size(), partitionable ? CounterSetsOf(shape, true).size() : 0u);
    }
  }
}

// A failed device's offers carry the taint (effect per policy, value and time from the fault);
// every other offer's JSON is byte for byte what it is with no fault; the slices stay valid.
TEST(DraSlices, FailedDeviceTaintsExactlyTheOffersTouchingIt) {
  NodeFacts facts;
  facts.node_name = "node-a";
  facts.dra_driver_version = "1.2.3";
  const DeviceFaults faults = {{3, {"device-node-missing", "2026-11-29T12:00:00Z"}},
                               {5, {"sysfs-unreadable", "2026-11-29T11:00:00Z"}}};
  const topology::DeviceMask dead = (topology::DeviceMask{1} << 3) | (topology::DeviceMask{1} << 5);
  for (const auto& [label, shape] : Shapes()) {
    for (bool partitionable : {true, false}) {
      for (TaintEffect effect : {TaintEffect::kNoSchedule, TaintEffect::kNoExecute}) {
        SCOPED_TRACE(label + (partitionable ? " partitionable " : " whole devices ") +
                     std::string(TaintEffectName(effect)));
        const std::vector<Offer> ordered = LegalOffers(
            shape, partitionable ? OfferScope::kDeviceSetsAndCores : OfferScope::kWholeDevices);
        auto devices_of = [&](const SliceOptions& options) {
          std::map<std::string, nlohmann::json> out;
          for (const ResourceSliceObject& slice : BuildSlices(facts, shape, ordered, options)) {
            const nlohmann::json json = nlohmann::json::parse(slice.json);
            testing::ExpectSliceWithinLimits(json);
            for (const auto& device : json["spec"].value("devices", nlohmann::json::array())) {
              out[device["name"]] = device;
            }
          }
          return out;
        };
        const auto healthy = devices_of({.partitionable = partitionable, .generation = 7});
        const auto tainted = devices_of(
            {.partitionable = partitionable, .generation = 7, .faults = faults, .effect = effect});
        ASSERT_EQ(tainted.size(), ordered.size());  // nothing withdrawn
        int with_taint = 0;
        for (const Offer& offer : ordered) {
          const nlohmann::json& device = tainted.at(offer.name);
          if ((offer.placement.devices & dead) == 0) {
            EXPECT_EQ(device.dump(), healthy.at(offer.name).dump()) << offer.name;
            continue;
          }
          ++with_taint;
          ASSERT_TRUE(device.contains("taints")) << offer.name;
          ASSERT_EQ(device["taints"].size(), 1u) << offer.name;
          const nlohmann::json& taint = device["taints"][0];
          EXPECT_EQ(taint["key"], "toposched.io/unhealthy");
          EXPECT_EQ(taint["effect"],
                    effect == TaintEffect::kNoExecute ? "NoExecute" : "NoSchedule");
          const bool has3 = (offer.placement.devices >> 3 & 1) != 0;
          EXPECT_EQ(taint["value"],
                    has3 ? "neuron3-device-node-missing" : "neuron5-sysfs-unreadable")
              << offer.name;
          // The earliest failure among the offer's devices.
          const bool has5 = (offer.placement.devices >> 5 & 1) != 0;
          EXPECT_EQ(taint["timeAdded"], has5 ? "2026-11-29T11:00:00Z" : "2026-11-29T12:00:00Z")
              << offer.name;
          nlohmann::json without = device;
          without.erase("taints");
          EXPECT_EQ(without.dump(), healthy.at(offer.name).dump()) << offer.name;
        }
        EXPECT_GE(with_taint, 2);
      }
    }
  }
  // The dry-run probe: one tainted device, named apart from the node's slices.
  const nlohmann::json probe = nlohmann::json::parse(TaintProbeSlice(facts));
  EXPECT_EQ(probe["metadata"]["name"], "node-a-neuron-taint-probe");
  EXPECT_EQ(probe["spec"]["devices"][0]["taints"][0]["key"], "toposched.io/unhealthy");
}

}  // namespace
}  // namespace toposched::dra
