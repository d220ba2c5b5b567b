// The model of a DRA cluster (sim/dra.h): a naive driver's index order with fleet-order nodes is
// exactly AWS's first-fit (the lowest-index legal set on the first node that fits), so the two
// simulators must agree pod for pod; and the model is deterministic for a seed.
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sim/dra.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "support/build_paths.h"
#include "topology/catalog.h"

namespace toposched::sim {
namespace {

Trace LoadDefaultTrace() {
  const std::string path = toposched::testing::SourcePath(kDefaultTraceRelativePath);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto trace = ParseTrace(text.str(), path);
  EXPECT_TRUE(trace.ok()) << path;
  return trace.ok() ? trace.value() : Trace{};
}

std::vector<FleetGroup> Fleet(std::string_view spec) {
  auto fleet = ParseFleet(spec, topology::Catalog::Embedded());
  EXPECT_TRUE(fleet.ok());
  return fleet.ok() ? fleet.value() : std::vector<FleetGroup>{};
}

TEST(SimDraTest, IndexOrderOnFleetOrderNodesIsFirstFit) {
  const Trace trace = LoadDefaultTrace();
  for (std::string_view spec :
       {kDefaultFillFleet, std::string_view("trn2.48xlarge=3,inf2.48xlarge=2")}) {
    for (uint64_t seed : {0, 1, 2}) {
      const std::vector<FleetGroup> fleet = Fleet(spec);
      auto dra = SimulateDraFill(topology::Catalog::Embedded(), trace, fleet, seed);
      ASSERT_TRUE(dra.ok()) << dra.error();
      Options options;
      options.mode = Mode::kFill;
      options.seed = seed;
      options.stop_at_first_failure = true;
      options.fleet = fleet;
      options.policies = {topology::Policy::kFirstFit};
      auto sim = Simulate(topology::Catalog::Embedded(), trace, options);
      ASSERT_TRUE(sim.ok()) << sim.error();
      const DraResult& naive = dra->front();
      ASSERT_EQ(naive.variant.Name(), "index/first-node");
      const PolicyResult& first_fit = sim->policies.front();
      EXPECT_EQ(naive.placed_before_first_failure, first_fit.placed_before_first_failure)
          << spec << " seed " << seed;
      EXPECT_EQ(naive.first_failure_request, first_fit.first_failure_request);
      EXPECT_NEAR(naive.unallocated_share_at_first_failure,
                  first_fit.unallocated_share_at_first_failure, 1e-9);
    }
  }
}

TEST(SimDraTest, EveryVariantIsRunAndDeterministic) {
  const Trace trace = LoadDefaultTrace();
  const std::vector<FleetGroup> fleet = Fleet("inf2.48xlarge=2,trn1.32xlarge=2");
  auto a = SimulateDraFill(topology::Catalog::Embedded(), trace, fleet, 7);
  auto b = SimulateDraFill(topology::Catalog::Embedded(), trace, fleet, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 4u);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].variant.Name(), (*b)[i].variant.Name());
    EXPECT_EQ((*a)[i].placed_before_first_failure, (*b)[i].placed_before_first_failure);
    EXPECT_GT((*a)[i].placed_before_first_failure, 0);
  }
  EXPECT_NE(FormatDraTable(*a, "t", "f", Mode::kFill).find("scarcity/spread"), std::string::npos);
  EXPECT_NE(FormatDraJson(*a).find("\"variant\":\"index/first-node\""), std::string::npos);
}

TEST(SimDraTest, SharedPoolsAreRefusedWithAReason) {
  const Trace trace = LoadDefaultTrace();
  auto fleet = ParseFleet("ipu-pod16=1/2", topology::Catalog::Embedded());
  ASSERT_TRUE(fleet.ok());
  auto result = SimulateDraFill(topology::Catalog::Embedded(), trace, fleet.value(), 0);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().find("shared pools"), std::string::npos);
}

}  // namespace
}  // namespace toposched::sim
