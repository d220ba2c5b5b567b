// Does a slow partition service slow down filter? Filter latency over 1,064 nodes (1,000 trn1
// nodes, 64 IPU head nodes on 4 shared 64-IPU pools) through the Router (decode + logic +
// encode, no sockets), idle and while 10 binds wait on a provisioner that takes 2 s to make each
// partition active. Binds run on the Router's bind threads; filter on the caller's.
//   nice -n 19 ./bench/pools_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
// docs/benchmarks.md, "Shared pools (issue 6)", has the numbers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>

#include "extender/offline.h"
#include "extender/router.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "pools_fixtures.h"

namespace {

using namespace toposched;
using namespace std::chrono_literals;

constexpr int kBindsInFlight = 10;

const char* kPools = R"(pools:
  - {name: pod-0, kind: ipu-pod16, size: 64}
  - {name: pod-1, kind: ipu-pod16, size: 64}
  - {name: pod-2, kind: ipu-pod16, size: 64}
  - {name: pod-3, kind: ipu-pod16, size: 64}
)";

struct World {
  World()
      : pools(topology::PoolSet::Parse(kPools, "bench", topology::Catalog::Embedded()).value()),
        fake({2000ms, 5ms, 0, "", 1}, testing::SteadyNowNs),
        service(fake),
        provisioner(service, {10000ms, 250ms, 2000ms}, testing::SteadyNowNs, testing::RealSleep()) {
    spdlog::set_level(spdlog::level::warn);
    extender::ExtenderOptions options;
    options.resources.device.push_back("graphcore.ai/ipu");
    options.pools = &pools;
    options.provisioner = &provisioner;
    ext = std::make_unique<extender::ExtenderService>(topology::Catalog::Embedded(), options,
                                                      writer, metrics, testing::SteadyNowNs,
                                                      [] { return int64_t{1}; });
    std::vector<kube::Node> nodes;
    for (int i = 0; i < 1000; ++i) {
      kube::Node node;
      node.name = "trn-" + std::to_string(i);
      node.instance_type = "trn1.32xlarge";
      nodes.push_back(node);
      names.push_back(node.name);
    }
    for (int i = 0; i < 64; ++i) {
      nodes.push_back(
          testing::PoolNode("ipu-head-" + std::to_string(i), "pod-" + std::to_string(i % 4)));
      names.push_back(nodes.back().name);
    }
    ext->ReplaceNodes(nodes);
    ext->ReplacePods({});
    router = std::make_unique<extender::Router>(*ext, metrics, /*bind_threads=*/kBindsInFlight);
    filter_body = testing::NamesArgs(
        testing::PodJson("filtered", "uid-filtered", "aws.amazon.com/neuron", 4), names);
  }

  // Keeps kBindsInFlight binds waiting on the provisioner until stopped.
  void StartBinds() {
    stop = false;
    feeder = std::thread([this] {
      std::unique_lock lock(mu);
      while (!stop) {
        while (in_flight < kBindsInFlight && !stop) {
          const std::string uid = "bind-" + std::to_string(next);
          const std::string node = "ipu-head-" + std::to_string(next % 64);
          ++next;
          ++in_flight;
          ext->UpsertPod(testing::IpuPod(uid, uid, 1));
          net::HttpRequest request{"POST", "/bind",
                                   fmt::format(R"({{"PodName":"{0}","PodNamespace":"default",
"PodUID":"{0}","Node":"{1}"}})",
                                               uid, node),
                                   ""};
          request.body.reserve(request.body.size() + 64);
          lock.unlock();
          router->Handle(std::move(request), [this, uid](net::HttpResponse) {
            auto pod = testing::IpuPod(uid, uid, 1);
            ext->DeletePod(pod);  // the partition is removed in the background
            std::lock_guard l(mu);
            --in_flight;
            ++completed;
            cv.notify_all();
          });
          lock.lock();
        }
        cv.wait(lock);
      }
    });
    // Wait until the binds are really waiting on the service.
    while (ext->tracker().Stats().reserved < kBindsInFlight) std::this_thread::sleep_for(1ms);
  }

  void StopBinds() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    feeder.join();
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return in_flight == 0; });
  }

  topology::PoolSet pools;
  provision::FakePartitionService fake;
  testing::InProcessService service;
  provision::Provisioner provisioner;
  extender::OfflineClusterWriter writer;
  extender::Metrics metrics;
  std::unique_ptr<extender::ExtenderService> ext;
  std::unique_ptr<extender::Router> router;
  std::vector<std::string> names;
  std::string filter_body;

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // guarded by mu
  int completed = 0;  // guarded by mu
  int next = 0;       // guarded by mu; pod names are never reused across runs
  bool stop = false;  // guarded by mu
  std::thread feeder;
};

World& TheWorld() {
  static World* world = new World();
  return *world;
}

void BM_FilterWhileBindsWaitOnProvisioner(benchmark::State& state) {
  World& w = TheWorld();
  const bool busy = state.range(0) != 0;
  if (busy) w.StartBinds();
  int completed_before = 0;
  {
    std::lock_guard lock(w.mu);
    completed_before = w.completed;
  }
  std::vector<double> micros;
  for (auto _ : state) {
    net::HttpRequest request{"POST", "/filter", w.filter_body, ""};
    request.body.reserve(request.body.size() + 64);
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    w.router->Handle(std::move(request),
                     [&](net::HttpResponse response) { status = response.status; });
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (status != 200) state.SkipWithError("filter failed");
  }
  int in_flight = 0;
  int finished = 0;
  if (busy) {
    {
      std::lock_guard lock(w.mu);
      in_flight = w.in_flight;
      finished = w.completed - completed_before;
    }
    w.StopBinds();
  }
  std::sort(micros.begin(), micros.end());
  state.counters["p50_us"] = micros[micros.size() / 2];
  state.counters["p99_us"] = micros[micros.size() * 99 / 100];
  state.counters["binds_waiting"] = in_flight;
  state.counters["binds_done"] = finished;  // each took the provisioner's 2 s
}
BENCHMARK(BM_FilterWhileBindsWaitOnProvisioner)
    ->ArgName("binds")
    ->Arg(0)
    ->Arg(kBindsInFlight)
    ->MinTime(3.0)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
