// Queue mode (sim/simulator.h, Mode::kQueue): pods that do not fit wait as kube-scheduler keeps
// them Pending, are tried again when a pod leaves, run their whole lifetime from when they start,
// and a waiting big pod never blocks a smaller one behind it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "topology/catalog.h"
#include "topology/queue.h"

namespace toposched::sim {
namespace {

SimResult RunQueue(std::string_view csv, std::string_view fleet_spec,
                   topology::Policy policy = topology::Policy::kFirstFit,
                   int64_t hold_back_age_ns = 0) {
  auto trace = ParseTrace(csv, "test");
  EXPECT_TRUE(trace.ok());
  auto fleet = ParseFleet(fleet_spec, topology::Catalog::Embedded());
  EXPECT_TRUE(fleet.ok());
  Options options;
  options.mode = Mode::kQueue;
  options.fleet = fleet.value();
  options.policies = {policy};
  options.hold_back_age_ns = hold_back_age_ns;
  auto result = Simulate(topology::Catalog::Embedded(), trace.value(), options);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error());
  return result.ok() ? result.value() : SimResult{};
}

// One trn1.32xlarge (16 devices). A holds 8 devices for 100 s; B asks for 16 at t=1 and must
// wait; C asks for 4 at t=2 and fits at once beside A, although B arrived first.
constexpr std::string_view kNoHeadOfLine =
    "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
    "A,8,1000,0,100\n"
    "B,16,1000,1,51\n"
    "C,4,1000,2,202\n";

TEST(SimQueueTest, AWaitingBigPodDoesNotBlockASmallerOne) {
  const SimResult r = RunQueue(kNoHeadOfLine, "trn1.32xlarge=1");
  ASSERT_EQ(r.policies.size(), 1u);
  const PolicyResult& p = r.policies.front();
  EXPECT_EQ(p.placed, 3);
  EXPECT_EQ(p.rejected, 0);
  EXPECT_EQ(p.waited, 1);  // B only
  EXPECT_EQ(p.still_waiting, 0);
  // B starts when C leaves at 202 (A left at 100): waited 201 s; A and C waited 0.
  EXPECT_NEAR(p.mean_wait_s, 201.0 / 3, 1e-9);
  EXPECT_NEAR(p.p95_wait_s, 201.0, 1e-9);
  // B then runs its 50 s: the last departure is at 252.
  EXPECT_NEAR(p.makespan_s, 252.0, 1e-9);
  // 8 x 100 + 4 x 200 + 16 x 50 device-seconds.
  EXPECT_NEAR(p.device_hours, (800.0 + 800.0 + 800.0) / 3600.0, 1e-9);
}

// One trn1.32xlarge. A holds all 16 devices until 100 s; B (16 devices) and then C and D (4 each)
// wait for it. In queue order B starts first and C and D wait for B too; ours lets the smaller
// two go first (the same devices start two pods), and B starts when they leave.
constexpr std::string_view kSmallerFirst =
    "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
    "A,16,1000,0,100\n"
    "B,16,1000,1,51\n"
    "C,4,1000,2,52\n"
    "D,4,1000,3,53\n";

TEST(SimQueueTest, OursLetsSmallerWaitingPodsGoFirst) {
  const PolicyResult fifo = RunQueue(kSmallerFirst, "trn1.32xlarge=1").policies.front();
  // B waits 99 s, C and D until B leaves at 150.
  EXPECT_NEAR(fifo.mean_wait_s, (0 + 99 + 148 + 147) / 4.0, 1e-9);
  // Off by default: ours starts B first, as the extender would.
  EXPECT_NEAR(RunQueue(kSmallerFirst, "trn1.32xlarge=1", topology::Policy::kScarcity)
                  .policies.front()
                  .mean_wait_s,
              fifo.mean_wait_s, 1e-9);
  const PolicyResult ours = RunQueue(kSmallerFirst, "trn1.32xlarge=1", topology::Policy::kScarcity,
                                     topology::kHoldBackAgeNs)
                                .policies.front();
  EXPECT_EQ(ours.placed, 4);
  // C and D start at 100 and leave at 150; B starts then.
  EXPECT_NEAR(ours.mean_wait_s, (0 + 149 + 98 + 97) / 4.0, 1e-9);
  EXPECT_NEAR(ours.makespan_s, fifo.makespan_s, 1e-9);
}

TEST(SimQueueTest, FairnessCountsABigPodsWaitPerDeviceAndPerRequestClass) {
  // The same run as above: B (16 devices) waited 201 s, A (8) and C (4) none.
  const PolicyResult p = RunQueue(kNoHeadOfLine, "trn1.32xlarge=1").policies.front();
  EXPECT_NEAR(p.max_wait_s, 201.0, 1e-9);
  // 201 s counted 16 times over the 28 devices the three pods held.
  EXPECT_NEAR(p.device_weighted_mean_wait_s, 201.0 * 16 / 28, 1e-9);
  ASSERT_EQ(p.wait_by_request.size(), 3u);  // 4, 8, 16 devices: smallest first
  EXPECT_EQ(topology::RequestLabel(p.wait_by_request[0].request), "4 devices");
  EXPECT_EQ(p.wait_by_request[0].pods, 1);
  EXPECT_NEAR(p.wait_by_request[0].max_s, 0.0, 1e-9);
  EXPECT_EQ(topology::RequestLabel(p.wait_by_request[2].request), "16 devices");
  EXPECT_NEAR(p.wait_by_request[2].p95_s, 201.0, 1e-9);
  EXPECT_NEAR(p.wait_by_request[2].mean_s, 201.0, 1e-9);
  // The report and its JSON say it per class.
  SimResult r = RunQueue(kNoHeadOfLine, "trn1.32xlarge=1");
  const std::string text = FormatTable(r, "test");
  EXPECT_NE(text.find("device-weighted mean wait (hours)"), std::string::npos) << text;
  EXPECT_NE(text.find("p95 / max wait per request (hours)"), std::string::npos) << text;
  const std::string json = FormatJson(r, "test");
  EXPECT_NE(json.find("\"16 devices\":{\"pods\":1,\"mean_wait_hours\":0.0558,"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"device_weighted_mean_wait_hours\":0.0319"), std::string::npos) << json;
}

TEST(SimQueueTest, WaitingWhileUnitsAreFreeIsFragmentation) {
  // inf2.24xlarge: 6 devices in a chain. First-fit puts X, Y, Z on 0, 1, 2; Y leaves, so a
  // 4-device pod finds 4 free units (1, 3, 4, 5) that are not consecutive and waits.
  constexpr std::string_view csv =
      "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "X,1,1000,0,100\n"
      "Y,1,1000,0,10\n"
      "Z,1,1000,0,100\n"
      "W,4,1000,20,30\n";
  const PolicyResult p = RunQueue(csv, "inf2.24xlarge=1").policies.front();
  EXPECT_EQ(p.waited, 1);
  // W waits from 20 to 100, the whole time with 4 free units not in a run of 4.
  EXPECT_NEAR(p.fragmented_wait_share, 1.0, 1e-9);
  EXPECT_NEAR(p.mean_wait_s, 80.0 / 4, 1e-9);
}

TEST(SimQueueTest, APodThatNeverFitsWaitsToTheEnd) {
  // 16 devices on an inf2.24xlarge (6) can never be granted: refused as never legal, not queued.
  constexpr std::string_view csv =
      "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "big,16,1000,0,10\n"
      "ok,1,1000,0,10\n";
  const PolicyResult p = RunQueue(csv, "inf2.24xlarge=1").policies.front();
  EXPECT_EQ(p.placed, 1);
  EXPECT_EQ(p.rejected, 1);
  EXPECT_EQ(p.still_waiting, 0);
}

TEST(SimQueueTest, EveryPolicyStartsEveryPodAndTheReportsShowTheQueue) {
  constexpr std::string_view csv =
      "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "a,2,1000,0,100\n"
      "b,1,300,5,50\n"
      "c,8,1000,6,60\n";
  auto trace = ParseTrace(csv, "t");
  ASSERT_TRUE(trace.ok());
  auto fleet = ParseFleet(kDefaultDynamicFleet, topology::Catalog::Embedded());
  ASSERT_TRUE(fleet.ok());
  Options options;
  options.mode = Mode::kQueue;
  options.fleet = fleet.value();
  options.policies = {topology::Policy::kScarcity, topology::Policy::kFirstFit,
                      topology::Policy::kCountOnly};
  options.record_report_data = true;
  auto r = Simulate(topology::Catalog::Embedded(), trace.value(), options);
  ASSERT_TRUE(r.ok()) << r.error();
  for (const PolicyResult& p : r->policies) EXPECT_EQ(p.placed, 3);
  EXPECT_NE(FormatTable(r.value(), "t").find("mean wait (hours)"), std::string::npos);
  EXPECT_NE(FormatJson(r.value(), "t").find("\"mean_wait_hours\""), std::string::npos);
  EXPECT_NE(FormatHtml(r.value(), "t").find("Pods waiting"), std::string::npos);
}

// The table never shows a baseline ahead of ours without a line saying why, or calling it a loss.
SimResult TwoPolicies(Mode mode) {
  SimResult r;
  r.mode = mode;
  r.policies.resize(2);
  r.policies[0].policy = topology::Policy::kScarcity;
  r.policies[1].policy = topology::Policy::kSpread;
  return r;
}

TEST(SimReportLeads, ExplainsABaselineAheadOrCallsItALoss) {
  SimResult fill = TwoPolicies(Mode::kFill);
  fill.policies[0].placed = 597;
  fill.policies[1].placed = 600;
  fill.policies[0].devices_allocated_at_end = fill.policies[1].devices_allocated_at_end = 500;
  fill.policies[1].unallocated_share_at_first_failure = 0.3;
  std::string text = FormatTable(fill, "t");
  EXPECT_NE(
      text.find(
          "pods placed, and so rejected (ours 597 placed in 500.0 devices): spread 600 in 500.0"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("the packing measure is the first failure"), std::string::npos);
  EXPECT_EQ(text.find("a loss of ours"), std::string::npos);

  fill.policies[1].devices_allocated_at_end = 501;  // more pods and more devices: no excuse
  EXPECT_NE(FormatTable(fill, "t").find("a loss of ours"), std::string::npos);

  SimResult queue = TwoPolicies(Mode::kQueue);
  queue.policies[0].mean_wait_s = 3600;
  queue.policies[1].mean_wait_s = 7200;
  queue.policies[0].device_hours = 100;
  queue.policies[1].device_hours = 110;
  text = FormatTable(queue, "t");
  EXPECT_NE(text.find("ours did the same work in less capacity"), std::string::npos) << text;
  EXPECT_EQ(text.find("a loss of ours"), std::string::npos);
  queue.policies[1].mean_wait_s = 1800;
  EXPECT_NE(FormatTable(queue, "t").find("mean wait (ours 1.00 h): spread 0.50 h — a loss of ours"),
            std::string::npos);

  SimResult even = TwoPolicies(Mode::kQueue);
  EXPECT_EQ(FormatTable(even, "t").find("Where a baseline is ahead"), std::string::npos);
}

// topology::HoldsBack, the rule itself.
TEST(HoldsBackTest, ABigPodWaitsOnlyWhileSmallerOnesNeedItsRoomAndItIsYoung) {
  using topology::Request;
  using topology::Unit;
  using topology::WaitingClass;
  const Request big{Unit::kDevice, 16};
  const std::vector<WaitingClass> two_small = {{{Unit::kDevice, 4}, 2, true}, {big, 1, true}};
  // 16 free: starting the big pod leaves nothing for the 8 devices the small ones need.
  const int64_t age = topology::kHoldBackAgeNs;
  const topology::HoldBack held = topology::HoldsBack(big, 0, two_small, 16, age);
  EXPECT_TRUE(held.held);
  EXPECT_EQ(held.smaller_pods, 2);  // what a refusal names
  EXPECT_EQ(held.smaller_devices, 8);
  // 24 free: both fit, both go.
  EXPECT_FALSE(topology::HoldsBack(big, 0, two_small, 24, age).held);
  // Smaller pods that fit nowhere now take nothing from it.
  const std::vector<WaitingClass> stuck = {{{Unit::kDevice, 4}, 2, false}};
  EXPECT_FALSE(topology::HoldsBack(big, 0, stuck, 16, age).held);
  // Past the age it goes in queue order.
  EXPECT_FALSE(topology::HoldsBack(big, age, two_small, 16, age).held);
  // A pod never holds back for its own class or bigger ones.
  EXPECT_FALSE(topology::HoldsBack({Unit::kDevice, 4}, 0, two_small, 4, age).held);
  // No room to start: waiting for room, not held back.
  EXPECT_FALSE(topology::HoldsBack(big, 0, two_small, 15, age).held);
  // Cores count as half a device.
  const std::vector<WaitingClass> cores = {{{Unit::kCore, 2}, 3, true}};
  EXPECT_TRUE(topology::HoldsBack({Unit::kDevice, 2}, 0, cores, 4, age).held);
  EXPECT_FALSE(topology::HoldsBack({Unit::kDevice, 2}, 0, cores, 5, age).held);
}

}  // namespace
}  // namespace toposched::sim
