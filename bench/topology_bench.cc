// Hot paths of the topology engine and the tracker, measured with Google Benchmark.
// Run from a release build:  ./build/bench/topology_bench --benchmark_repetitions=3
// Numbers and what limits them: docs/benchmarks.md.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/demand.h"
#include "tracker/tracker.h"

namespace {

using namespace toposched;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Policy;
using topology::Request;
using topology::Unit;

const char* const kTypes[] = {"inf1.24xlarge", "inf2.48xlarge", "trn1.32xlarge", "trn2.48xlarge"};
const char* const kStates[] = {"empty", "half", "fragmented"};

NodeShape ShapeOf(const std::string& type) {
  return *NodeShape::Make(*topology::Catalog::Embedded().Find(type));
}

// empty: nothing used. half: the low half of the devices used. fragmented: every other device
// used (the worst case for contiguous and aligned rules), except the last row so requests fit.
NodeUsage UsageFor(const NodeShape& shape, int state) {
  NodeUsage usage;
  std::vector<int> used;
  for (int d = 0; d < shape.devices; ++d) {
    if (state == 1 && d < shape.devices / 2) used.push_back(d);
    if (state == 2 && d % 2 == 0 && d < shape.devices - 4) used.push_back(d);
  }
  usage.Take(shape, Unit::kDevice, used);
  return usage;
}

// One allocation decision. Args: type index, state index, unit (0 devices, 1 cores).
void BM_Allocate(benchmark::State& state) {
  const NodeShape shape = ShapeOf(kTypes[state.range(0)]);
  const NodeUsage usage = UsageFor(shape, static_cast<int>(state.range(1)));
  const Request request = state.range(2) == 0 ? Request{Unit::kDevice, 4} : Request{Unit::kCore, 3};
  for (auto _ : state) {
    auto decision = topology::Allocate(shape, usage, request, Policy::kBestFit);
    benchmark::DoNotOptimize(decision);
  }
  state.SetLabel(std::string(kTypes[state.range(0)]) + "/" + kStates[state.range(1)] +
                 (state.range(2) == 0 ? "/4 devices" : "/3 cores"));
}
BENCHMARK(BM_Allocate)->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}, {0, 1}});

// One scarcity decision: the set on one node weighed against the expected demand (the prior's 7
// classes) and a 40-node fleet's supply, as the tracker asks for each node in prioritize and
// bind. Target: median <= 1 us. Args as BM_Allocate, with 1 device / 1 core (the requests with
// the most candidate sets).
void BM_ScarcityDecision(benchmark::State& state) {
  const NodeShape shape = ShapeOf(kTypes[state.range(0)]);
  const NodeUsage usage = UsageFor(shape, static_cast<int>(state.range(1)));
  const Request request = state.range(2) == 0 ? Request{Unit::kDevice, 1} : Request{Unit::kCore, 1};
  const topology::DemandModel demand;
  std::vector<int64_t> supply;
  for (const auto& c : demand.classes()) {
    supply.push_back(40 * topology::FreeSlots(shape, NodeUsage{}, c.request) + 1);
  }
  const auto costs = topology::SlotCosts::From(demand, supply, 500 * topology::kUnitsPerDevice);
  for (auto _ : state) {
    auto decision = topology::Allocate(shape, usage, request, Policy::kScarcity, &costs);
    benchmark::DoNotOptimize(decision);
  }
  state.SetLabel(std::string(kTypes[state.range(0)]) + "/" + kStates[state.range(1)] +
                 (state.range(2) == 0 ? "/1 device" : "/1 core"));
}
BENCHMARK(BM_ScarcityDecision)->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}, {0, 1}});

std::vector<std::string> NodeNames(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back("node-" + std::to_string(i));
  return names;
}

// A tracker with `nodes` trn1.32xlarge nodes, each with a random mix of pods holding about half.
std::unique_ptr<tracker::Tracker> FilledTracker(int nodes, uint32_t seed) {
  auto t = std::make_unique<tracker::Tracker>(topology::Catalog::Embedded(), Policy::kBestFit);
  std::mt19937 rng(seed);
  const auto names = NodeNames(nodes);
  int uid = 0;
  for (const auto& name : names) {
    (void)t->UpsertNode({name, "trn1.32xlarge", 0});
    for (int k = 0; k < 3; ++k) {
      const int count = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 4 : 1;
      tracker::PodSpec pod{
          "uid-" + std::to_string(uid++), "pod", {{"main", {Unit::kDevice, count}}}};
      if (t->Reserve(pod, name, 1).ok()) (void)t->Commit(pod.uid);
    }
  }
  return t;
}

// Filter: one pod asking for 4 devices against 5,000 nodes of 16 devices (the extender's
// filter with node names; target <= 2 ms on one core).
void BM_Filter5000Nodes(benchmark::State& state) {
  auto t = FilledTracker(5000, 1);
  const auto names = NodeNames(5000);
  const tracker::PodSpec pod{"p", "default/p", {{"main", {Unit::kDevice, 4}}}};
  for (auto _ : state) {
    auto results = t->FitAll(pod, names);
    benchmark::DoNotOptimize(results);
  }
  state.SetItemsProcessed(state.iterations() * 5000);
}
BENCHMARK(BM_Filter5000Nodes)->Unit(benchmark::kMillisecond);

// The scarcity ranking prioritize serves, over 5,000 nodes of four types (mixed usage): every
// node's cheapest set for a 1-device pod, costed against the fleet's supply.
void BM_Rank5000MixedNodes(benchmark::State& state) {
  tracker::Tracker t(topology::Catalog::Embedded(), Policy::kScarcity);
  const auto names = NodeNames(5000);
  std::mt19937 rng(3);
  int uid = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    (void)t.UpsertNode({names[i], kTypes[i % 4], 0});
    for (int k = 0; k < 3; ++k) {
      const Request r = rng() % 3 == 0 ? Request{Unit::kCore, 1} : Request{Unit::kDevice, 1};
      tracker::PodSpec pod{"uid-" + std::to_string(uid++), "pod", {{"main", r}}};
      t.ObserveDemand(pod);
      (void)t.Reserve(pod, names[i], 1);
    }
  }
  const tracker::PodSpec pod{"p", "default/p", {{"main", {Unit::kDevice, 1}}}};
  for (auto _ : state) {
    auto ranking = t.Rank(pod, names);
    benchmark::DoNotOptimize(ranking);
  }
  state.SetItemsProcessed(state.iterations() * 5000);
}
BENCHMARK(BM_Rank5000MixedNodes)->Unit(benchmark::kMillisecond);

// Rebuild from 100,000 recorded pods on 5,000 trn2.48xlarge nodes (20 pods x 3 cores each;
// target <= 1 s).
void BM_Rebuild100kPods(benchmark::State& state) {
  tracker::Tracker t(topology::Catalog::Embedded(), Policy::kBestFit);
  const auto names = NodeNames(5000);
  std::vector<tracker::RecordedPod> pods;
  pods.reserve(100000);
  for (const auto& name : names) {
    (void)t.UpsertNode({name, "trn2.48xlarge", 0});
    for (int k = 0; k < 20; ++k) {
      auto p = topology::Placement::FromIds(Unit::kCore, {k * 3, k * 3 + 1, k * 3 + 2}, 4);
      pods.push_back({name + "-" + std::to_string(k), "ns/pod", {name, {{"main", p}}}});
    }
  }
  for (auto _ : state) {
    auto report = t.Rebuild(pods, false);
    if (report.applied != 100000) state.SkipWithError("rebuild did not apply every pod");
  }
  state.SetItemsProcessed(state.iterations() * 100000);
}
BENCHMARK(BM_Rebuild100kPods)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
