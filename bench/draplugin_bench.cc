// The DRA plugin's NodePrepareResources work, measured with Google Benchmark.
// Run from a release build:  ./build/bench/draplugin_bench --benchmark_repetitions=3
//
// BM_Prepare: DraPlugin::Prepare of one claim end to end — the GET of the ResourceClaim from a
// loopback fake API server (HTTPS, test/support), planning, the checks against the claims
// already prepared, the CDI spec written (temp file, fsync, rename) and the usage published to a
// fake publisher — with N other claims prepared. Each iteration then unprepares the claim
// (untimed), so every iteration sees the same N. The CDI root is on tmpfs (/dev/shm), so fsync
// does not dominate. BM_PlanClaim and BM_UsageOfPrepared are the pure steps inside it: planning
// one decoded claim, and adding N prepared claims' units to a usage (each publish does that).
//
// Uses only what the plugin had before issue 29 too (DraPlugin, PlanClaim, AddClaimUnits), so
// the same file builds against the old and the new code for side-by-side runs.
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dra/offers.h"
#include "dra/slices.h"
#include "draplugin/plugin.h"
#include "draplugin/prepare.h"
#include "draplugin/resource_claim.h"
#include "kube/client.h"
#include "node_fixtures.h"
#include "support/fake_apiserver.h"
#include "topology/catalog.h"

namespace {

using namespace toposched;
using namespace toposched::draplugin;

constexpr char kNode[] = "node-a";

class NullPublisher : public UsagePublisher {
 public:
  Status Publish(topology::DeviceMask, const dra::DeviceFaults&,
                 const topology::NodeUsage& usage) override {
    benchmark::DoNotOptimize(usage.used_core_count());
    return OkStatus();
  }
  void ObserveRequest(const topology::Request&) override {}
};

// What a node holds: the N claims prepared first, then the one each iteration prepares.
struct Layout {
  std::string type;
  int lnc = 0;                                 // 0: the type's default
  std::string (*device)(int index) = nullptr;  // the DRA device claim `index` is allocated
  int measured = 0;                            // the index of the measured claim
};

// inf2.48xlarge (12 devices x 2 cores): one core per claim; the measured claim takes core 23.
std::string Inf2Core(int i) { return fmt::format("neuroncores-{}-{}", i, i); }
// trn2.48xlarge at LNC 2 (16 devices x 4 cores): one device per claim; the measured one is 15.
std::string Trn2Device(int i) { return fmt::format("neurondevice{}", i); }
// trn2.48xlarge at LNC 2: two logical cores (four physical) per claim; the measured one 62-63.
std::string Trn2CorePair(int i) { return fmt::format("neuroncores-{}-{}", 2 * i, 2 * i + 1); }

const Layout kInf2Cores{"inf2.48xlarge", 0, Inf2Core, 23};
const Layout kTrn2Devices{"trn2.48xlarge", 2, Trn2Device, 15};
const Layout kTrn2CorePairs{"trn2.48xlarge", 2, Trn2CorePair, 31};

std::string ClaimName(int i) { return fmt::format("claim-{}", i); }
std::string ClaimUid(int i) { return fmt::format("uid-{}", i); }

// A resource.k8s.io/v1 ResourceClaim allocated `device` (request "neurons") on this node.
std::string ClaimJson(int i, const std::string& device) {
  return fmt::format(
      R"({{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",)"
      R"("metadata":{{"namespace":"default","name":"{}","uid":"{}"}},)"
      R"("spec":{{"devices":{{"requests":[{{"name":"neurons","exactly":{{"deviceClassName":"neuron"}}}}],"config":[]}}}},)"
      R"("status":{{"allocation":{{"devices":{{"results":[{{"request":"neurons","driver":"neuron.aws.com","pool":"{}","device":"{}"}}]}}}}}}}})",
      ClaimName(i), ClaimUid(i), kNode, device);
}

ClaimRef RefOf(int i) { return ClaimRef{"default", ClaimUid(i), ClaimName(i)}; }

topology::NodeShape ShapeOf(const Layout& layout) {
  return *topology::NodeShape::Make(*topology::Catalog::Embedded().Find(layout.type), layout.lnc);
}

// A started plugin on a fake host under /dev/shm, reading claims from a fake API server.
struct Node {
  explicit Node(const Layout& layout) : shape(ShapeOf(layout)) {
    spdlog::set_level(spdlog::level::warn);
    char pattern[] = "/dev/shm/tsdrab.XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return;
    dir = pattern;
    host.root = dir + "/host";
    host.Install(layout.type, layout.lnc);
    client = std::move(kube::ApiClient::FromKubeconfig(api.WriteKubeconfig(dir + "/kubeconfig")))
                 .value();
    // The plugin's Node: Prepare labels it toposched.io/dra-claims-held.
    api.UpsertNode(fmt::format(R"({{"kind":"Node","apiVersion":"v1","metadata":{{"name":"{}",)"
                               R"("labels":{{"toposched.io/neuron-management":"dra"}}}}}})",
                               kNode));
    DraPluginOptions options;
    options.node_name = kNode;
    options.host.sysfs_root = host.sys();
    options.host.dev_root = host.dev();
    options.host.opt_aws_root = host.opt();
    options.cdi_root = dir + "/cdi";
    options.plugin_dir = dir + "/plugins/neuron.aws.com";
    options.registry_dir = dir + "/plugins_registry";
    // No health check or resync during the run.
    options.health_interval = std::chrono::hours(1);
    options.resync_interval = std::chrono::hours(1);
    plugin = std::make_unique<DraPlugin>(options, shape, *client, publisher);
    started = plugin->Start().ok();
  }
  ~Node() {
    plugin.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  // Serves claim `i` allocated `device`; an empty string when Prepare took it, else its error.
  std::string ServeAndPrepare(int i, const std::string& device) {
    api.ServeJson("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + ClaimName(i),
                  ClaimJson(i, device));
    return plugin->Prepare({RefOf(i)})[ClaimUid(i)].error;
  }

  topology::NodeShape shape;
  std::string dir;
  testing::FakeHost host;
  testing::FakeApiServer api;
  std::unique_ptr<kube::ApiClient> client;
  NullPublisher publisher;
  std::unique_ptr<DraPlugin> plugin;
  bool started = false;
};

void BM_Prepare(benchmark::State& state, const Layout& layout) {
  const int held = static_cast<int>(state.range(0));
  Node node(layout);
  if (!node.started) return state.SkipWithError("the plugin did not start");
  for (int i = 0; i < held; ++i) {
    if (std::string error = node.ServeAndPrepare(i, layout.device(i)); !error.empty())
      return state.SkipWithError(error.c_str());
  }
  const int m = layout.measured;
  if (std::string error = node.ServeAndPrepare(m, layout.device(m)); !error.empty())
    return state.SkipWithError(error.c_str());
  const std::vector<ClaimRef> refs = {RefOf(m)};
  for (auto _ : state) {
    state.PauseTiming();
    if (!node.plugin->Unprepare(refs)[ClaimUid(m)].empty())
      return state.SkipWithError("Unprepare failed");
    state.ResumeTiming();
    auto outcomes = node.plugin->Prepare(refs);
    if (!outcomes[ClaimUid(m)].error.empty())
      return state.SkipWithError(outcomes[ClaimUid(m)].error.c_str());
  }
  state.counters["prepared"] = static_cast<double>(node.plugin->PreparedClaims().size());
}
BENCHMARK_CAPTURE(BM_Prepare, inf2_cores, kInf2Cores)
    ->Arg(0)
    ->Arg(8)
    ->Arg(15)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prepare, trn2_devices, kTrn2Devices)
    ->Arg(0)
    ->Arg(8)
    ->Arg(15)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prepare, trn2_core_pairs, kTrn2CorePairs)
    ->Arg(0)
    ->Arg(8)
    ->Arg(15)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// PlanClaim alone, on a claim decoded once.
void BM_PlanClaim(benchmark::State& state, const Layout& layout) {
  const topology::NodeShape shape = ShapeOf(layout);
  const int m = layout.measured;
  auto claim = DecodeResourceClaim(ClaimJson(m, layout.device(m)));
  if (!claim.ok()) return state.SkipWithError(claim.error().c_str());
  const PrepareContext context{&shape, kNode, nodeagent::CoreNumbering::kContainer};
  for (auto _ : state) {
    auto planned = PlanClaim(context, *claim, ClaimUid(m));
    if (!planned.ok()) return state.SkipWithError(planned.error().c_str());
    benchmark::DoNotOptimize(planned);
  }
}
BENCHMARK_CAPTURE(BM_PlanClaim, inf2_cores, kInf2Cores);
BENCHMARK_CAPTURE(BM_PlanClaim, trn2_devices, kTrn2Devices);
BENCHMARK_CAPTURE(BM_PlanClaim, trn2_core_pairs, kTrn2CorePairs);

// What every publish does under the plugin's lock: N + 1 prepared claims' units into one usage.
void BM_UsageOfPrepared(benchmark::State& state, const Layout& layout) {
  const topology::NodeShape shape = ShapeOf(layout);
  const PrepareContext context{&shape, kNode, nodeagent::CoreNumbering::kContainer};
  std::vector<PreparedClaim> claims;
  std::vector<int> indexes;
  for (int i = 0; i < state.range(0); ++i) indexes.push_back(i);
  indexes.push_back(layout.measured);
  for (int i : indexes) {
    auto claim = DecodeResourceClaim(ClaimJson(i, layout.device(i)));
    if (!claim.ok()) return state.SkipWithError(claim.error().c_str());
    auto planned = PlanClaim(context, *claim, ClaimUid(i));
    if (!planned.ok()) return state.SkipWithError(planned.error().c_str());
    claims.push_back(std::move(planned).value());
  }
  for (auto _ : state) {
    topology::NodeUsage usage;
    for (const PreparedClaim& claim : claims) AddClaimUnits(shape, claim, usage);
    benchmark::DoNotOptimize(usage);
  }
}
BENCHMARK_CAPTURE(BM_UsageOfPrepared, inf2_cores, kInf2Cores)->Arg(0)->Arg(15);
BENCHMARK_CAPTURE(BM_UsageOfPrepared, trn2_devices, kTrn2Devices)->Arg(0)->Arg(15);
BENCHMARK_CAPTURE(BM_UsageOfPrepared, trn2_core_pairs, kTrn2CorePairs)->Arg(0)->Arg(15);

// Every publish builds the node's slices twice (once for their digests), through
// base/json_writer.h: what that costs per build, by node and offer scope (docs/benchmarks.md,
// "JSON through one writer"). The whole trn2.48xlarge at LNC 1 with core ranges is ~600 offers.
void BM_BuildSlices(benchmark::State& state, const char* type, int lnc, dra::OfferScope scope) {
  const auto shape = topology::NodeShape::Make(*topology::Catalog::Embedded().Find(type), lnc);
  if (!shape.ok()) return state.SkipWithError(shape.error().c_str());
  const dra::NodeFacts facts{kNode, "uid-node", "2.19.64.0", "0.1.0", {}};
  const std::vector<dra::Offer> offers = dra::LegalOffers(*shape, scope);
  const bool partitionable = scope != dra::OfferScope::kWholeDevices;
  size_t bytes = 0;
  for (auto _ : state) {
    const auto slices = dra::BuildSlices(facts, *shape, offers, {.partitionable = partitionable});
    bytes = 0;
    for (const auto& slice : slices) bytes += slice.json.size();
    benchmark::DoNotOptimize(bytes);
  }
  state.counters["offers"] = static_cast<double>(offers.size());
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK_CAPTURE(BM_BuildSlices, trn2_lnc1_cores, "trn2.48xlarge", 1,
                  dra::OfferScope::kDeviceSetsAndCores)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildSlices, trn2_lnc1_devices, "trn2.48xlarge", 1,
                  dra::OfferScope::kWholeDevices)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildSlices, inf2_sets_and_cores, "inf2.48xlarge", 0,
                  dra::OfferScope::kDeviceSetsAndCores)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
