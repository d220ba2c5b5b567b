// The p50/p99 of single calls, reported as benchmark counters (every latency benchmark here
// reports them the same way, docs/benchmarks.md).
#ifndef TOPOSCHED_BENCH_PERCENTILES_H_
#define TOPOSCHED_BENCH_PERCENTILES_H_

#include <algorithm>
#include <vector>

#include <benchmark/benchmark.h>

namespace toposched::bench {

inline void ReportPercentiles(benchmark::State& state, std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  if (ms.empty()) return;
  state.counters["p50_ms"] = ms[ms.size() / 2];
  state.counters["p99_ms"] = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
}

}  // namespace toposched::bench

#endif  // TOPOSCHED_BENCH_PERCENTILES_H_
