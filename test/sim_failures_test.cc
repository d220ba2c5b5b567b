// Device failures in the simulator (sim/failures.h, Options::failures): the schedule is drawn once
// from the seed, every policy meets the same failures, pods on a failed device keep it (event) or
// start again (evict), fill mode loses the long-run share from the start, and the report says
// what failures cost each policy against its run without them.
#include <bit>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/failures.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/synthetic.h"
#include "support/run_command.h"
#include "topology/catalog.h"

namespace toposched::sim {
namespace {

using topology::Policy;

constexpr int64_t kHourNs = 3600LL * 1'000'000'000;

TEST(SimFailures, TheScheduleIsDeterministicAndEachDeviceAlternates) {
  const FailureOptions options{.per_device_day = 2, .repair_hours = 3};
  const std::vector<int> devices = {16, 0, 12};  // the middle node's devices are not its own
  auto a = OutageSchedule(devices, 0, 20 * 24 * kHourNs, options, 7);
  auto b = OutageSchedule(devices, 0, 20 * 24 * kHourNs, options, 7);
  auto c = OutageSchedule(devices, 0, 20 * 24 * kHourNs, options, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->size(), b->size());
  EXPECT_NE(a->size(), 0u);
  int failures = 0;
  std::map<std::pair<size_t, int>, bool> down;
  int64_t last = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const DeviceOutage& o = (*a)[i];
    EXPECT_EQ(o.t_ns, (*b)[i].t_ns);
    EXPECT_GE(o.t_ns, last);  // time order
    last = o.t_ns;
    EXPECT_NE(o.node, 1u);
    EXPECT_LT(o.device, devices[o.node]);
    bool& is_down = down[{o.node, o.device}];
    EXPECT_NE(is_down, o.fails) << "a device fails only when up and returns only when down";
    is_down = o.fails;
    failures += o.fails ? 1 : 0;
  }
  // 28 devices x 2 per day x 20 days, less the time spent down (3 h of every 12 up): about 1,000.
  EXPECT_GT(failures, 800);
  EXPECT_LT(failures, 1200);
  ASSERT_FALSE(c->empty());
  EXPECT_NE(a->front().t_ns, c->front().t_ns) << "another seed, other failures";

  EXPECT_TRUE(OutageSchedule(devices, 0, 24 * kHourNs, FailureOptions{}, 7)->empty());
}

TEST(SimFailures, FillModeTakesTheLongRunShareOut) {
  // One failure a day, a day to repair: half the time down.
  const FailureOptions options{.per_device_day = 1, .repair_hours = 24};
  EXPECT_DOUBLE_EQ(SteadyOutShare(options), 0.5);
  EXPECT_DOUBLE_EQ(SteadyOutShare(FailureOptions{}), 0.0);
  const std::vector<topology::DeviceMask> out =
      SteadyOutages(std::vector<int>(500, 16), options, 3);
  int down = 0;
  for (topology::DeviceMask m : out) down += std::popcount(m);
  EXPECT_GT(down, 3600);  // of 8,000
  EXPECT_LT(down, 4400);
}

Trace Synthetic(int tasks) {
  auto trace = SyntheticTrace("1d=40,2d=10,4d=10,8d=5,1c=10", tasks, 11);
  EXPECT_TRUE(trace.ok());
  return trace.ok() ? *trace : Trace{};
}

Options Fleet(Mode mode, FailureOptions failures) {
  Options options;
  options.mode = mode;
  options.fleet =
      ParseFleet("inf2.48xlarge=2,trn1.32xlarge=2", topology::Catalog::Embedded()).value();
  options.policies = {Policy::kScarcity, Policy::kFirstFit, Policy::kCountOnly};
  options.failures = failures;
  options.seed = 5;
  return options;
}

SimResult MustSimulate(const Trace& trace, const Options& options) {
  auto result = Simulate(topology::Catalog::Embedded(), trace, options);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error());
  return result.ok() ? *result : SimResult{};
}

TEST(SimFailures, QueueWithEventLeavesThePodsOnTheirDevices) {
  const Trace trace = Synthetic(600);
  const SimResult r =
      MustSimulate(trace, Fleet(Mode::kQueue, {.per_device_day = 3, .repair_hours = 2}));
  const SimResult plain = MustSimulate(trace, Fleet(Mode::kQueue, {}));
  ASSERT_EQ(r.policies.size(), 3u);
  ASSERT_EQ(r.without_failures.size(), 3u);
  EXPECT_TRUE(plain.without_failures.empty());
  EXPECT_GT(r.device_failures, 0);
  EXPECT_GT(r.device_hours_out, 0);
  int hit = 0;
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const PolicyResult& p = r.policies[i];
    hit += p.pods_hit;
    EXPECT_EQ(p.evicted, 0);
    EXPECT_EQ(p.lost_device_hours, 0);
    // The run without failures is the plain run.
    EXPECT_EQ(r.without_failures[i].policy, p.policy);
    EXPECT_DOUBLE_EQ(r.without_failures[i].mean_wait_s, plain.policies[i].mean_wait_s);
    EXPECT_DOUBLE_EQ(r.without_failures[i].device_hours, plain.policies[i].device_hours);
  }
  EXPECT_GT(hit, 0) << "the rate was chosen so that running pods meet failures";
}

TEST(SimFailures, QueueWithEvictStartsThePodsHitAgain) {
  const Trace trace = Synthetic(600);
  const SimResult r = MustSimulate(
      trace, Fleet(Mode::kQueue, {.per_device_day = 3, .repair_hours = 2, .evict = true}));
  for (const PolicyResult& p : r.policies) {
    EXPECT_GT(p.pods_hit, 0) << PolicyName(p.policy);
    EXPECT_EQ(p.evicted, p.pods_hit);
    EXPECT_GT(p.lost_device_hours, 0);
    // A pod started again is still one pod.
    EXPECT_LE(p.placed + p.rejected, r.gpu_tasks);
  }
}

TEST(SimFailures, DynamicEvictPlacesAgainOrDrops) {
  const Trace trace = Synthetic(600);
  const SimResult r = MustSimulate(
      trace, Fleet(Mode::kDynamic, {.per_device_day = 3, .repair_hours = 2, .evict = true}));
  for (const PolicyResult& p : r.policies) {
    EXPECT_EQ(p.evicted, p.pods_hit);
    EXPECT_LE(p.dropped_after_eviction, p.evicted);
    EXPECT_EQ(p.placed + p.rejected, r.gpu_tasks);
  }
}

TEST(SimFailures, FillLosesDevicesFromTheStart) {
  const Trace trace = Synthetic(600);
  const SimResult r =
      MustSimulate(trace, Fleet(Mode::kFill, {.per_device_day = 0.5, .repair_hours = 12}));
  EXPECT_GT(r.device_failures, 0);
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const PolicyResult& p = r.policies[i];
    // A device out of service is never allocated.
    EXPECT_LE(p.devices_allocated_at_end, r.total_devices - r.device_failures + 1e-9);
    EXPECT_LT(p.devices_allocated_at_end, r.without_failures[i].devices_allocated_at_end);
  }
}

TEST(SimFailures, TheReportSaysWhatFailuresCost) {
  const SimResult r =
      MustSimulate(Synthetic(300), Fleet(Mode::kQueue, {.per_device_day = 3, .repair_hours = 2}));
  const std::string table = FormatTable(r, "synthetic");
  EXPECT_NE(table.find("failures: 3 per device per day"), std::string::npos) << table;
  EXPECT_NE(table.find("pods on a device that failed"), std::string::npos) << table;
  EXPECT_NE(table.find("cost: mean wait added (hours)"), std::string::npos) << table;
  const std::string json = FormatJson(r, "synthetic");
  EXPECT_NE(json.find("\"failures\":{\"per_device_day\":3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"without_failures\":{"), std::string::npos) << json;
  // Without failures, nothing about them.
  const SimResult plain = MustSimulate(Synthetic(300), Fleet(Mode::kQueue, {}));
  EXPECT_EQ(FormatTable(plain, "synthetic").find("failure"), std::string::npos);
  EXPECT_EQ(FormatJson(plain, "synthetic").find("\"failures\""), std::string::npos);
}

TEST(SimFailuresCli, FlagsAndTheirErrors) {
  const auto ok = testing::RunToposched(
      "simulate --mode queue --synthetic 1d=40,4d=10 --synthetic-tasks 200 "
      "--fleet inf2.48xlarge=1 --policy scarcity --device-failure-rate 2 "
      "--device-repair-hours 4 --on-device-failure evict");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("is evicted and starts again"), std::string::npos) << ok.out;
  const auto no_rate = testing::RunToposched("simulate --device-repair-hours 4");
  EXPECT_EQ(no_rate.exit_code, 2) << no_rate.out;
  const auto bad_policy =
      testing::RunToposched("simulate --device-failure-rate 1 --on-device-failure sometimes");
  EXPECT_EQ(bad_policy.exit_code, 2) << bad_policy.out;
  const auto negative = testing::RunToposched("simulate --device-failure-rate -1");
  EXPECT_EQ(negative.exit_code, 2) << negative.out;
}

}  // namespace
}  // namespace toposched::sim
