#include "sim/synthetic.h"

#include <charconv>
#include <cmath>
#include <random>
#include <vector>

#include <fmt/format.h>

namespace toposched::sim {
namespace {

struct NamedMix {
  std::string_view name;
  std::string_view spec;
};

// Three shapes of Neuron work: inference fleets of single devices and cores; training with big
// aligned blocks; and a mix that leans on the ring-only counts (2, 3, 6, 12 devices).
constexpr NamedMix kMixes[] = {
    {"inference", "1d=45,2d=10,1c=25,2c=15,4d=5"},
    {"training", "1d=20,4d=20,8d=25,16d=15,2d=5,1c=10,2c=5"},
    {"ring-heavy", "1d=30,2d=15,3d=10,4d=10,6d=10,8d=10,12d=5,16d=2,1c=5,2c=3"},
};

struct Entry {
  topology::Request request;
  double weight = 0;
};

Result<std::vector<Entry>> ParseMix(std::string_view spec) {
  for (const NamedMix& m : kMixes) {
    if (m.name == spec) return ParseMix(m.spec);
  }
  std::vector<Entry> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view size = item.substr(0, eq == std::string_view::npos ? 0 : eq);
    if (eq == std::string_view::npos || size.size() < 2) {
      return Error{
          fmt::format("synthetic mix entry '{}' must be SIZE=WEIGHT, e.g. 4d=10 or 1c=5 "
                      "(or name a mix: {})",
                      item, SyntheticMixNames())};
    }
    int count = 0;
    const auto [cend, cec] = std::from_chars(size.data(), size.data() + size.size() - 1, count);
    const char unit = size.back();
    double weight = 0;
    const std::string_view weight_text = item.substr(eq + 1);
    const auto [wend, wec] =
        std::from_chars(weight_text.data(), weight_text.data() + weight_text.size(), weight);
    if (cec != std::errc{} || cend != size.data() + size.size() - 1 || count < 1 ||
        count > topology::kMaxDevices || (unit != 'd' && unit != 'c') ||
        (unit == 'c' && count > 2)) {
      return Error{
          fmt::format("synthetic mix entry '{}': the size must be 1d to 64d (devices) or "
                      "1c/2c (cores)",
                      item)};
    }
    if (wec != std::errc{} || wend != weight_text.data() + weight_text.size() || weight <= 0 ||
        !std::isfinite(weight)) {
      return Error{
          fmt::format("synthetic mix entry '{}': the weight must be a positive number", item)};
    }
    out.push_back({{unit == 'd' ? topology::Unit::kDevice : topology::Unit::kCore, count}, weight});
  }
  if (out.empty()) {
    return Error{fmt::format("the synthetic mix is empty: give SIZE=WEIGHT pairs or name one of {}",
                             SyntheticMixNames())};
  }
  return out;
}

}  // namespace

std::string_view SyntheticMixNames() { return "inference, training, ring-heavy"; }

Result<Trace> SyntheticTrace(std::string_view spec, int tasks, uint64_t seed) {
  constexpr int kMaxTasks = 10'000'000;
  if (tasks < 1 || tasks > kMaxTasks) {
    return Error{fmt::format("a synthetic trace needs 1 to {} tasks, not {}", kMaxTasks, tasks)};
  }
  TOPOSCHED_ASSIGN_OR_RETURN(auto mix, ParseMix(spec));
  double total = 0;
  for (const Entry& e : mix) total += e.weight;
  // The generator's raw output only (see FillOrder): the same seed gives the same trace with
  // any standard library.
  std::mt19937_64 rng(seed);
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  Trace trace;
  trace.source_name = fmt::format("synthetic:{}", spec);
  trace.has_time_columns = true;
  trace.tasks.reserve(static_cast<size_t>(tasks));
  constexpr double kMeanGapS = 60;
  constexpr double kMeanLifeS = 4 * 3600;
  double now_s = 0;
  for (int k = 0; k < tasks; ++k) {
    double pick = uniform() * total;
    const Entry* chosen = &mix.back();
    for (const Entry& e : mix) {
      if (pick < e.weight) {
        chosen = &e;
        break;
      }
      pick -= e.weight;
    }
    now_s += -std::log(uniform()) * kMeanGapS;
    const int devices = chosen->request.unit == topology::Unit::kDevice ? chosen->request.count : 1;
    const double life_s = -std::log(uniform()) * kMeanLifeS * std::sqrt(devices);
    Task task;
    task.name = fmt::format("synth-{}", k);
    task.line = k + 1;
    if (chosen->request.unit == topology::Unit::kDevice) {
      task.num_gpu = chosen->request.count;
      task.gpu_milli = 1000;
    } else {
      // The inverse of NeuronRequest's mapping: 1 core up to 500 milli, 2 above.
      task.num_gpu = 1;
      task.gpu_milli = chosen->request.count == 1 ? 500 : 900;
    }
    task.has_times = true;
    task.creation_ns = static_cast<int64_t>(now_s * 1e9);
    task.deletion_ns = static_cast<int64_t>((now_s + life_s) * 1e9);
    trace.tasks.push_back(std::move(task));
  }
  return trace;
}

}  // namespace toposched::sim
