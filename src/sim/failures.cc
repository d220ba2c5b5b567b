#include "sim/failures.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include <fmt/format.h>

namespace toposched::sim {
namespace {

constexpr double kNsPerHour = 3600.0 * 1e9;
// The failure stream is apart from the trace's shuffle (a different seed would otherwise move
// both), and seed 0 still draws failures.
constexpr uint64_t kFailureStream = 0x6661696c75726573ULL;  // "failures"

// A uniform draw in (0, 1) from the generator's raw output, so the schedule depends only on the
// seed (the standard distributions may differ between library implementations).
double Uniform(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

double Exponential(std::mt19937_64& rng, double mean) { return -std::log(Uniform(rng)) * mean; }

}  // namespace

double SteadyOutShare(const FailureOptions& options) {
  if (!options.enabled()) return 0;
  const double down = options.per_device_day / 24.0 * options.repair_hours;
  return down / (1.0 + down);
}

Result<std::vector<DeviceOutage>> OutageSchedule(const std::vector<int>& devices_per_node,
                                                 int64_t start_ns, int64_t end_ns,
                                                 const FailureOptions& options, uint64_t seed) {
  std::vector<DeviceOutage> outages;
  if (!options.enabled() || end_ns <= start_ns) return outages;
  std::mt19937_64 rng(seed ^ kFailureStream);
  const double up_mean_ns = 24.0 * kNsPerHour / options.per_device_day;
  const double down_mean_ns = options.repair_hours * kNsPerHour;
  const double span = static_cast<double>(end_ns - start_ns);
  for (size_t node = 0; node < devices_per_node.size(); ++node) {
    for (int device = 0; device < devices_per_node[node]; ++device) {
      double t = 0;
      while (true) {
        t += Exponential(rng, up_mean_ns);
        if (t >= span) break;
        outages.push_back({start_ns + static_cast<int64_t>(t), node, device, true});
        // At least a second out, so that a failure and its return are two moments.
        t += std::max(1e9, Exponential(rng, down_mean_ns));
        if (t >= span) break;
        outages.push_back({start_ns + static_cast<int64_t>(t), node, device, false});
        if (outages.size() > kMaxOutages) {
          return Error{fmt::format(
              "--device-failure-rate {} gives more than {} failures over this replay; is it per "
              "device per day?",
              options.per_device_day, kMaxOutages)};
        }
      }
    }
  }
  std::sort(outages.begin(), outages.end(), [](const DeviceOutage& a, const DeviceOutage& b) {
    return std::tuple(a.t_ns, a.node, a.device, a.fails) <
           std::tuple(b.t_ns, b.node, b.device, b.fails);
  });
  return outages;
}

std::vector<topology::DeviceMask> SteadyOutages(const std::vector<int>& devices_per_node,
                                                const FailureOptions& options, uint64_t seed) {
  std::vector<topology::DeviceMask> out(devices_per_node.size(), 0);
  const double share = SteadyOutShare(options);
  if (share <= 0) return out;
  std::mt19937_64 rng(seed ^ kFailureStream);
  for (size_t node = 0; node < devices_per_node.size(); ++node) {
    for (int device = 0; device < devices_per_node[node]; ++device) {
      if (Uniform(rng) < share) out[node] |= topology::DeviceMask{1} << device;
    }
  }
  return out;
}

}  // namespace toposched::sim
