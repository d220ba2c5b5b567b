// The extender's own view of a 100,000-node cluster with 1,000,000 recorded pods (issue 33),
// in-process (decode + logic + encode, no sockets): decoding the first pod list, the rebuild a
// start-up does (ReplaceNodes, then ReplacePods; and the tracker's part of it alone), the
// resident memory it leaves, filter and prioritize with 5,000 node names (what kube-scheduler
// sends at 5 % of 100,000), and sustained decisions (filter + prioritize + bind of a new pod) on
// 1 and 2 threads. A program of its own so that extender_bench stays
// quick: building the cluster takes tens of seconds and a few GiB. Run it alone, from a release
// build:
//   ./build/bench/extender_scale_bench
// (about 40 s, peak RSS 4.6 GB during the takeover relist; --benchmark_filter=Decisions and so on
// pick parts, the cluster is built once by whichever runs first). docs/benchmarks.md has the
// numbers.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "extender/offline.h"
#include "extender/pod_requests.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "percentiles.h"

namespace {

using namespace toposched;
using namespace toposched::extender;
using bench::ReportPercentiles;

constexpr int kNodes = 100000;
constexpr int kPodsPerNode = 10;
constexpr int kCoresPerPod = 2;
constexpr size_t kNamesPerCall = 5000;

// One /proc/self/status field in KiB (VmRSS, VmHWM), 0 when it cannot be read.
long StatusKiB(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return 0;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fleet's mix: 6 in 10 trn2.48xlarge (16 devices of 4 cores), 3 in 10 trn1.32xlarge (16 of
// 2), 1 in 10 inf2.48xlarge (12 of 2).
struct Shape {
  const char* type;
  int devices;
  int cores_per_device;
};
Shape ShapeOf(int i) {
  const int m = i % 10;
  if (m < 6) return {"trn2.48xlarge", 16, 4};
  if (m < 9) return {"trn1.32xlarge", 16, 2};
  return {"inf2.48xlarge", 12, 2};
}

// A running pod on `node` whose record gives its one container `ids` of neuroncore.
kube::Pod CorePod(int uid, const std::string& node, const std::string& type, std::vector<int> ids) {
  kube::Pod pod;
  pod.ns = "default";
  pod.name = "pod-" + std::to_string(uid);
  pod.uid = "uid-" + std::to_string(uid);
  pod.node_name = node;
  pod.phase = "Running";
  kube::Container c;
  c.name = "main";
  c.requests["aws.amazon.com/neuroncore"] = static_cast<int64_t>(ids.size());
  pod.containers.push_back(c);
  const claims::AllocationRecord record{node, type, {{"main", "aws.amazon.com/neuroncore", ids}}};
  for (auto& [k, v] : claims::AllocationAnnotations(record, 1)) pod.annotations[k] = v;
  return pod;
}

// The fleet's 1,000,000 running pods, as a pod list gives them: 10 per node, cores 0-19.
std::vector<kube::Pod> RunningPods(const std::vector<std::string>& names) {
  std::vector<kube::Pod> pods;
  pods.reserve(static_cast<size_t>(kNodes) * kPodsPerNode);
  int uid = 0;
  for (int i = 0; i < kNodes; ++i) {
    for (int k = 0; k < kPodsPerNode; ++k) {
      std::vector<int> ids;
      ids.reserve(kCoresPerPod);
      for (int c = 0; c < kCoresPerPod; ++c) ids.push_back(k * kCoresPerPod + c);
      pods.push_back(CorePod(uid++, names[i], ShapeOf(i).type, std::move(ids)));
    }
  }
  return pods;
}

// 100,000 nodes, each with 10 running pods of 2 cores (cores 0-19: 5 devices of a trn2, 10 of a
// trn1 or inf2), built through ReplaceNodes and ReplacePods as a start-up's first lists are. The
// pod list is ReplacePods' own, as the informer's is (it frees each pod once read).
struct Scale {
  Scale()
      : service(
            topology::Catalog::Embedded(), ExtenderOptions{}, writer, metrics,
            [] { return int64_t{0}; }, [] { return int64_t{1}; }) {
    spdlog::set_level(spdlog::level::warn);
    rss_before_kib = StatusKiB("VmRSS");
    for (int i = 0; i < kNodes; ++i) {
      names.push_back("ip-10-" + std::to_string(i / 65536) + "-" + std::to_string(i / 256 % 256) +
                      "-" + std::to_string(i % 256) + ".ec2.internal");
    }
    {
      std::vector<kube::Node> nodes;
      nodes.reserve(kNodes);
      for (int i = 0; i < kNodes; ++i) {
        const Shape shape = ShapeOf(i);
        kube::Node node;
        node.name = names[i];
        node.instance_type = shape.type;
        node.allocatable["aws.amazon.com/neuron"] = shape.devices;
        node.allocatable["aws.amazon.com/neuroncore"] = shape.devices * shape.cores_per_device;
        nodes.push_back(std::move(node));
      }
      const auto start = std::chrono::steady_clock::now();
      service.ReplaceNodes(nodes);
      replace_nodes_s = SecondsSince(start);
    }
    {
      std::vector<kube::Pod> pods = RunningPods(names);
      rss_with_list_kib = StatusKiB("VmRSS");
      // Two parts of ReplacePods' per-pod work timed alone (the service's state is untouched):
      // reading the requests, and decoding the allocation record from the annotations.
      const ResourceNames resources = ExtenderOptions{}.resources;
      const auto specs = resources.Specs();
      auto part = std::chrono::steady_clock::now();
      size_t ok = 0;
      for (const auto& pod : pods) ok += RequestsOf(pod, resources).ok() ? 1 : 0;
      requests_of_s = SecondsSince(part);
      part = std::chrono::steady_clock::now();
      for (const auto& pod : pods) ok += claims::RecordFromPod(pod, specs).ok() ? 1 : 0;
      records_s = SecondsSince(part);
      benchmark::DoNotOptimize(ok);
      const auto start = std::chrono::steady_clock::now();
      service.ReplacePods(std::move(pods));  // the list is the service's, as the informer's is
      replace_pods_s = SecondsSince(start);
    }
    rss_kib = StatusKiB("VmRSS");
    malloc_trim(0);
    rss_trimmed_kib = StatusKiB("VmRSS");
    hwm_kib = StatusKiB("VmHWM");
    committed = static_cast<double>(service.tracker().Stats().committed);

    // The calls' names: a fixed shuffle of the fleet, quoted and joined once, so that a call's
    // NodeNames array is one copy of 5,000 consecutive entries (kube-scheduler's sample).
    std::vector<int> order(kNodes);
    for (int i = 0; i < kNodes; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(33));
    for (int i : order) {
      shuffled.push_back(names[i]);
      offsets.push_back(quoted.size());
      quoted += "\"" + names[i] + "\",";
    }
    offsets.push_back(quoted.size());
  }

  // The body of a names-only call for `pod_json` on the 5,000 shuffled names from `first`.
  std::string Body(const std::string& pod_json, size_t first) const {
    const size_t from = offsets[first];
    const size_t to = offsets[first + kNamesPerCall] - 1;  // without the last comma
    std::string out;
    out.reserve(pod_json.size() + (to - from) + 64);
    out += "{\"Pod\":";
    out += pod_json;
    out += ",\"Nodes\":null,\"NodeNames\":[";
    out.append(quoted, from, to - from);
    out += "]}";
    return out;
  }

  OfflineClusterWriter writer;
  Metrics metrics;
  ExtenderService service;
  std::vector<std::string> names;
  std::vector<std::string> shuffled;
  std::string quoted;
  std::vector<size_t> offsets;
  double replace_nodes_s = 0;
  double replace_pods_s = 0;
  double requests_of_s = 0;
  double records_s = 0;
  long rss_before_kib = 0;
  long rss_with_list_kib = 0;
  long rss_kib = 0;
  long rss_trimmed_kib = 0;
  long hwm_kib = 0;
  double committed = 0;
};

Scale& SharedScale() {
  static Scale scale;
  return scale;
}

// The rebuild (first node list, then first pod list) and what it leaves resident. Targets:
// rebuild <= 10 s, RSS <= 4 GiB.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kNodes1MPods(benchmark::State& state) {
  for (auto _ : state) {
    Scale& s = SharedScale();
    state.counters["pods"] = s.committed;
    state.counters["replace_nodes_s"] = s.replace_nodes_s;
    state.counters["replace_pods_s"] = s.replace_pods_s;
    state.counters["rebuild_s"] = s.replace_nodes_s + s.replace_pods_s;
    state.counters["requests_of_s"] = s.requests_of_s;
    state.counters["records_s"] = s.records_s;
    state.counters["rss_list_MB"] = static_cast<double>(s.rss_with_list_kib) / 1024.0;
    state.counters["rss_MB"] = static_cast<double>(s.rss_kib) / 1024.0;
    state.counters["rss_trimmed_MB"] = static_cast<double>(s.rss_trimmed_kib) / 1024.0;
    state.counters["rss_growth_MB"] =
        static_cast<double>(s.rss_trimmed_kib - s.rss_before_kib) / 1024.0;
    state.counters["hwm_MB"] = static_cast<double>(s.hwm_kib) / 1024.0;
  }
}
BENCHMARK(BM_Scale100kNodes1MPods)->Unit(benchmark::kSecond)->Iterations(1);

// Filter or prioritize with 5,000 names for a pod of state.range(0) devices. Target: filter +
// prioritize p99 <= 5 ms.
void RunCalls(benchmark::State& state, bool prioritize) {
  Scale& s = SharedScale();
  const std::string pod =
      testing::PodJson("p", "uid-bench", "aws.amazon.com/neuron", static_cast<int>(state.range(0)));
  std::vector<simdjson::padded_string> bodies;
  // Each call takes the next 5,000 names (20 windows, so a call finds its nodes out of the
  // caches, as kube-scheduler's rotating sample does); with state.range(1) == 1, always the same
  // 5,000 (warm caches: what the cluster's size costs beyond 5,000 nodes' worth of lookups).
  const size_t windows = state.range(1) == 1 ? 1 : s.shuffled.size() / kNamesPerCall;
  for (size_t w = 0; w < windows; ++w) bodies.emplace_back(s.Body(pod, w * kNamesPerCall));
  auto call = [&](const ExtenderArgs& args) {
    return prioritize ? s.service.Prioritize(args) : s.service.Filter(args);
  };
  // One untimed call first: the thread's simdjson parser grows to the body's size once.
  if (auto warm = DecodeExtenderArgs(bodies[0]); warm.ok()) (void)call(*warm);
  std::vector<double> ms;
  size_t i = 0;
  for (auto _ : state) {
    const auto& body = bodies[i++ % bodies.size()];
    const auto start = std::chrono::steady_clock::now();
    auto args = DecodeExtenderArgs(body);
    if (!args.ok()) {
      state.SkipWithError(args.error().c_str());
      return;
    }
    std::string reply = call(*args);
    benchmark::DoNotOptimize(reply);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  ReportPercentiles(state, ms);
}

// The tracker's part of the rebuild alone: a tracker of its own (the service's policy) with the
// same 100,000 nodes, given the same 1,000,000 holds as ReplacePods gives it (RecordedPods built
// here, not decoded), timed in Tracker::Rebuild. ReplacePods less this and the two parts timed
// in Scale is the service's own bookkeeping.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kTrackerRebuild(benchmark::State& state) {
  Scale& s = SharedScale();
  for (auto _ : state) {
    tracker::Tracker tracker(topology::Catalog::Embedded(), ExtenderOptions{}.policy);
    for (int i = 0; i < kNodes; ++i) {
      if (auto st = tracker.UpsertNode({s.names[i], ShapeOf(i).type}); !st.ok()) {
        state.SkipWithError(st.error().c_str());
        return;
      }
    }
    std::vector<tracker::RecordedPod> pods;
    pods.reserve(static_cast<size_t>(kNodes) * kPodsPerNode);
    int uid = 0;
    for (int i = 0; i < kNodes; ++i) {
      const Shape shape = ShapeOf(i);
      for (int k = 0; k < kPodsPerNode; ++k, ++uid) {
        std::vector<int> ids;
        ids.reserve(kCoresPerPod);
        for (int c = 0; c < kCoresPerPod; ++c) ids.push_back(k * kCoresPerPod + c);
        tracker::RecordedPod pod{
            "uid-" + std::to_string(uid), "default/pod-" + std::to_string(uid), {s.names[i], {}}};
        pod.allocation.containers.push_back(
            {"main", topology::Placement::FromIds(topology::Unit::kCore, std::move(ids),
                                                  shape.cores_per_device)});
        pods.push_back(std::move(pod));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const tracker::RebuildReport report = tracker.Rebuild(pods, /*keep_reservations=*/false);
    state.counters["tracker_rebuild_s"] = SecondsSince(start);
    state.counters["applied"] = static_cast<double>(report.applied);
    state.counters["problems"] = static_cast<double>(report.problems.size());
  }
}
BENCHMARK(BM_Scale100kTrackerRebuild)->Unit(benchmark::kSecond)->Iterations(1);

// The first pod list's decoding: 1,000,000 running pods (each like Scale's, with its allocation
// annotations) as 2,000 PodList pages of 500, the informer's page size, each decoded by
// kube::DecodePodList. Only the decoding is timed (each page is written before, untimed) and the
// pods are dropped after their page: Scale holds the decoded list's memory. The pods are compact
// (PodJson's ~1 KB: no managedFields, one container); real ones are larger, so this is a floor.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kDecodePodList1M(benchmark::State& state) {
  Scale& s = SharedScale();
  constexpr int kPage = 500;
  for (auto _ : state) {
    double decode_s = 0;
    double bytes = 0;
    size_t decoded = 0;
    int uid = 0;
    for (int first = 0; first < kNodes * kPodsPerNode; first += kPage) {
      std::string page =
          R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[)";
      for (int j = 0; j < kPage; ++j, ++uid) {
        const int i = uid / kPodsPerNode;
        const int k = uid % kPodsPerNode;
        std::vector<int> ids;
        ids.reserve(kCoresPerPod);
        for (int c = 0; c < kCoresPerPod; ++c) ids.push_back(k * kCoresPerPod + c);
        const claims::AllocationRecord record{
            s.names[i], ShapeOf(i).type, {{"main", "aws.amazon.com/neuroncore", std::move(ids)}}};
        testing::PodJsonSpec spec{.name = "pod-" + std::to_string(uid),
                                  .uid = "uid-" + std::to_string(uid),
                                  .resource = "aws.amazon.com/neuroncore",
                                  .count = kCoresPerPod,
                                  .node = s.names[i],
                                  .phase = "Running"};
        for (auto& [key, value] : claims::AllocationAnnotations(record, 1))
          spec.annotations[key] = value;
        if (j != 0) page += ',';
        page += testing::PodJson(spec);
      }
      page += "]}";
      const simdjson::padded_string body(page);
      bytes += static_cast<double>(page.size());
      const auto start = std::chrono::steady_clock::now();
      auto list = kube::DecodePodList(body);
      decode_s += SecondsSince(start);
      if (!list.ok()) {
        state.SkipWithError(list.error().c_str());
        return;
      }
      decoded += list->items.size();
    }
    state.counters["decode_s"] = decode_s;
    state.counters["pods"] = static_cast<double>(decoded);
    state.counters["list_MB"] = bytes / 1e6;
  }
}
BENCHMARK(BM_Scale100kDecodePodList1M)->Unit(benchmark::kSecond)->Iterations(1);

// Decoding alone (the body's 5,000 names into ExtenderArgs), the part of each call that does not
// depend on the cluster's size.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kDecodeNames5000(benchmark::State& state) {
  Scale& s = SharedScale();
  const simdjson::padded_string body(
      s.Body(testing::PodJson("p", "uid-bench", "aws.amazon.com/neuron", 1), 0));
  if (auto warm = DecodeExtenderArgs(body); !warm.ok()) state.SkipWithError(warm.error().c_str());
  std::vector<double> ms;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto args = DecodeExtenderArgs(body);
    benchmark::DoNotOptimize(args);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_Scale100kDecodeNames5000)->Unit(benchmark::kMillisecond)->Iterations(300);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kFilterNames5000(benchmark::State& state) { RunCalls(state, false); }
BENCHMARK(BM_Scale100kFilterNames5000)
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(300);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kPrioritizeNames5000(benchmark::State& state) { RunCalls(state, true); }
BENCHMARK(BM_Scale100kPrioritizeNames5000)
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(300);

std::atomic<int> next_pod{0};
std::atomic<int> failed_binds{0};

// Sustained decisions: for each new 1-device pod, filter on 5,000 names, then bind it (the
// binding body as kube-scheduler sends it, decoded as the router does) to the node filter
// passed, into the in-memory writer: the deployed path, where filter passes the policy's node
// alone (--filter-answer best) and kube-scheduler, left one node, calls no prioritize. Windows
// slide by one name per decision, so the binds spread over the fleet. Target: >= 1,000 pods/s on
// 2 cores.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kDecisions(benchmark::State& state) {
  Scale& s = SharedScale();
  std::vector<double> ms;
  for (auto _ : state) {
    const int n = next_pod++;
    const std::string name = "new-" + std::to_string(n);
    const std::string uid = "uid-new-" + std::to_string(n);
    const size_t first = static_cast<size_t>(n) % (kNodes - kNamesPerCall);
    const simdjson::padded_string body(
        s.Body(testing::PodJson(name, uid, "aws.amazon.com/neuron", 1), first));
    const auto start = std::chrono::steady_clock::now();
    auto filter_args = DecodeExtenderArgs(body);
    if (!filter_args.ok()) {
      state.SkipWithError("a body did not decode");
      return;
    }
    std::string filtered = s.service.Filter(*filter_args);
    // The one name passed, as kube-scheduler reads it into its Binding.
    constexpr std::string_view kPassed = R"("NodeNames":[")";
    const size_t at = filtered.find(kPassed);
    const size_t from = at == std::string::npos ? at : at + kPassed.size();
    const size_t to = from == std::string::npos ? from : filtered.find('"', from);
    if (to == std::string::npos) {
      state.SkipWithError(("filter passed no node: " + filtered.substr(0, 300)).c_str());
      return;
    }
    std::string bind_json = R"({"PodName":")";
    bind_json += name;
    bind_json += R"(","PodNamespace":"default","PodUID":")";
    bind_json += uid;
    bind_json += R"(","Node":")";
    bind_json.append(filtered, from, to - from);
    bind_json += R"("})";
    const simdjson::padded_string bind(bind_json);
    auto bind_args = DecodeBindingArgs(bind);
    if (!bind_args.ok()) {
      state.SkipWithError("the binding did not decode");
      return;
    }
    std::string bound = s.service.Bind(*bind_args);
    if (bound != R"({"Error":""})") ++failed_binds;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  state.counters["pods_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // Counters of several threads add up: the failures and the percentiles come from thread 0.
  if (state.thread_index() == 0) {
    state.counters["failed"] = failed_binds.load();
    ReportPercentiles(state, ms);
  }
}
BENCHMARK(BM_Scale100kDecisions)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1000);

// A takeover's relist: a standby that becomes leader lists every pod afresh before it serves
// (a watch may lag), and ReplacePods reconciles that list with the state it already holds. Here
// the same 1,000,000 pods again (the list's building is not timed). It runs last: the pods the
// decisions bound are not in the list, so their holds go, as a relist drops pods that are gone.
// The transfer, the list's decoding (BM_Scale100kDecodePodList1M) and, after a crash, the
// lease's expiry come on top.
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark's BM_ names.
void BM_Scale100kTakeoverRelist(benchmark::State& state) {
  Scale& s = SharedScale();
  for (auto _ : state) {
    std::vector<kube::Pod> pods = RunningPods(s.names);
    const auto start = std::chrono::steady_clock::now();
    s.service.ReplacePods(std::move(pods));
    state.counters["relist_s"] = SecondsSince(start);
    state.counters["pods"] = static_cast<double>(s.service.tracker().Stats().committed);
    // The process's peak so far: the start-up's or this relist's, whichever was higher.
    state.counters["hwm_MB"] = static_cast<double>(StatusKiB("VmHWM")) / 1024.0;
  }
}
BENCHMARK(BM_Scale100kTakeoverRelist)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
