// What the extender's hand-written answers save over base/json_writer.h: filter's, prioritize's
// and bind's answers are on every Neuron pod's path, so they are appended by hand
// (extender/protocol.cc); everything else is written through the library. Each pair writes the
// same text (checked once before timing). Run from a release build:
//   ./build/bench/json_bench --benchmark_repetitions=3
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "base/json_writer.h"
#include "extender/protocol.h"

namespace {

using namespace toposched;
using namespace toposched::extender;

constexpr int kNames = 5000;  // what kube-scheduler sends at 5 % of 100,000 nodes

const std::vector<std::string>& Names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (int i = 0; i < kNames; ++i)
      out.push_back("ip-10-0-" + std::to_string(i) + ".ec2.internal");
    return out;
  }();
  return names;
}

// A names-form filter answer: `passed` nodes pass, the rest fail with a reason.
FilterResult Filtered(int passed) {
  FilterResult r;
  for (int i = 0; i < kNames; ++i) {
    if (i < passed) {
      r.passed.push_back(Names()[i]);
    } else {
      r.failed[Names()[i]] = "no free set of 4 devices (a ring of 12; 3 free, in 2 chains)";
    }
  }
  return r;
}

std::string FilterThroughLibrary(const FilterResult& r) {
  JsonTree names = JsonTree::array();
  for (std::string_view n : r.passed) names.push_back(n);
  JsonTree failed = JsonTree::object();
  for (const auto& [node, why] : r.failed) failed[node] = why;
  return WriteJson({{"Nodes", nullptr},
                    {"NodeNames", std::move(names)},
                    {"FailedNodes", std::move(failed)},
                    {"FailedAndUnresolvableNodes", JsonTree::object()},
                    {"Error", r.error}});
}

std::vector<HostPriority> Priorities() {
  std::vector<HostPriority> out;
  for (int i = 0; i < kNames; ++i) out.push_back({Names()[i], (i * 37) % 101});
  return out;
}

std::string PrioritiesThroughLibrary(const std::vector<HostPriority>& priorities) {
  JsonTree out = JsonTree::array();
  for (const HostPriority& p : priorities) out.push_back({{"Host", p.host}, {"Score", p.score}});
  return WriteJson(out);
}

template <typename Write>
void Run(benchmark::State& state, const std::string& expected, Write write) {
  if (write() != expected) {
    state.SkipWithError("the two writers disagree");
    return;
  }
  for (auto _ : state) {
    std::string text = write();
    benchmark::DoNotOptimize(text);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(expected.size()));
}

// state.range(0) of the 5,000 nodes pass; the others fail with a reason.
void BM_EncodeFilter5000ByHand(benchmark::State& state) {
  const FilterResult r = Filtered(static_cast<int>(state.range(0)));
  Run(state, FilterThroughLibrary(r), [&] { return EncodeFilterResult(r); });
}
BENCHMARK(BM_EncodeFilter5000ByHand)->Arg(5000)->Arg(8)->Unit(benchmark::kMicrosecond);

void BM_EncodeFilter5000ThroughLibrary(benchmark::State& state) {
  const FilterResult r = Filtered(static_cast<int>(state.range(0)));
  Run(state, EncodeFilterResult(r), [&] { return FilterThroughLibrary(r); });
}
BENCHMARK(BM_EncodeFilter5000ThroughLibrary)->Arg(5000)->Arg(8)->Unit(benchmark::kMicrosecond);

void BM_EncodePrioritize5000ByHand(benchmark::State& state) {
  const auto priorities = Priorities();
  Run(state, PrioritiesThroughLibrary(priorities),
      [&] { return EncodeHostPriorityList(priorities); });
}
BENCHMARK(BM_EncodePrioritize5000ByHand)->Unit(benchmark::kMicrosecond);

void BM_EncodePrioritize5000ThroughLibrary(benchmark::State& state) {
  const auto priorities = Priorities();
  Run(state, EncodeHostPriorityList(priorities),
      [&] { return PrioritiesThroughLibrary(priorities); });
}
BENCHMARK(BM_EncodePrioritize5000ThroughLibrary)->Unit(benchmark::kMicrosecond);

void BM_EncodeBindByHand(benchmark::State& state) {
  Run(state, EncodeErrorAnswer(""), [] { return EncodeBindingResult(""); });
}
BENCHMARK(BM_EncodeBindByHand);

void BM_EncodeBindThroughLibrary(benchmark::State& state) {
  Run(state, EncodeBindingResult(""), [] { return EncodeErrorAnswer(""); });
}
BENCHMARK(BM_EncodeBindThroughLibrary);

}  // namespace

BENCHMARK_MAIN();
