// The allocator: every legal-set rule of neuron-facts §2 and docs/topology.md, both policies,
// scores, LegalPlacements and NodeUsage. Each rule is checked by a table of documented or
// constructed cases and by an exhaustive/randomised comparison against an independent model.
#include "topology/allocator.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/legality_oracle.h"
#include "topology/catalog.h"
#include "topology/id_ranges.h"

namespace toposched::topology {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
// The independent model of the rules every answer is checked against.
using ::toposched::testing::LegalCoreSet;
using ::toposched::testing::LegalDeviceSet;
using ::toposched::testing::MaskOf;
using ::toposched::testing::TouchedBy;

constexpr Policy kPolicies[] = {Policy::kBestFit, Policy::kFirstFit};

NodeShape ShapeOf(const std::string& type, int lnc = 0) {
  const InstanceType* t = Catalog::Embedded().Find(type);
  if (t == nullptr) throw std::runtime_error("no instance type " + type);
  auto shape = NodeShape::Make(*t, lnc);
  if (!shape.ok()) throw std::runtime_error(shape.error());
  return shape.value();
}

std::vector<int> Range(int first, int last) {  // inclusive
  std::vector<int> out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

NodeUsage Usage(const NodeShape& shape, const std::vector<int>& devices,
                const std::vector<int>& cores = {}) {
  NodeUsage u;
  if (!u.Take(shape, Unit::kDevice, devices)) throw std::runtime_error("bad device usage");
  if (!u.Take(shape, Unit::kCore, cores)) throw std::runtime_error("bad core usage");
  return u;
}

Decision Devices(const NodeShape& shape, const NodeUsage& usage, int n, Policy policy) {
  return Allocate(shape, usage, Request{Unit::kDevice, n}, policy);
}

Decision Cores(const NodeShape& shape, const NodeUsage& usage, int n, Policy policy) {
  return Allocate(shape, usage, Request{Unit::kCore, n}, policy);
}

std::string Describe(const Decision& d) {
  return d.ok() ? "ids " + FormatIdRanges(d.placement.ids) : "refused: " + d.reason;
}

// --- Inferentia: contiguous, numeric order, no wrap -------------------------------------------

struct DeviceCase {
  const char* type;
  std::vector<int> used;
  int count;
  std::vector<int> expected;  // empty: refused
};

TEST(AllocatorContiguous, GivesConsecutiveIdsWithoutWrapUnderBothPolicies) {
  const DeviceCase cases[] = {
      {"inf1.6xlarge", {}, 4, Range(0, 3)},
      {"inf1.6xlarge", {}, 2, {0, 1}},
      {"inf1.6xlarge", {0}, 3, {1, 2, 3}},
      {"inf1.6xlarge", {3}, 3, {0, 1, 2}},
      {"inf1.6xlarge", {1, 3}, 2, {}},  // 0 and 2 are free but not connected
      {"inf1.6xlarge", {1}, 3, {}},     // {0,2,3} is never given
      {"inf1.6xlarge", {2}, 3, {}},     // {0,1,3} is never given
      {"inf1.6xlarge", {1, 3}, 1, {0}},
      {"inf1.24xlarge", {5}, 10, Range(6, 15)},
      {"inf1.24xlarge", Concat(Range(0, 3), Range(12, 15)), 8, Range(4, 11)},
      {"inf1.24xlarge", Concat(Range(0, 3), Range(12, 15)), 9, {}},
      {"inf2.48xlarge", Range(1, 10), 2, {}},  // 11 and 0 are linked but never wrap
      {"inf2.48xlarge", Range(1, 10), 1, {0}},
      {"inf2.48xlarge", Range(0, 9), 2, {10, 11}},
      {"inf2.48xlarge", Range(2, 9), 4, {}},  // 10,11,0,1 would wrap
      {"inf2.48xlarge", {2, 8}, 2, {0, 1}},   // the exact hole, not 3-4
      {"inf2.48xlarge", {6}, 6, Range(0, 5)},
      {"inf2.48xlarge", {0, 2, 4, 6, 8, 10}, 2, {}},
      {"inf2.24xlarge", {0}, 5, Range(1, 5)},
      {"inf2.24xlarge", {5}, 5, Range(0, 4)},
      {"inf2.24xlarge", {2}, 3, {3, 4, 5}},
      {"inf2.24xlarge", {2}, 4, {}},
      {"inf2.24xlarge", {}, 6, Range(0, 5)},
      {"inf2.48xlarge", {11}, 12, {}},
      {"trn1.2xlarge", {}, 1, {0}},
  };
  for (Policy policy : kPolicies) {
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message() << PolicyName(policy) << " " << c.type << " used "
                                        << FormatIdRanges(c.used) << " request " << c.count);
      const NodeShape shape = ShapeOf(c.type);
      const Decision d = Devices(shape, Usage(shape, c.used), c.count, policy);
      if (c.expected.empty()) {
        EXPECT_FALSE(d.ok()) << Describe(d);
        EXPECT_FALSE(d.unresolvable) << "a busy node is not unresolvable";
        EXPECT_THAT(d.placement.ids, IsEmpty());
      } else {
        ASSERT_TRUE(d.ok()) << d.reason;
        EXPECT_EQ(d.placement.unit, Unit::kDevice);
        EXPECT_THAT(d.placement.ids, ElementsAreArray(c.expected));
        EXPECT_EQ(d.placement.devices, MaskOf(c.expected));
      }
    }
  }
}

TEST(AllocatorContiguous, RefusalExplainsTheFreeDevices) {
  const NodeShape shape = ShapeOf("inf2.48xlarge");
  const Decision d = Devices(shape, Usage(shape, Range(1, 10)), 2, Policy::kBestFit);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.reason, HasSubstr("no 2 contiguous free devices on inf2.48xlarge"));
  EXPECT_THAT(d.reason, HasSubstr("free devices are 0,11"));
  EXPECT_THAT(d.reason, HasSubstr("longest free run 1"));
}

// --- Trainium: aligned rows and halves --------------------------------------------------------

TEST(AllocatorAligned, GivesAlignedRowsAndHalvesOnEveryTorusType) {
  const struct {
    std::vector<int> used;
    int count;
    std::vector<int> expected;
  } cases[] = {
      {{}, 1, {0}},
      {{}, 4, Range(0, 3)},
      {{}, 8, Range(0, 7)},
      {{}, 16, Range(0, 15)},
      {Range(0, 3), 4, Range(4, 7)},
      {Range(0, 7), 4, Range(8, 11)},
      {Range(0, 11), 4, Range(12, 15)},
      {{0}, 8, Range(8, 15)},
      {{15}, 8, Range(0, 7)},
      {{0, 8}, 8, {}},
      {{0, 4, 8, 12}, 4, {}},
      {{3, 7, 11, 15}, 4, {}},
      {{0}, 16, {}},
      // The 2x2 square {9,10,13,14} is free but is not a row: never given.
      {Concat(Range(0, 8), {11, 12, 15}), 4, {}},
      {{8, 11, 12, 15}, 4, Range(0, 3)},
      {Range(0, 14), 1, {15}},
  };
  for (const char* type : {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"}) {
    const NodeShape shape = ShapeOf(type);
    for (Policy policy : kPolicies) {
      for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << PolicyName(policy) << " " << type << " used "
                                          << FormatIdRanges(c.used) << " request " << c.count);
        const Decision d = Devices(shape, Usage(shape, c.used), c.count, policy);
        if (c.expected.empty()) {
          EXPECT_FALSE(d.ok()) << Describe(d);
          EXPECT_FALSE(d.unresolvable);
        } else {
          ASSERT_TRUE(d.ok()) << d.reason;
          EXPECT_THAT(d.placement.ids, ElementsAreArray(c.expected));
          EXPECT_EQ(d.placement.devices, MaskOf(c.expected));
        }
      }
    }
  }
}

TEST(AllocatorAligned, NeverGivesTheSquare) {
  // Whatever else is used, a 4-device answer on trn1 is a row.
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  const std::set<std::vector<int>> rows = {Range(0, 3), Range(4, 7), Range(8, 11), Range(12, 15)};
  for (Policy policy : kPolicies) {
    for (uint32_t used = 0; used < (1u << 16); used += 7) {  // a spread of usages
      std::vector<int> ids;
      for (int dev = 0; dev < 16; ++dev) {
        if (used >> dev & 1) ids.push_back(dev);
      }
      const Decision d = Devices(shape, Usage(shape, ids), 4, policy);
      if (d.ok()) {
        ASSERT_EQ(rows.count(d.placement.ids), 1u)
            << "used " << FormatIdRanges(ids) << " gave " << FormatIdRanges(d.placement.ids);
      }
    }
  }
}

TEST(AllocatorAligned, RefusalListsTheLegalBlocks) {
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  const Decision d =
      Devices(shape, Usage(shape, Concat(Range(0, 8), {11, 12, 15})), 4, Policy::kBestFit);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.reason, HasSubstr("no free aligned block of 4 devices on trn1.32xlarge"));
  EXPECT_THAT(d.reason, HasSubstr("legal blocks: 0-3, 4-7, 8-11, 12-15"));
  EXPECT_THAT(d.reason, HasSubstr("free devices are 9-10,13-14"));
}

TEST(AllocatorAligned, RefusesOtherCountsWithAwsText) {
  for (const char* type : {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"}) {
    const NodeShape shape = ShapeOf(type);
    for (int count : {2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15}) {
      const std::string aws = "Instance type " + std::string(type) +
                              " does not support requests for device: " + std::to_string(count) +
                              ". Please request a different number of devices.";
      for (Policy policy : kPolicies) {
        for (const auto& used : {std::vector<int>{}, std::vector<int>{0, 5}}) {
          SCOPED_TRACE(::testing::Message() << type << " " << count << " " << PolicyName(policy));
          const Decision d = Devices(shape, Usage(shape, used), count, policy);
          ASSERT_FALSE(d.ok());
          EXPECT_EQ(d.reason, aws);
          EXPECT_TRUE(d.unresolvable);
        }
      }
      EXPECT_EQ(CheckRequestShape(shape, Request{Unit::kDevice, count}), aws);
      EXPECT_THAT(LegalPlacements(shape, NodeUsage{}, Request{Unit::kDevice, count}), IsEmpty());
    }
  }
}

TEST(AllocatorAligned, SevenDevicesOnTrn1IsAwsTextWordForWord) {
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  const Decision d = Devices(shape, NodeUsage{}, 7, Policy::kBestFit);
  EXPECT_EQ(d.reason,
            "Instance type trn1.32xlarge does not support requests for device: 7. Please request a "
            "different number of devices.");
  EXPECT_TRUE(d.unresolvable);
}

TEST(AllocatorAligned, CheckRequestShapeAcceptsLegalCounts) {
  for (const char* type : {"trn1.32xlarge", "trn2.48xlarge"}) {
    const NodeShape shape = ShapeOf(type);
    for (int count : {1, 4, 8, 16}) {
      EXPECT_EQ(CheckRequestShape(shape, Request{Unit::kDevice, count}), "")
          << type << " " << count;
    }
    for (int count = 1; count <= shape.cores; ++count) {
      EXPECT_EQ(CheckRequestShape(shape, Request{Unit::kCore, count}), "") << type << " " << count;
    }
  }
}

// --- Other rules from the catalog: p4d (any) and the IPU buddy tree --------------------------

TEST(AllocatorOtherRules, AnyRuleTakesAnyFreeDevices) {
  const NodeShape shape = ShapeOf("p4d.24xlarge");
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(PolicyName(policy));
    Decision d = Devices(shape, Usage(shape, {0, 2, 4, 6}), 4, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_THAT(d.placement.ids, ElementsAreArray({1, 3, 5, 7}));
    EXPECT_EQ(d.placement.devices, MaskOf({1, 3, 5, 7}));
    d = Devices(shape, Usage(shape, {1}), 3, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_THAT(d.placement.ids, ElementsAreArray({0, 2, 3}));
    d = Devices(shape, Usage(shape, {0, 2, 4, 6}), 5, policy);
    EXPECT_FALSE(d.ok());
    EXPECT_FALSE(d.unresolvable);
    EXPECT_THAT(d.reason, HasSubstr("only 4 of 8 devices are free"));
    for (int count = 1; count <= 8; ++count) {
      EXPECT_TRUE(Devices(shape, NodeUsage{}, count, policy).ok()) << count;
    }
  }
}

TEST(AllocatorOtherRules, IpuPod16UsesAlignedPowersOfTwo) {
  const NodeShape shape = ShapeOf("ipu-pod16");
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(PolicyName(policy));
    for (int count : {1, 2, 4, 8, 16}) {
      const Decision d = Devices(shape, NodeUsage{}, count, policy);
      ASSERT_TRUE(d.ok()) << count << ": " << d.reason;
      EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(0, count - 1)));
    }
    for (int count : {3, 5, 6, 7, 9, 12, 15}) {
      const Decision d = Devices(shape, NodeUsage{}, count, policy);
      EXPECT_FALSE(d.ok());
      EXPECT_TRUE(d.unresolvable);
      EXPECT_THAT(d.reason,
                  HasSubstr("Instance type ipu-pod16 does not support requests for device: " +
                            std::to_string(count)));
    }
    Decision d = Devices(shape, Usage(shape, {1}), 2, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray({2, 3}));  // {1,2} is not aligned
    d = Devices(shape, Usage(shape, {0}), 8, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(8, 15)));
  }
}

// --- Policies: best fit and first fit ---------------------------------------------------------

struct PolicyCase {
  const char* type;
  std::vector<int> used;
  int count;
  std::vector<int> best_fit;
  std::vector<int> first_fit;
};

TEST(AllocatorPolicy, BestFitTakesTheSmallestHoleAndFirstFitTheLowestIds) {
  const PolicyCase cases[] = {
      // Runs 0-2, 4-5, 7-11: best fit fills the exact hole 4-5.
      {"inf2.48xlarge", {3, 6}, 2, {4, 5}, {0, 1}},
      {"inf2.48xlarge", {2, 8}, 2, {0, 1}, {0, 1}},
      // Runs 0-1, 3, 5-11: one device goes into the single-device hole.
      {"inf2.48xlarge", {2, 4}, 1, {3}, {0}},
      {"inf1.24xlarge", {3, 10}, 6, {4, 5, 6, 7, 8, 9}, {4, 5, 6, 7, 8, 9}},
      {"inf1.24xlarge", {3, 12}, 3, {0, 1, 2}, {0, 1, 2}},  // two exact holes: the lower
      {"inf1.24xlarge", {2, 12}, 3, {13, 14, 15}, {3, 4, 5}},
      // trn1 with device 0 used: 1 device goes to 1, not into a whole row.
      {"trn1.32xlarge", {0}, 1, {1}, {1}},
      {"trn1.32xlarge", {4}, 1, {5}, {0}},
      {"trn1.32xlarge", {12}, 4, Range(8, 11), Range(0, 3)},
      {"trn1.32xlarge", {8}, 4, Range(12, 15), Range(0, 3)},
      {"trn1.32xlarge", {0}, 4, Range(4, 7), Range(4, 7)},
      {"trn1.32xlarge", Range(0, 3), 1, {4}, {4}},
      {"trn1.32xlarge", Concat(Range(0, 3), {9}), 1, {8}, {4}},
      {"trn2.48xlarge", {13}, 4, Range(8, 11), Range(0, 3)},
      {"ipu-pod16", {8}, 2, {10, 11}, {0, 1}},
      {"ipu-pod16", {2}, 2, {0, 1}, {0, 1}},
      {"ipu-pod16", {0}, 4, {4, 5, 6, 7}, {4, 5, 6, 7}},
      {"ipu-pod16", {12}, 4, {8, 9, 10, 11}, {0, 1, 2, 3}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.type << " used " << FormatIdRanges(c.used) << " request " << c.count);
    const NodeShape shape = ShapeOf(c.type);
    const NodeUsage usage = Usage(shape, c.used);
    const Decision best = Devices(shape, usage, c.count, Policy::kBestFit);
    ASSERT_TRUE(best.ok()) << best.reason;
    EXPECT_THAT(best.placement.ids, ElementsAreArray(c.best_fit)) << "best-fit";
    const Decision first = Devices(shape, usage, c.count, Policy::kFirstFit);
    ASSERT_TRUE(first.ok()) << first.reason;
    EXPECT_THAT(first.placement.ids, ElementsAreArray(c.first_fit)) << "first-fit";
  }
}

TEST(AllocatorPolicy, CoreBestFitAvoidsBreakingUntouchedDevices) {
  const struct {
    const char* type;
    std::vector<int> used_cores;
    int count;
    std::vector<int> best_fit;
    std::vector<int> first_fit;
  } cases[] = {
      // inf1.6xlarge: 4 cores per device. Device 2 is already broken: 2 cores go there.
      {"inf1.6xlarge", Concat(Range(0, 2), {8, 9}), 2, {10, 11}, {3, 4}},
      // inf2 (2 per device): 2 cores in one device rather than across two.
      {"inf2.48xlarge", {}, 2, {0, 1}, {0, 1}},
      {"inf2.48xlarge", {0}, 2, {2, 3}, {1, 2}},
      {"inf2.48xlarge", {0}, 1, {1}, {1}},
      {"inf2.48xlarge", {0, 5}, 1, {1}, {1}},
      {"inf2.48xlarge", {1, 5}, 1, {0}, {0}},
      // 0-2 breaks only device 0 (device 1 is already busy); 4-6 would break two.
      {"inf2.48xlarge", {3}, 3, {0, 1, 2}, {0, 1, 2}},
      {"inf2.48xlarge", {2}, 3, {3, 4, 5}, {3, 4, 5}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.type << " used cores " << FormatIdRanges(c.used_cores)
                                      << " request " << c.count);
    const NodeShape shape = ShapeOf(c.type);
    const NodeUsage usage = Usage(shape, {}, c.used_cores);
    const Decision best = Cores(shape, usage, c.count, Policy::kBestFit);
    ASSERT_TRUE(best.ok()) << best.reason;
    EXPECT_THAT(best.placement.ids, ElementsAreArray(c.best_fit)) << "best-fit";
    const Decision first = Cores(shape, usage, c.count, Policy::kFirstFit);
    ASSERT_TRUE(first.ok()) << first.reason;
    EXPECT_THAT(first.placement.ids, ElementsAreArray(c.first_fit)) << "first-fit";
  }
}

TEST(AllocatorPolicy, ParseAndNameRoundTrip) {
  for (Policy p : {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly}) {
    auto parsed = ParsePolicy(PolicyName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed.value(), p);
  }
  EXPECT_EQ(PolicyName(Policy::kBestFit), "best-fit");
  EXPECT_EQ(PolicyName(Policy::kFirstFit), "first-fit");
  EXPECT_EQ(PolicyName(Policy::kCountOnly), "count-only");
  auto bad = ParsePolicy("worst-fit");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("'worst-fit'"));
  EXPECT_THAT(bad.error(), HasSubstr("best-fit"));
}

TEST(AllocatorPolicy, UnitNames) {
  EXPECT_EQ(UnitName(Unit::kDevice, 1), "device");
  EXPECT_EQ(UnitName(Unit::kDevice, 2), "devices");
  EXPECT_EQ(UnitName(Unit::kCore, 1), "core");
  EXPECT_EQ(UnitName(Unit::kCore, 0), "cores");
}

TEST(AllocatorPolicy, CountOnlyIgnoresTopology) {
  NodeShape shape = ShapeOf("trn1.32xlarge");
  Decision d = Devices(shape, Usage(shape, {1}), 7, Policy::kCountOnly);
  ASSERT_TRUE(d.ok()) << d.reason;
  EXPECT_THAT(d.placement.ids, ElementsAreArray({0, 2, 3, 4, 5, 6, 7}));
  shape = ShapeOf("inf2.48xlarge");
  d = Devices(shape, Usage(shape, {1, 3}), 2, Policy::kCountOnly);
  ASSERT_TRUE(d.ok()) << d.reason;
  EXPECT_THAT(d.placement.ids, ElementsAreArray({0, 2}));
  d = Cores(shape, Usage(shape, {}, {1, 3}), 3, Policy::kCountOnly);
  ASSERT_TRUE(d.ok()) << d.reason;
  EXPECT_THAT(d.placement.ids, ElementsAreArray({0, 2, 4}));
  EXPECT_EQ(d.placement.devices, MaskOf({0, 1, 2}));
  d = Devices(shape, Usage(shape, Range(0, 10)), 2, Policy::kCountOnly);
  EXPECT_FALSE(d.ok());
  EXPECT_FALSE(d.unresolvable);
}

// --- One or all, and invalid counts -----------------------------------------------------------

std::vector<NodeShape> EveryShape() {
  std::vector<NodeShape> out;
  for (const auto& [name, type] : Catalog::Embedded().types()) {
    if (type.has_lnc) {
      for (int lnc : type.lnc.allowed) out.push_back(NodeShape::Make(type, lnc).value());
    } else {
      out.push_back(NodeShape::Make(type).value());
    }
  }
  return out;
}

TEST(AllocatorAnyType, OneOrAllDevicesOrCoresIsAlwaysValid) {
  const std::vector<NodeShape> shapes = EveryShape();
  ASSERT_GE(shapes.size(), 17u);
  for (const NodeShape& shape : shapes) {
    for (Policy policy : {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly}) {
      SCOPED_TRACE(::testing::Message()
                   << shape.type->name << " LNC " << shape.lnc << " " << PolicyName(policy));
      const Decision one = Devices(shape, NodeUsage{}, 1, policy);
      ASSERT_TRUE(one.ok()) << one.reason;
      EXPECT_THAT(one.placement.ids, ElementsAreArray({0}));
      const Decision all = Devices(shape, NodeUsage{}, shape.devices, policy);
      ASSERT_TRUE(all.ok()) << all.reason;
      EXPECT_THAT(all.placement.ids, ElementsAreArray(Range(0, shape.devices - 1)));
      EXPECT_EQ(all.placement.devices, shape.AllDevices());
      const Decision one_core = Cores(shape, NodeUsage{}, 1, policy);
      ASSERT_TRUE(one_core.ok()) << one_core.reason;
      EXPECT_THAT(one_core.placement.ids, ElementsAreArray({0}));
      EXPECT_EQ(one_core.placement.devices, DeviceMask{1});
      const Decision all_cores = Cores(shape, NodeUsage{}, shape.cores, policy);
      ASSERT_TRUE(all_cores.ok()) << all_cores.reason;
      EXPECT_THAT(all_cores.placement.ids, ElementsAreArray(Range(0, shape.cores - 1)));
      EXPECT_EQ(all_cores.placement.devices, shape.AllDevices());
      // One device stays valid on a busy node: the last free device is given.
      if (shape.devices > 1) {
        const NodeUsage busy = Usage(shape, Range(0, shape.devices - 2));
        const Decision last = Devices(shape, busy, 1, policy);
        ASSERT_TRUE(last.ok()) << last.reason;
        EXPECT_THAT(last.placement.ids, ElementsAreArray({shape.devices - 1}));
        const Decision last_core = Cores(shape, busy, 1, policy);
        ASSERT_TRUE(last_core.ok()) << last_core.reason;
        EXPECT_EQ(last_core.placement.ids.front() / shape.cores_per_device, shape.devices - 1);
      }
    }
  }
}

TEST(AllocatorAnyType, ZeroNegativeAndOversizedRequestsAreUnresolvable) {
  for (const NodeShape& shape : EveryShape()) {
    for (Policy policy : {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly}) {
      for (Unit unit : {Unit::kDevice, Unit::kCore}) {
        const int total = unit == Unit::kDevice ? shape.devices : shape.cores;
        for (int count : {0, -1, -16, total + 1, total * 2, INT_MAX, INT_MIN}) {
          SCOPED_TRACE(::testing::Message() << shape.type->name << " " << PolicyName(policy) << " "
                                            << count << " " << UnitName(unit, count));
          const Decision d = Allocate(shape, NodeUsage{}, Request{unit, count}, policy);
          EXPECT_FALSE(d.ok());
          EXPECT_TRUE(d.unresolvable);
          EXPECT_THAT(d.placement.ids, IsEmpty());
          EXPECT_FALSE(CheckRequestShape(shape, Request{unit, count}).empty());
          EXPECT_THAT(LegalPlacements(shape, NodeUsage{}, Request{unit, count}), IsEmpty());
        }
      }
    }
  }
}

TEST(AllocatorAnyType, InvalidCountMessagesAreSpecific) {
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");
  EXPECT_THAT(CheckRequestShape(trn1, Request{Unit::kDevice, 0}), HasSubstr("at least 1"));
  EXPECT_THAT(CheckRequestShape(trn1, Request{Unit::kDevice, -3}), HasSubstr("-3"));
  EXPECT_EQ(CheckRequestShape(trn1, Request{Unit::kDevice, 17}),
            "17 devices requested but trn1.32xlarge has only 16");
  EXPECT_EQ(CheckRequestShape(trn1, Request{Unit::kCore, 33}),
            "33 cores requested but trn1.32xlarge has only 32");
  const NodeShape trn2 = ShapeOf("trn2.48xlarge");
  EXPECT_EQ(CheckRequestShape(trn2, Request{Unit::kCore, 65}),
            "65 cores requested but trn2.48xlarge has only 64 at LNC 2");
  EXPECT_EQ(CheckRequestShape(ShapeOf("trn2.48xlarge", 1), Request{Unit::kCore, 65}), "");
}

// --- Cores ------------------------------------------------------------------------------------

TEST(AllocatorCores, DocumentedNineCoresOnAnEmptyInf1_6xlarge) {
  const NodeShape shape = ShapeOf("inf1.6xlarge");
  ASSERT_EQ(shape.devices, 4);
  ASSERT_EQ(shape.cores_per_device, 4);
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(PolicyName(policy));
    NodeUsage usage;
    const Decision d = Cores(shape, usage, 9, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_EQ(d.placement.unit, Unit::kCore);
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(0, 8)));
    EXPECT_EQ(d.placement.devices, MaskOf({0, 1, 2}));
    ASSERT_TRUE(usage.Take(shape, Unit::kCore, d.placement.ids));
    // Device map afterwards: [true true true false].
    EXPECT_EQ(usage.busy_devices(), MaskOf({0, 1, 2}));
    EXPECT_EQ(usage.used_core_count(), 9);
    const Decision two = Devices(shape, usage, 2, policy);
    EXPECT_FALSE(two.ok()) << Describe(two);
    const Decision one = Devices(shape, usage, 1, policy);
    ASSERT_TRUE(one.ok()) << one.reason;
    EXPECT_THAT(one.placement.ids, ElementsAreArray({3}));
    // The three free cores of device 2 still serve core requests.
    const Decision three = Cores(shape, usage, 3, policy);
    ASSERT_TRUE(three.ok()) << three.reason;
    EXPECT_THAT(three.placement.ids, ElementsAreArray({9, 10, 11}));
  }
}

TEST(AllocatorCores, FlowDiagramTwoCores) {
  // request neuroncore:2 -> NEURON_CORES 2,3 on /dev/neuron1 (inf1, 4 cores per device) when
  // cores 0,1 are taken. Our best fit keeps device 1 whole and uses device 0; first fit matches.
  const NodeShape shape = ShapeOf("inf1.6xlarge");
  const NodeUsage usage = Usage(shape, {}, {0, 1});
  const Decision first = Cores(shape, usage, 2, Policy::kFirstFit);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(first.placement.ids, ElementsAreArray({2, 3}));
  EXPECT_EQ(first.placement.devices, MaskOf({0}));
}

TEST(AllocatorCores, DeviceAllocationTakesAllItsCores) {
  const NodeShape shape = ShapeOf("inf1.6xlarge");
  NodeUsage usage;
  ASSERT_TRUE(usage.Take(shape, Unit::kDevice, {2}));
  EXPECT_EQ(usage.used_core_count(), 4);
  for (int c = 0; c < 16; ++c)
    EXPECT_EQ(usage.used_cores().test(static_cast<size_t>(c)), c >= 8 && c < 12) << c;
  EXPECT_EQ(usage.busy_devices(), MaskOf({2}));
  for (Policy policy : kPolicies) {
    const Decision d = Cores(shape, usage, 9, policy);
    EXPECT_FALSE(d.ok()) << Describe(d);  // 0-7 and 12-15 are the only runs
    const Decision e = Cores(shape, usage, 8, policy);
    ASSERT_TRUE(e.ok()) << e.reason;
    EXPECT_THAT(e.placement.ids, ElementsAreArray(Range(0, 7)));
  }
}

TEST(AllocatorCores, CoresMaySpanDevicesOnInferentia) {
  const NodeShape shape = ShapeOf("inf2.48xlarge");
  for (Policy policy : kPolicies) {
    const Decision d = Cores(shape, Usage(shape, {0}), 5, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(2, 6)));
    EXPECT_EQ(d.placement.devices, MaskOf({1, 2, 3}));
    // 24 cores only on an empty node; 23 with one core taken are cores 1..23.
    const Decision e = Cores(shape, Usage(shape, {}, {0}), 23, policy);
    ASSERT_TRUE(e.ok()) << e.reason;
    EXPECT_THAT(e.placement.ids, ElementsAreArray(Range(1, 23)));
    const Decision f = Cores(shape, Usage(shape, {}, {12}), 13, policy);
    EXPECT_FALSE(f.ok()) << Describe(f);
    EXPECT_THAT(f.reason, HasSubstr("no 13 contiguous free cores on inf2.48xlarge"));
    EXPECT_THAT(f.reason, Not(HasSubstr("aligned block")));
  }
}

struct TorusCoreCase {
  const char* what;
  std::vector<int> used_devices;
  std::vector<int> used_cores;
  int count;
  std::vector<int> expected;  // both policies; empty: refused
};

TEST(AllocatorCores, TorusCoreSetsStayInsideTheirBlock) {
  // trn1.32xlarge: 2 cores per device; rows of 8 cores, halves of 16.
  const TorusCoreCase cases[] = {
      {"2 cores in one device", {}, {}, 2, {0, 1}},
      {"2 cores never straddle devices", {}, {1}, 2, {2, 3}},
      {"2 cores with 1 free per device",
       {},
       {1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22, 25, 26, 29, 30},
       2,
       {}},
      {"3 cores in a row", {}, {}, 3, {0, 1, 2}},
      {"6 cores stay in row 1", {0, 1}, {}, 6, Range(8, 13)},
      {"6 cores never straddle rows", {}, Range(0, 5), 6, Range(8, 13)},
      {"8 cores are a whole row", {}, {0}, 8, Range(8, 15)},
      {"9 cores in a half", {0}, {}, 9, Range(2, 10)},
      {"16 cores are a whole half", {}, {0}, 16, Range(16, 31)},
      {"16 cores with both halves broken", {0, 8}, {}, 16, {}},
      {"17 cores anywhere", {}, {0}, 17, Range(1, 17)},
      {"32 cores on an empty node", {}, {}, 32, Range(0, 31)},
  };
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  for (Policy policy : kPolicies) {
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message() << PolicyName(policy) << ": " << c.what);
      const Decision d = Cores(shape, Usage(shape, c.used_devices, c.used_cores), c.count, policy);
      if (c.expected.empty()) {
        EXPECT_FALSE(d.ok()) << Describe(d);
        EXPECT_FALSE(d.unresolvable);
      } else {
        ASSERT_TRUE(d.ok()) << d.reason;
        EXPECT_THAT(d.placement.ids, ElementsAreArray(c.expected));
        EXPECT_EQ(d.placement.devices, TouchedBy(shape, c.expected));
      }
    }
  }
}

TEST(AllocatorCores, TorusRefusalNamesTheBlock) {
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  // One device used in every row: 4..9 are six free contiguous cores, but they straddle rows.
  const NodeUsage usage = Usage(shape, {1, 5, 9, 13});
  for (Policy policy : kPolicies) {
    const Decision d = Cores(shape, usage, 6, policy);
    ASSERT_FALSE(d.ok()) << Describe(d);
    EXPECT_FALSE(d.unresolvable);
    EXPECT_THAT(d.reason, HasSubstr("no 6 contiguous free cores within one aligned block of 4 "
                                    "devices (8 cores) on trn1.32xlarge"));
    const Decision four = Cores(shape, usage, 4, policy);
    ASSERT_TRUE(four.ok()) << four.reason;
    EXPECT_THAT(four.placement.ids, ElementsAreArray({4, 5, 6, 7}));
    const Decision count_only = Cores(shape, usage, 6, Policy::kCountOnly);
    EXPECT_TRUE(count_only.ok());
  }
  // 8..21 are 14 free contiguous cores, but they straddle the two halves.
  const Decision half = Cores(shape, Usage(shape, {3, 11}), 10, Policy::kBestFit);
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.reason, HasSubstr("within one aligned block of 8 devices (16 cores)"));
  const Decision one = Cores(shape, Usage(shape, {}, {1, 2}), 2, Policy::kBestFit);
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(one.placement.ids, ElementsAreArray({4, 5}));
}

TEST(AllocatorCores, Trn2BlocksScaleWithLnc) {
  const NodeShape lnc2 = ShapeOf("trn2.48xlarge");
  const NodeShape lnc1 = ShapeOf("trn2.48xlarge", 1);
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(PolicyName(policy));
    Decision d = Cores(lnc2, NodeUsage{}, 4, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(0, 3)));
    EXPECT_EQ(d.placement.devices, MaskOf({0}));
    d = Cores(lnc2, Usage(lnc2, {}, {0}), 4, policy);  // 1..4 would straddle devices 0 and 1
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(4, 7)));
    d = Cores(lnc2, Usage(lnc2, {}, Range(0, 11)), 5, policy);  // 12..16 would straddle rows
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(16, 20)));
    d = Cores(lnc1, NodeUsage{}, 8, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(0, 7)));
    EXPECT_EQ(d.placement.devices, MaskOf({0}));
    d = Cores(lnc1, Usage(lnc1, {}, {0}), 8, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(8, 15)));
    d = Cores(lnc1, NodeUsage{}, 128, policy);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.placement.ids.size(), 128u);
    EXPECT_FALSE(Cores(lnc2, NodeUsage{}, 65, policy).ok());
  }
}

// --- Scores -----------------------------------------------------------------------------------

TEST(AllocatorScore, TightFitScoresHigherThanSplittingAnEmptyNode) {
  struct ScoreCase {
    const char* type;
    Request request;
    // A state where the same request fills a hole exactly.
    std::vector<int> tight_devices;
    std::vector<int> tight_cores;
  };
  const ScoreCase cases[] = {
      {"trn1.32xlarge", {Unit::kDevice, 4}, Range(0, 11), {}},
      {"trn1.32xlarge", {Unit::kDevice, 1}, Range(0, 14), {}},
      {"trn1.32xlarge", {Unit::kDevice, 1}, {0, 1, 2}, {}},
      {"trn1.32xlarge", {Unit::kDevice, 8}, Range(0, 7), {}},
      {"inf2.48xlarge", {Unit::kDevice, 2}, Concat(Range(0, 4), Range(7, 11)), {}},
      {"inf2.48xlarge", {Unit::kDevice, 2}, {2}, {}},
      {"inf1.6xlarge", {Unit::kCore, 2}, {}, {0, 1}},
      {"inf2.48xlarge", {Unit::kCore, 1}, {}, {0}},
      {"trn1.32xlarge", {Unit::kCore, 6}, {}, {0, 1}},
  };
  for (Policy policy : kPolicies) {
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << PolicyName(policy) << " " << c.type << " " << c.request.count << " "
                   << UnitName(c.request.unit, 2) << " tight at " << FormatIdRanges(c.tight_devices)
                   << "/" << FormatIdRanges(c.tight_cores));
      const NodeShape shape = ShapeOf(c.type);
      const Decision split = Allocate(shape, NodeUsage{}, c.request, policy);
      const Decision tight =
          Allocate(shape, Usage(shape, c.tight_devices, c.tight_cores), c.request, policy);
      ASSERT_TRUE(split.ok()) << split.reason;
      ASSERT_TRUE(tight.ok()) << tight.reason;
      EXPECT_GE(split.score, 1);
      EXPECT_LE(tight.score, 10);
      EXPECT_GT(tight.score, split.score);
    }
  }
}

TEST(AllocatorScore, DocumentedFormulaValues) {
  // score = round(10 * (0.8 * tightness + 0.2 * utilization_after)), clamped to 1..10.
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");
  EXPECT_EQ(Devices(trn1, Usage(trn1, Range(0, 11)), 4, Policy::kBestFit).score, 10);
  EXPECT_EQ(Devices(trn1, NodeUsage{}, 16, Policy::kBestFit).score, 10);
  // 1 of 16 devices from an empty node: 0.8/16 + 0.2/16 = 0.0625 -> 1 (clamped up from 0.6).
  EXPECT_EQ(Devices(trn1, NodeUsage{}, 1, Policy::kBestFit).score, 1);
  // 8 of 16 from an empty node: 0.8*0.5 + 0.2*0.5 = 0.5 -> 5.
  EXPECT_EQ(Devices(trn1, NodeUsage{}, 8, Policy::kBestFit).score, 5);
  // The documented inf1 example: 9 of the 12 cores of devices 0-2, 9 of 16 used after.
  const NodeShape inf1 = ShapeOf("inf1.6xlarge");
  EXPECT_EQ(Cores(inf1, NodeUsage{}, 9, Policy::kBestFit).score, 7);
}

TEST(AllocatorScore, AlwaysBetweenOneAndTen) {
  std::mt19937 rng(7);
  for (const NodeShape& shape : EveryShape()) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<int> used;
      for (int d = 0; d < shape.devices; ++d) {
        if (rng() % 3 == 0) used.push_back(d);
      }
      const NodeUsage usage = Usage(shape, used);
      for (Unit unit : {Unit::kDevice, Unit::kCore}) {
        const int total = unit == Unit::kDevice ? shape.devices : shape.cores;
        for (int n = 1; n <= total; ++n) {
          for (Policy policy : {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly}) {
            const Decision d = Allocate(shape, usage, Request{unit, n}, policy);
            if (!d.ok()) {
              EXPECT_EQ(d.score, 0);
              continue;
            }
            EXPECT_GE(d.score, 1) << shape.type->name;
            EXPECT_LE(d.score, 10) << shape.type->name;
          }
        }
      }
    }
  }
}

// --- LegalPlacements --------------------------------------------------------------------------

std::vector<std::vector<int>> IdsOf(const std::vector<Placement>& ps) {
  std::vector<std::vector<int>> out;
  for (const auto& p : ps) out.push_back(p.ids);
  return out;
}

TEST(AllocatorLegalPlacements, ListsEveryLegalSet) {
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");
  EXPECT_EQ(IdsOf(LegalPlacements(trn1, NodeUsage{}, {Unit::kDevice, 4})),
            (std::vector<std::vector<int>>{Range(0, 3), Range(4, 7), Range(8, 11), Range(12, 15)}));
  EXPECT_EQ(IdsOf(LegalPlacements(trn1, Usage(trn1, {8, 11, 12, 15}), {Unit::kDevice, 4})),
            (std::vector<std::vector<int>>{Range(0, 3), Range(4, 7)}));
  EXPECT_EQ(IdsOf(LegalPlacements(trn1, NodeUsage{}, {Unit::kDevice, 8})),
            (std::vector<std::vector<int>>{Range(0, 7), Range(8, 15)}));
  EXPECT_EQ(IdsOf(LegalPlacements(trn1, Usage(trn1, {3}), {Unit::kDevice, 16})),
            (std::vector<std::vector<int>>{}));
  EXPECT_EQ(LegalPlacements(trn1, Usage(trn1, {3}), {Unit::kDevice, 1}).size(), 15u);

  const NodeShape inf2_24 = ShapeOf("inf2.24xlarge");
  EXPECT_EQ(IdsOf(LegalPlacements(inf2_24, NodeUsage{}, {Unit::kDevice, 2})),
            (std::vector<std::vector<int>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
  const NodeShape inf2_48 = ShapeOf("inf2.48xlarge");
  EXPECT_THAT(LegalPlacements(inf2_48, Usage(inf2_48, Range(1, 10)), {Unit::kDevice, 2}),
              IsEmpty());

  // 6 cores on trn1: 3 starts in each of the 4 rows.
  const auto six = LegalPlacements(trn1, NodeUsage{}, {Unit::kCore, 6});
  ASSERT_EQ(six.size(), 12u);
  for (const auto& p : six) {
    EXPECT_EQ(p.ids.front() / 8, p.ids.back() / 8) << FormatIdRanges(p.ids);
    EXPECT_EQ(p.devices, TouchedBy(trn1, p.ids));
  }

  // Rule any: a single lowest-index choice.
  const NodeShape p4d = ShapeOf("p4d.24xlarge");
  EXPECT_EQ(IdsOf(LegalPlacements(p4d, Usage(p4d, {0, 2}), {Unit::kDevice, 3})),
            (std::vector<std::vector<int>>{{1, 3, 4}}));
  EXPECT_THAT(LegalPlacements(p4d, Usage(p4d, Range(0, 5)), {Unit::kDevice, 3}), IsEmpty());
}

// Trn3: every count is legal through NeuronSwitch (a count trn2's torus refuses, too).
TEST(AllocatorLegalPlacements, Trn3TakesAnyCountThroughItsSwitch) {
  const NodeShape trn3 = ShapeOf("trn3.48xlarge");
  EXPECT_EQ(IdsOf(LegalPlacements(trn3, Usage(trn3, {0, 2}), {Unit::kDevice, 3})),
            (std::vector<std::vector<int>>{{1, 3, 4}}));
  EXPECT_EQ(IdsOf(LegalPlacements(trn3, NodeUsage{}, {Unit::kDevice, 7})),
            (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6}}));
  const NodeShape trn2 = ShapeOf("trn2.48xlarge");
  EXPECT_THAT(LegalPlacements(trn2, NodeUsage{}, {Unit::kDevice, 7}), IsEmpty());
}

TEST(AllocatorLegalPlacements, DeviceSetsMatchExhaustiveEnumeration) {
  std::mt19937 rng(99);
  for (const char* type :
       {"inf1.6xlarge", "inf2.24xlarge", "inf2.48xlarge", "trn1.32xlarge", "ipu-pod16"}) {
    const NodeShape shape = ShapeOf(type);
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<int> used;
      for (int d = 0; d < shape.devices; ++d) {
        if (trial > 0 && rng() % 4 == 0) used.push_back(d);
      }
      const NodeUsage usage = Usage(shape, used);
      const DeviceMask free = shape.AllDevices() & ~usage.busy_devices();
      for (int n = 1; n <= shape.devices; ++n) {
        SCOPED_TRACE(::testing::Message()
                     << type << " used " << FormatIdRanges(used) << " n " << n);
        std::set<DeviceMask> expected;
        for (DeviceMask set = 1; set <= shape.AllDevices(); ++set) {
          if (std::popcount(set) == n && (set & ~free) == 0 && LegalDeviceSet(shape, set)) {
            expected.insert(set);
          }
        }
        const auto got = LegalPlacements(shape, usage, {Unit::kDevice, n});
        std::set<DeviceMask> got_set;
        for (const auto& p : got) {
          EXPECT_EQ(p.devices, MaskOf(p.ids));
          got_set.insert(p.devices);
        }
        EXPECT_EQ(got_set.size(), got.size()) << "duplicates";
        EXPECT_EQ(got_set, expected);
        for (size_t i = 1; i < got.size(); ++i) {
          EXPECT_LT(got[i - 1].ids.front(), got[i].ids.front()) << "ascending order";
        }
        // Both policies answer with one of them; first fit with the first.
        for (Policy policy : kPolicies) {
          const Decision d = Devices(shape, usage, n, policy);
          EXPECT_EQ(d.ok(), !expected.empty()) << PolicyName(policy) << " " << Describe(d);
          if (d.ok()) {
            EXPECT_EQ(expected.count(d.placement.devices), 1u) << PolicyName(policy);
          }
          if (d.ok() && policy == Policy::kFirstFit) {
            EXPECT_EQ(d.placement.ids, got.front().ids);
          }
        }
      }
    }
  }
}

TEST(AllocatorLegalPlacements, CoreSetsMatchExhaustiveEnumeration) {
  std::mt19937 rng(4242);
  for (const auto& [type, lnc] : std::vector<std::pair<const char*, int>>{{"inf1.6xlarge", 0},
                                                                          {"inf2.48xlarge", 0},
                                                                          {"trn1.32xlarge", 0},
                                                                          {"trn2.48xlarge", 0},
                                                                          {"trn2.48xlarge", 1},
                                                                          {"ipu-pod16", 0},
                                                                          {"p4d.24xlarge", 0}}) {
    const NodeShape shape = ShapeOf(type, lnc);
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<int> used_devices;
      std::vector<int> used_cores;
      for (int d = 0; d < shape.devices; ++d) {
        if (trial == 0) break;
        const unsigned r = rng() % 6;
        if (r == 0) {
          used_devices.push_back(d);
        } else if (r == 1) {
          for (int k = 0; k < shape.cores_per_device; ++k) {
            if (rng() % 2 == 0) used_cores.push_back(d * shape.cores_per_device + k);
          }
        }
      }
      const NodeUsage usage = Usage(shape, used_devices, used_cores);
      for (int n = 1; n <= shape.cores; ++n) {
        SCOPED_TRACE(::testing::Message()
                     << type << " LNC " << lnc << " trial " << trial << " n " << n);
        std::vector<std::vector<int>> expected;
        for (int s = 0; s + n <= shape.cores; ++s) {
          const std::vector<int> ids = Range(s, s + n - 1);
          bool free = true;
          for (int c : ids) free = free && !usage.used_cores().test(static_cast<size_t>(c));
          if (free && LegalCoreSet(shape, ids)) expected.push_back(ids);
        }
        const auto got = LegalPlacements(shape, usage, {Unit::kCore, n});
        EXPECT_EQ(IdsOf(got), expected);
        for (const auto& p : got) EXPECT_EQ(p.devices, TouchedBy(shape, p.ids));
        for (Policy policy : kPolicies) {
          const Decision d = Cores(shape, usage, n, policy);
          ASSERT_EQ(d.ok(), !expected.empty()) << PolicyName(policy) << " " << Describe(d);
          if (!d.ok()) continue;
          EXPECT_NE(std::find(expected.begin(), expected.end(), d.placement.ids), expected.end());
          EXPECT_EQ(d.placement.devices, TouchedBy(shape, d.placement.ids));
          if (policy == Policy::kFirstFit) {
            EXPECT_EQ(d.placement.ids, expected.front());
          }
        }
      }
    }
  }
}

// --- Best fit is optimal by its documented measure --------------------------------------------

// The length of the free run of devices that contains device d.
int RunLengthAt(DeviceMask free, int devices, int d) {
  int lo = d;
  int hi = d;
  while (lo > 0 && (free >> (lo - 1) & 1)) --lo;
  while (hi + 1 < devices && (free >> (hi + 1) & 1)) ++hi;
  return hi - lo + 1;
}

// The largest free aligned block (among n, the larger sizes, and the whole node) around block b.
int EnclosingFreeBlock(const NodeShape& shape, DeviceMask free, int start, int n) {
  std::vector<int> levels = shape.type->sizes;
  levels.push_back(shape.devices);
  std::sort(levels.begin(), levels.end());
  int enclosing = n;
  for (int level : levels) {
    if (level <= n) continue;
    const int s = start / level * level;
    bool all = true;
    for (int d = s; d < s + level; ++d) all = all && (free >> d & 1);
    if (!all) break;
    enclosing = level;
  }
  return enclosing;
}

TEST(AllocatorPolicy, BestFitChoosesTheTightestLegalSet) {
  std::mt19937 rng(2024);
  for (const char* type : {"inf2.48xlarge", "inf1.24xlarge", "trn1.32xlarge", "ipu-pod16"}) {
    const NodeShape shape = ShapeOf(type);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int> used;
      for (int d = 0; d < shape.devices; ++d) {
        if (rng() % 3 == 0) used.push_back(d);
      }
      const NodeUsage usage = Usage(shape, used);
      const DeviceMask free = shape.AllDevices() & ~usage.busy_devices();
      for (int n = 1; n < shape.devices; ++n) {
        const auto options = LegalPlacements(shape, usage, {Unit::kDevice, n});
        const Decision d = Devices(shape, usage, n, Policy::kBestFit);
        if (options.empty()) continue;
        ASSERT_TRUE(d.ok());
        SCOPED_TRACE(::testing::Message() << type << " used " << FormatIdRanges(used) << " n " << n
                                          << " got " << FormatIdRanges(d.placement.ids));
        auto measure = [&](const std::vector<int>& ids) {
          return shape.type->rule == LegalSetRule::kContiguous
                     ? RunLengthAt(free, shape.devices, ids.front())
                     : EnclosingFreeBlock(shape, free, ids.front(), n);
        };
        int best = INT_MAX;
        for (const auto& o : options) best = std::min(best, measure(o.ids));
        EXPECT_EQ(measure(d.placement.ids), best);
        if (shape.type->rule == LegalSetRule::kContiguous) {
          // It starts at the start of its run (the run's other end stays whole).
          const int s = d.placement.ids.front();
          EXPECT_TRUE(s == 0 || !(free >> (s - 1) & 1));
        }
      }
    }
  }
}

// --- NodeUsage --------------------------------------------------------------------------------

TEST(NodeUsage, TakeRefusesOverlapAndChangesNothing) {
  const NodeShape shape = ShapeOf("inf1.6xlarge");
  NodeUsage u;
  ASSERT_TRUE(u.Take(shape, Unit::kCore, {5}));
  EXPECT_EQ(u.busy_devices(), MaskOf({1}));
  const CoreBits before = u.used_cores();
  EXPECT_FALSE(u.Take(shape, Unit::kDevice, {0, 1}));  // device 1 has core 5 in use
  EXPECT_EQ(u.used_cores(), before);
  EXPECT_EQ(u.busy_devices(), MaskOf({1}));
  EXPECT_FALSE(u.Take(shape, Unit::kCore, {4, 5}));
  EXPECT_EQ(u.used_cores(), before);
  ASSERT_TRUE(u.Take(shape, Unit::kDevice, {0}));
  EXPECT_FALSE(u.Take(shape, Unit::kCore, {3}));
  EXPECT_EQ(u.used_core_count(), 5);
  EXPECT_TRUE(u.AllFree(shape, Unit::kCore, {4, 6, 7}));
  EXPECT_FALSE(u.AllFree(shape, Unit::kCore, {4, 5}));
  EXPECT_FALSE(u.AllFree(shape, Unit::kDevice, {1}));
  EXPECT_TRUE(u.AllFree(shape, Unit::kDevice, {2, 3}));
  EXPECT_TRUE(u.AllFree(shape, Unit::kDevice, {}));
}

TEST(NodeUsage, ReleaseRecomputesBusyDevices) {
  const NodeShape shape = ShapeOf("inf1.6xlarge");
  NodeUsage u;
  ASSERT_TRUE(u.Take(shape, Unit::kCore, {4, 5}));
  u.Release(shape, Unit::kCore, {4});
  EXPECT_EQ(u.busy_devices(), MaskOf({1}));  // core 5 still in use
  u.Release(shape, Unit::kCore, {5});
  EXPECT_EQ(u.busy_devices(), DeviceMask{0});
  EXPECT_EQ(u.used_core_count(), 0);
  u.Release(shape, Unit::kCore, {5});  // freeing a free id is a no-op
  EXPECT_EQ(u.used_core_count(), 0);
  ASSERT_TRUE(u.Take(shape, Unit::kDevice, {2, 3}));
  EXPECT_EQ(u.used_core_count(), 8);
  u.Release(shape, Unit::kDevice, {2});
  EXPECT_EQ(u.busy_devices(), MaskOf({3}));
  EXPECT_EQ(u.used_core_count(), 4);
  // A core allocation released through device ids frees the whole device.
  ASSERT_TRUE(u.Take(shape, Unit::kCore, {0, 1}));
  u.Release(shape, Unit::kDevice, {0});
  EXPECT_EQ(u.busy_devices(), MaskOf({3}));
}

TEST(NodeUsage, WorksOnA64DeviceNode) {
  InstanceType big;
  big.name = "big.chain";
  big.devices = 64;
  big.cores_per_device = 8;
  big.rule = LegalSetRule::kContiguous;
  big.adjacency.assign(64, {});
  auto shape = NodeShape::Make(big);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->AllDevices(), ~DeviceMask{0});
  EXPECT_EQ(shape->cores, kMaxCores);
  for (Policy policy : kPolicies) {
    Decision d = Devices(*shape, NodeUsage{}, 64, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_EQ(d.placement.devices, ~DeviceMask{0});
    EXPECT_EQ(d.placement.ids.size(), 64u);
    d = Devices(*shape, Usage(*shape, {0}), 63, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(1, 63)));
    d = Cores(*shape, Usage(*shape, {}, {0}), kMaxCores - 1, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_EQ(d.placement.ids.back(), kMaxCores - 1);
    EXPECT_EQ(d.placement.devices, ~DeviceMask{0});
  }
  EXPECT_EQ(MaskToIds(~DeviceMask{0}).size(), 64u);
  EXPECT_THAT(MaskToIds(MaskOf({0, 5, 63})), ElementsAreArray({0, 5, 63}));
  EXPECT_THAT(MaskToIds(0), IsEmpty());
}

// --- Devices out of service -------------------------------------------------------------------

TEST(OutOfService, ARingWithADeadDeviceOffersOnlyTheChainsLeft) {
  const NodeShape inf2 = ShapeOf("inf2.48xlarge");  // 12 devices, contiguous
  NodeUsage usage;
  usage.SetOutOfService(inf2, MaskOf({2}));
  EXPECT_EQ(usage.busy_devices(), MaskOf({2}));
  EXPECT_EQ(usage.held_core_count(), 0);
  for (Policy policy : kPolicies) {
    const Decision d = Devices(inf2, usage, 4, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_EQ(d.placement.devices & MaskOf({2}), 0u);
    EXPECT_TRUE(LegalDeviceSet(inf2, d.placement.devices));
  }
  // Every legal 4-set left lies in the chain 3-11; 0-1 is too short for any of them.
  for (const Placement& p : LegalPlacements(inf2, usage, {Unit::kDevice, 4})) {
    EXPECT_GE(p.ids.front(), 3) << FormatIdRanges(p.ids);
  }
  EXPECT_EQ(FreeSlots(inf2, usage, {Unit::kDevice, 4}), 2);  // 3-6, 7-10 (of 0-3, 4-7, 8-11)
  EXPECT_EQ(FreeSlots(inf2, usage, {Unit::kDevice, 1}), 11);
  EXPECT_EQ(FreeSlots(inf2, usage, {Unit::kDevice, 12}), 0);
  const Decision all = Devices(inf2, usage, 12, Policy::kBestFit);
  ASSERT_FALSE(all.ok());
  EXPECT_FALSE(all.unresolvable);  // the device may come back
  EXPECT_THAT(all.reason, HasSubstr("device 2 out of service"));
  // Cores: none on the dead device.
  const Decision cores = Cores(inf2, usage, 2, Policy::kFirstFit);
  ASSERT_TRUE(cores.ok()) << cores.reason;
  EXPECT_EQ(cores.placement.devices & MaskOf({2}), 0u);
  EXPECT_FALSE(usage.AllFree(inf2, Unit::kCore, {2 * inf2.cores_per_device}));
  EXPECT_FALSE(usage.AllFree(inf2, Unit::kDevice, {2}));
}

TEST(OutOfService, ATorusLosesTheRowsAndHalvesHoldingTheDeadDevice) {
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");  // rows of 4, halves of 8
  NodeUsage usage;
  usage.SetOutOfService(trn1, MaskOf({5}));
  EXPECT_EQ(FreeSlots(trn1, usage, {Unit::kDevice, 4}), 3);
  EXPECT_EQ(FreeSlots(trn1, usage, {Unit::kDevice, 8}), 1);
  EXPECT_EQ(FreeSlots(trn1, usage, {Unit::kDevice, 16}), 0);
  for (Policy policy : kPolicies) {
    const Decision d = Devices(trn1, usage, 8, policy);
    ASSERT_TRUE(d.ok()) << d.reason;
    EXPECT_THAT(d.placement.ids, ElementsAreArray(Range(8, 15)));
  }
  usage.SetOutOfService(trn1, MaskOf({5, 9}));
  const Decision half = Devices(trn1, usage, 8, Policy::kBestFit);
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.reason, HasSubstr("devices 5,9 out of service"));
}

TEST(OutOfService, HoldsOnADeadDeviceStayUntilReleasedAndItsReturnFreesOnlyWhatIsUnheld) {
  const NodeShape inf2 = ShapeOf("inf2.48xlarge");
  const int cpd = inf2.cores_per_device;
  NodeUsage usage = Usage(inf2, {0, 1, 2, 3});
  usage.SetOutOfService(inf2, MaskOf({2, 7}));
  // A recorded pod running on the dead device keeps its ids; no one else can take them.
  EXPECT_FALSE(usage.Take(inf2, Unit::kDevice, {2}));
  EXPECT_EQ(usage.held_core_count(), 4 * cpd);
  EXPECT_EQ(usage.used_core_count(), 5 * cpd);
  // A record naming ids on a dead device that no one holds is still taken (its pod runs there).
  EXPECT_TRUE(usage.Take(inf2, Unit::kCore, {7 * cpd}));
  usage.Release(inf2, Unit::kDevice, {0, 1, 2, 3});
  EXPECT_EQ(usage.busy_devices(), MaskOf({2, 7}));  // 2 is released but still out of service
  usage.Release(inf2, Unit::kCore, {7 * cpd});
  EXPECT_EQ(usage.busy_devices(), MaskOf({2, 7}));
  usage.SetOutOfService(inf2, 0);
  EXPECT_EQ(usage.busy_devices(), 0u);
  EXPECT_EQ(usage.used_core_count(), 0);
  // Back in service while held: the holder keeps it.
  usage = Usage(inf2, {4});
  usage.SetOutOfService(inf2, MaskOf({4}));
  usage.SetOutOfService(inf2, 0);
  EXPECT_EQ(usage.busy_devices(), MaskOf({4}));
  EXPECT_FALSE(usage.AllFree(inf2, Unit::kDevice, {4}));
}

// --- Placement geometry -----------------------------------------------------------------------

TEST(PlacementGeometry, FromIdsFillsTheDevicesTheIdsTouch) {
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");  // 2 cores per device
  const Placement devices = Placement::FromIds(trn1, Unit::kDevice, {7, 3, 63});
  EXPECT_THAT(devices.ids, ElementsAreArray({7, 3, 63}));  // the order given
  EXPECT_EQ(devices.devices, MaskOf({3, 7, 63}));
  const Placement cores = Placement::FromIds(trn1, Unit::kCore, {5, 6, 7, 8});
  EXPECT_EQ(cores.devices, TouchedBy(trn1, {5, 6, 7, 8}));
  EXPECT_EQ(Placement::FromIds(Unit::kCore, {0, 7}, 4).devices, MaskOf({0, 1}));
  // Ids with no device bit set none (validating callers report them).
  EXPECT_EQ(Placement::FromIds(Unit::kDevice, {-1, 64, 2}, 1).devices, MaskOf({2}));
  EXPECT_EQ(Placement::FromIds(Unit::kCore, {-3, 128, 1}, 2).devices, MaskOf({0}));
  // Every placement the allocator makes agrees with it.
  for (const auto& p : LegalPlacements(trn1, NodeUsage{}, {Unit::kCore, 6})) {
    EXPECT_EQ(Placement::FromIds(trn1, Unit::kCore, p.ids).devices, p.devices);
  }
}

TEST(PlacementGeometry, CoresOfAndOverlapsCountADeviceAsAllItsCores) {
  const NodeShape trn1 = ShapeOf("trn1.32xlarge");
  const Placement device3 = Placement::FromIds(trn1, Unit::kDevice, {3});
  const Placement cores = Placement::FromIds(trn1, Unit::kCore, {7, 8});
  const Placement other = Placement::FromIds(trn1, Unit::kCore, {8, 9});
  CoreBits six_seven;
  six_seven.set(6).set(7);
  EXPECT_EQ(CoresOf(trn1, device3), six_seven);
  EXPECT_TRUE(Overlaps(trn1, device3, cores));
  EXPECT_FALSE(Overlaps(trn1, device3, other));
  EXPECT_TRUE(Overlaps(trn1, cores, other));
  // Ids outside the node cover nothing, in any order.
  const Placement messy{Unit::kCore, {9, -1, 8, 32}, 0};
  CoreBits eight_nine;
  eight_nine.set(8).set(9);
  EXPECT_EQ(CoresOf(trn1, messy), eight_nine);
  EXPECT_FALSE(Overlaps(trn1, messy, Placement{Unit::kDevice, {16, -2}, 0}));
}

}  // namespace
// CheckLegalSet is the membership test for a set chosen elsewhere: exactly one of the legal
// placements, or every subset on rule `any`.
TEST(CheckLegalSetTest, AcceptsExactlyTheLegalPlacements) {
  const NodeShape trn = ShapeOf("trn2.48xlarge", 2);
  EXPECT_EQ(CheckLegalSet(trn, Unit::kDevice, {3}), "");
  EXPECT_EQ(CheckLegalSet(trn, Unit::kDevice, {7, 6, 5, 4}), "");  // order does not matter
  EXPECT_THAT(CheckLegalSet(trn, Unit::kDevice, {1, 2, 3, 4}), HasSubstr("not one legal set"));
  EXPECT_THAT(CheckLegalSet(trn, Unit::kDevice, {0, 1, 2, 3, 8, 9, 10, 11}),
              HasSubstr("not one legal set"));
  EXPECT_NE(CheckLegalSet(trn, Unit::kDevice, {0, 1}), "");  // 2 is no size of trn2
  EXPECT_THAT(CheckLegalSet(trn, Unit::kDevice, {0, 16}), HasSubstr("device 16"));
  EXPECT_EQ(CheckLegalSet(trn, Unit::kCore, {4, 5}), "");
  EXPECT_THAT(CheckLegalSet(trn, Unit::kCore, {0, 5}), HasSubstr("cores 0,5"));
  EXPECT_THAT(CheckLegalSet(trn, Unit::kCore, {}), HasSubstr("no core"));
  const NodeShape inf = ShapeOf("inf2.48xlarge");
  EXPECT_EQ(CheckLegalSet(inf, Unit::kDevice, {1, 2, 3, 4}), "");
  EXPECT_THAT(CheckLegalSet(inf, Unit::kDevice, {1, 2, 3, 8}), HasSubstr("contiguous"));
  // Every legal placement passes, for every count, on every shape of the catalog.
  for (const auto& [name, type] : Catalog::Embedded().types()) {
    const NodeShape shape = ShapeOf(name);
    for (Unit unit : {Unit::kDevice, Unit::kCore}) {
      for (int count = 1; count <= shape.devices; ++count) {
        for (const Placement& p : LegalPlacements(shape, NodeUsage{}, Request{unit, count})) {
          EXPECT_EQ(CheckLegalSet(shape, unit, p.ids), "") << name << " " << count;
        }
      }
    }
  }
}

}  // namespace toposched::topology
