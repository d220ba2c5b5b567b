// The simulator with shared IPU pools in the fleet: a pool's devices are counted once however
// many head nodes reach it, a pod placed through one head takes the devices for all of them, and
// the usual metrics come out.
#include <gtest/gtest.h>

#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/trace.h"

namespace toposched::sim {
namespace {

using topology::Policy;

const topology::Catalog& Cat() { return topology::Catalog::Embedded(); }

Options PoolOptions(Mode mode, std::string_view fleet) {
  Options options;
  options.mode = mode;
  auto parsed = ParseFleet(fleet, Cat());
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error());
  if (parsed.ok()) options.fleet = parsed.value();
  options.policies = {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly};
  options.record_report_data = true;
  return options;
}

TEST(SimPoolsTest, ParsesPoolsWithHeadsAndRefusesNonPoolKinds) {
  auto fleet = ParseFleet("trn1.32xlarge=1,ipu-pod16=2/4", Cat());
  ASSERT_TRUE(fleet.ok()) << fleet.error();
  ASSERT_EQ(fleet->size(), 2u);
  EXPECT_EQ((*fleet)[1].heads, 4);
  EXPECT_EQ(FormatFleet(*fleet), "trn1.32xlarge=1,ipu-pod16=2/4");
  auto bad = ParseFleet("inf2.48xlarge=1/2", Cat());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("cannot be a shared pool"), std::string::npos) << bad.error();
  EXPECT_FALSE(ParseFleet("ipu-pod16=1/0", Cat()).ok());
  EXPECT_FALSE(ParseFleet("ipu-pod16=1/x", Cat()).ok());
}

TEST(SimPoolsTest, APoolSharedByFourHeadsHoldsSixteenDevicesNotSixtyFour) {
  // 20 one-device pods, all at once: 16 fit in the one pool, whatever head they go through.
  std::string csv = "name,num_gpu,gpu_milli,creation_time,deletion_time\n";
  for (int i = 0; i < 20; ++i) csv += "t" + std::to_string(i) + ",1,1000,0,100\n";
  auto trace = ParseTrace(csv, "pods.csv");
  ASSERT_TRUE(trace.ok()) << trace.error();
  auto result = Simulate(Cat(), *trace, PoolOptions(Mode::kDynamic, "ipu-pod16=1/4"));
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(result->nodes, 4);
  EXPECT_EQ(result->total_devices, 16);
  for (const auto& p : result->policies) {
    EXPECT_EQ(p.placed, 16) << topology::PolicyName(p.policy);
    EXPECT_EQ(p.rejected, 4);
    EXPECT_DOUBLE_EQ(p.peak_allocated_share, 1.0);
    ASSERT_EQ(p.device_maps.size(), 1u);  // the pool, drawn once
  }
  const std::string json = FormatJson(*result, "pods.csv");
  EXPECT_NE(json.find("\"heads\":4"), std::string::npos);
}

TEST(SimPoolsTest, FillModeOnAMixedFleetReportsTheSameMetrics) {
  std::string csv = "name,num_gpu,gpu_milli\n";
  const int sizes[] = {1, 2, 4, 8, 1, 1, 2, 4, 16, 8, 2, 1};
  for (int i = 0; i < 60; ++i) {
    csv += "t" + std::to_string(i) + "," + std::to_string(sizes[i % 12]) + ",1000\n";
  }
  auto trace = ParseTrace(csv, "fill.csv");
  ASSERT_TRUE(trace.ok()) << trace.error();
  auto result = Simulate(Cat(), *trace, PoolOptions(Mode::kFill, "trn1.32xlarge=1,ipu-pod16=2/3"));
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(result->nodes, 7);
  EXPECT_EQ(result->total_devices, 48);
  for (const auto& p : result->policies) {
    EXPECT_TRUE(p.failed);
    EXPECT_GT(p.placed, 0);
    EXPECT_LE(p.devices_allocated_at_end, 48.0);
    EXPECT_GE(p.unallocated_share_at_end, 0.0);
  }
}

}  // namespace
}  // namespace toposched::sim
