// Synthetic traces of Neuron-native requests, for the cases the GPU trace does not have: counts
// only a ring can take (3, 6, 12 devices), whole 16-device nodes, and other mixes of devices and
// cores. Pure and deterministic for a seed; the result is a Trace like a parsed CSV, so the
// simulator and its output treat it the same way.
#ifndef TOPOSCHED_SIM_SYNTHETIC_H_
#define TOPOSCHED_SIM_SYNTHETIC_H_

#include <cstdint>
#include <string_view>

#include "base/result.h"
#include "sim/trace.h"

namespace toposched::sim {

// A named mix (docs/simulator.md lists them) or a spec of SIZE=WEIGHT pairs, where SIZE is Nd for
// N devices or Nc for N cores (1 or 2, as a GPU share maps onto cores), e.g.
// "1d=40,2d=10,3d=5,4d=10,6d=5,8d=10,12d=3,16d=2,1c=10,2c=5".
// `tasks` pods arrive as a Poisson stream (one every 60 s on average) and live an exponential
// time (mean 4 h; the larger the request, the longer, as training jobs are), so dynamic mode has
// times to replay. The names are "synth-<k>"; the source name is "synthetic:<spec>".
Result<Trace> SyntheticTrace(std::string_view spec, int tasks, uint64_t seed);

// The named mixes, for --help and errors.
std::string_view SyntheticMixNames();

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_SYNTHETIC_H_
