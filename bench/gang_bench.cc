// Gang filters over 5,000 UltraServer nodes (1,250 Trn2 UltraServers of four trn2u.48xlarge), a
// third of the UltraServers broken by a single pod: the first member's filter (which searches the
// fleet for a whole group and holds every seat at once), a later member's filter (which finds its
// seat), and a single pod's filter on the same fleet for comparison. Run from a release build:
//   ./build/bench/gang_bench --benchmark_repetitions=3
// Each reports p50/p99 of single calls (decode + logic + encode) as counters; docs/benchmarks.md
// has the numbers.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/annotations.h"
#include "claims/keys.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "percentiles.h"

namespace {

using namespace toposched;
using namespace toposched::extender;

constexpr int kUltraServers = 1250;

std::string MemberJson(const std::string& name, const std::string& gang, int nodes) {
  return fmt::format(
      R"({{"metadata":{{"name":"{0}","namespace":"default","uid":"uid-{0}","annotations":{{)"
      R"("toposched.io/gang":"{1}","toposched.io/gang-size":"{2}","toposched.io/)"
      R"(ultraserver-nodes":"{2}"}}}},"spec":{{"schedulerName":"my-scheduler","containers":[{{)"
      R"("name":"main","resources":{{"limits":{{"aws.amazon.com/neuron":"16"}}}}}}]}},)"
      R"("status":{{"phase":"Pending"}}}})",
      name, gang, nodes);
}

struct Fleet {
  Fleet()
      : service(
            topology::Catalog::Embedded(), ExtenderOptions{}, writer, metrics,
            [] { return int64_t{0}; }, [] { return int64_t{1}; }) {
    spdlog::set_level(spdlog::level::warn);
    std::vector<kube::Node> nodes;
    for (int u = 0; u < kUltraServers; ++u) {
      const std::string us = fmt::format("us{:04}srv", u);
      for (int i = 0; i < 4; ++i) {
        kube::Node node;
        node.name = fmt::format("ip-10-{}-{}.ec2.internal", u, i);
        node.resource_version = "1";
        node.instance_type = "trn2u.48xlarge";
        node.allocatable["aws.amazon.com/neuron"] = 16;
        node.labels[std::string(claims::kLabelUltraServerMode)] = "1_2_4";
        node.labels[std::string(claims::kLabelUltraServerServerId4)] = us;
        node.labels[std::string(claims::kLabelUltraServerNodeId4)] = std::to_string(i);
        node.labels[std::string(claims::kLabelUltraServerServerId2)] = us + (i < 2 ? "a" : "b");
        node.labels[std::string(claims::kLabelUltraServerNodeId2)] = std::to_string(i % 2);
        names.push_back(node.name);
        nodes.push_back(std::move(node));
      }
    }
    service.ReplaceNodes(nodes);
    // Every third UltraServer runs a 4-device pod on its node 1.
    std::vector<kube::Pod> pods;
    for (int u = 0; u < kUltraServers; u += 3) {
      kube::Pod pod;
      pod.ns = "default";
      pod.name = fmt::format("single-{}", u);
      pod.uid = "uid-" + pod.name;
      pod.node_name = names[static_cast<size_t>(u * 4 + 1)];
      pod.phase = "Running";
      kube::Container c;
      c.name = "main";
      c.requests["aws.amazon.com/neuron"] = 4;
      pod.containers.push_back(c);
      const claims::AllocationRecord record{
          pod.node_name, "trn2u.48xlarge", {{"main", "aws.amazon.com/neuron", {0, 1, 2, 3}}}};
      for (auto& [k, v] : claims::AllocationAnnotations(record, 1)) pod.annotations[k] = v;
      pods.push_back(std::move(pod));
    }
    service.ReplacePods(std::move(pods));
  }

  OfflineClusterWriter writer;
  Metrics metrics;
  ExtenderService service;
  std::vector<std::string> names;
};

Fleet& SharedFleet() {
  static Fleet fleet;
  return fleet;
}

using bench::ReportPercentiles;

// One filter call, timed from the body to the answer.
double TimedFilter(Fleet& fleet, const std::string& pod, benchmark::State& state) {
  const simdjson::padded_string body(testing::NamesArgs(pod, fleet.names));
  const auto start = std::chrono::steady_clock::now();
  auto args = DecodeExtenderArgs(body);
  if (!args.ok()) {
    state.SkipWithError(args.error().c_str());
    return 0;
  }
  std::string reply = fleet.service.Filter(*args);
  benchmark::DoNotOptimize(reply);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The first member of a new gang each call (state.range(0) = 4 or 2 nodes): the search for a
// whole group and the reservation of every seat. Target p99 <= 5 ms.
void BM_GangFirstMemberFilter5000(benchmark::State& state) {
  Fleet& fleet = SharedFleet();
  const int nodes = static_cast<int>(state.range(0));
  static int gangs = 0;
  std::vector<double> ms;
  for (auto _ : state) {
    const std::string gang = fmt::format("g{}", gangs++);
    ms.push_back(TimedFilter(fleet, MemberJson(gang + "-0", gang, nodes), state));
  }
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_GangFirstMemberFilter5000)
    ->Arg(4)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(200);

// A later member of a held gang: finds its seat. Target: no slower than a single pod's filter.
void BM_GangLaterMemberFilter5000(benchmark::State& state) {
  Fleet& fleet = SharedFleet();
  std::vector<double> ms;
  (void)TimedFilter(fleet, MemberJson("later-0", "later", 4), state);  // holds the gang
  for (auto _ : state) ms.push_back(TimedFilter(fleet, MemberJson("later-1", "later", 4), state));
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_GangLaterMemberFilter5000)->Unit(benchmark::kMillisecond)->Iterations(300);

// A single 4-device pod on the same fleet, for comparison.
void BM_SinglePodFilter5000(benchmark::State& state) {
  Fleet& fleet = SharedFleet();
  std::vector<double> ms;
  const std::string pod = testing::PodJson("p", "uid-single", "aws.amazon.com/neuron", 4);
  for (auto _ : state) ms.push_back(TimedFilter(fleet, pod, state));
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_SinglePodFilter5000)->Unit(benchmark::kMillisecond)->Iterations(300);

}  // namespace

BENCHMARK_MAIN();
