// The gang simulator: all-or-nothing never strands nodes or deadlocks, pod-by-pod does on a
// crafted stream, AWS's anti-affinity keeps interleaved gangs from holding parts of one
// UltraServer, determinism, and the CLI's contract.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/gangs.h"
#include "support/run_command.h"
#include "topology/catalog.h"

namespace toposched::sim {
namespace {

constexpr int64_t kS = 1'000'000'000;

const topology::Catalog& Cat() { return topology::Catalog::Embedded(); }

GangSimResult MustSimulate(const GangSimOptions& options) {
  auto result = SimulateGangs(Cat(), options);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error());
  return result.ok() ? result.value() : GangSimResult{};
}

const GangStrategyResult& Strategy(const GangSimResult& r, std::string_view name) {
  for (const auto& s : r.strategies) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no strategy " << name;
  static const GangStrategyResult kNone;
  return kNone;
}

const GangOutcome& Outcome(const GangStrategyResult& s, int job) {
  for (const auto& o : s.outcomes) {
    if (o.job == job) return o;
  }
  ADD_FAILURE() << "no outcome for job " << job;
  static const GangOutcome kNone;
  return kNone;
}

GangJob Gang(int size, std::vector<int64_t> arrivals_s, int64_t duration_s, int devices = 16) {
  GangJob job;
  job.size = size;
  job.devices = devices;
  for (int64_t t : arrivals_s) job.arrival_ns.push_back(t * kS);
  job.duration_ns = duration_s * kS;
  return job;
}

GangJob Single(int64_t at_s, int64_t duration_s, int devices) {
  return Gang(1, {at_s}, duration_s, devices);
}

// Two 4-node gangs whose members arrive interleaved (A0 B0 A1 B1 ...) on one UltraServer, one
// node of which has a 1-device pod for two hours; then a 2-node gang.
GangSimOptions Crafted() {
  GangSimOptions options;
  options.ultraservers = 1;
  options.stream = {
      Single(0, 7200, 1),               // 0: occupies one node for 2 h
      Gang(4, {60, 62, 64, 66}, 3600),  // 1: A
      Gang(4, {61, 63, 65, 67}, 3600),  // 2: B
      Gang(2, {300, 301}, 1800),        // 3: C
  };
  return options;
}

TEST(SimGangTest, PodByPodStrandsAndDeadlocksWhereAllOrNothingWaitsHoldingNothing) {
  const GangSimResult r = MustSimulate(Crafted());
  const auto& whole = Strategy(r, "all-or-nothing");
  const auto& apart = Strategy(r, "pod-by-pod");

  // Pod-by-pod: A's first three members take the three free nodes and its fourth waits for the
  // single pod to leave: three nodes held idle for ~2 h, longer than the timeout.
  EXPECT_EQ(apart.gangs_deadlocked, 1);
  EXPECT_TRUE(Outcome(apart, 1).deadlocked);
  EXPECT_EQ(apart.max_stranded_nodes, 3);
  EXPECT_NEAR(apart.stranded_node_hours, 3.0 * (7200 - 66) / 3600, 1e-6);
  EXPECT_NEAR(Outcome(apart, 1).wait_s, 7200 - 60, 1e-6);
  // B's members are kept out by A's anti-affinity, so B holds nothing while it waits; C too,
  // although half of the UltraServer is free the whole time.
  EXPECT_FALSE(Outcome(apart, 2).deadlocked);
  EXPECT_EQ(Outcome(apart, 2).stuck_s, 0);
  EXPECT_NEAR(Outcome(apart, 2).wait_s, 10800 - 61, 1e-6);
  EXPECT_NEAR(Outcome(apart, 3).wait_s, 14400 - 300, 1e-6);

  // All-or-nothing: A and B wait holding nothing, C takes the free half at once.
  EXPECT_EQ(whole.gangs_deadlocked, 0);
  EXPECT_EQ(whole.gangs_stuck, 0);
  EXPECT_EQ(whole.max_stranded_nodes, 0);
  EXPECT_EQ(whole.stranded_node_hours, 0);
  EXPECT_NEAR(Outcome(whole, 3).wait_s, 1, 1e-6);
  EXPECT_NEAR(Outcome(whole, 1).wait_s, 7200 - 60, 1e-6);
  EXPECT_NEAR(Outcome(whole, 2).wait_s, 10800 - 61, 1e-6);
  for (const auto* s : {&whole, &apart}) {
    EXPECT_EQ(s->gangs, 3);
    EXPECT_EQ(s->gangs_completed, 3);
    EXPECT_EQ(s->singles_placed, 1);
  }
}

TEST(SimGangTest, AntiAffinityKeepsInterleavedGangsFromSplittingAnUltraServer) {
  // The same two interleaved gangs on an idle UltraServer: pod-by-pod does not deadlock here,
  // because AWS's anti-affinity refuses B's first member while A holds any node; B waits for A.
  GangSimOptions options;
  options.ultraservers = 1;
  options.stream = {Gang(4, {60, 62, 64, 66}, 3600), Gang(4, {61, 63, 65, 67}, 3600)};
  const GangSimResult r = MustSimulate(options);
  for (const auto& s : r.strategies) {
    EXPECT_EQ(s.gangs_deadlocked, 0) << s.name;
    EXPECT_EQ(s.stranded_node_hours, 0) << s.name;
    EXPECT_NEAR(Outcome(s, 0).wait_s, 6, 1e-6) << s.name;
    EXPECT_NEAR(Outcome(s, 1).wait_s, 60 + 6 + 3600 - 61, 1e-6) << s.name;
  }
}

TEST(SimGangTest, AllOrNothingNeverDeadlocksOrStrandsOnGeneratedStreams) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    GangSimOptions options;
    options.ultraservers = 6;
    options.plain_nodes = 2;
    options.jobs = 600;
    options.load = 0.9;
    options.seed = seed;
    const GangSimResult r = MustSimulate(options);
    const auto& whole = Strategy(r, "all-or-nothing");
    const auto& apart = Strategy(r, "pod-by-pod");
    EXPECT_EQ(whole.gangs_deadlocked, 0) << seed;
    EXPECT_EQ(whole.gangs_stuck, 0) << seed;
    EXPECT_EQ(whole.max_stranded_nodes, 0) << seed;
    EXPECT_EQ(whole.stranded_node_hours, 0) << seed;
    EXPECT_EQ(whole.gangs_completed, whole.gangs) << seed;
    EXPECT_EQ(apart.gangs_completed, apart.gangs) << seed;
    EXPECT_EQ(whole.gangs, r.gangs_two + r.gangs_four);
    EXPECT_EQ(whole.singles_placed + whole.singles_rejected, r.singles);
    EXPECT_EQ(apart.singles_placed + apart.singles_rejected, r.singles);
    EXPECT_GT(whole.mean_running_share, 0.3) << seed;
    EXPECT_LE(whole.mean_running_share, whole.mean_allocated_share + 1e-12);
  }
}

TEST(SimGangTest, TheSameSeedGivesTheSameResult) {
  GangSimOptions options;
  options.ultraservers = 4;
  options.jobs = 300;
  options.seed = 7;
  const std::string first = FormatGangJson(MustSimulate(options));
  EXPECT_EQ(first, FormatGangJson(MustSimulate(options)));
  EXPECT_EQ(FormatGangTable(MustSimulate(options)), FormatGangTable(MustSimulate(options)));
  options.seed = 8;
  EXPECT_NE(first, FormatGangJson(MustSimulate(options)));
  // The stream itself is fixed by the seed.
  const auto a = GenerateGangStream(options, 256);
  const auto b = GenerateGangStream(options, 256);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    EXPECT_EQ(a[i].duration_ns, b[i].duration_ns);
  }
}

TEST(SimGangTest, BadOptionsAreRefused) {
  GangSimOptions options;
  options.stream = {Gang(3, {0, 1, 2}, 10)};
  EXPECT_FALSE(SimulateGangs(Cat(), options).ok());
  options.stream = {Gang(2, {0, 700}, 10)};  // spread longer than the timeout
  EXPECT_FALSE(SimulateGangs(Cat(), options).ok());
  options.stream.clear();
  options.ultraservers = 0;
  EXPECT_FALSE(SimulateGangs(Cat(), options).ok());
}

TEST(SimGangCliTest, PrintsBothStrategiesAndRefusesGangFlagsWithoutGangs) {
  auto run = testing::RunToposched("simulate --gangs --ultraservers 2 --gang-jobs 80 --seed 3");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("all-or-nothing"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("pod-by-pod"), std::string::npos);
  EXPECT_NE(run.out.find("node-hours stranded by partial gangs"), std::string::npos);
  auto json = testing::RunToposched("simulate --gangs --ultraservers 2 --gang-jobs 80 --json");
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out.rfind("{\"mode\":\"gangs\"", 0), 0u) << json.out;
  EXPECT_EQ(testing::RunToposched("simulate --ultraservers 2").exit_code, 2);
  EXPECT_EQ(testing::RunToposched("simulate --gangs --mode fill").exit_code, 2);
}

}  // namespace
}  // namespace toposched::sim
