// The instance-type catalog: the embedded data against neuron-facts §1.1/§1.2, the parser's
// errors, and the file on disk against the embedded copy.
#include "topology/catalog.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/build_paths.h"
#include "topology/allocator.h"

namespace toposched::topology {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const Catalog& Embedded() { return Catalog::Embedded(); }

const InstanceType& TypeOf(const std::string& name) {
  const InstanceType* t = Embedded().Find(name);
  if (t == nullptr) {
    ADD_FAILURE() << "the embedded catalog has no " << name;
    static const InstanceType kEmpty;
    return kEmpty;
  }
  return *t;
}

// neuron-facts §1.2, trn1_32xl_neigbor_ids, in the driver's order.
const std::vector<std::vector<int>> kTrn1Torus = {
    {12, 3, 4, 1},  {13, 0, 5, 2},  {14, 1, 6, 3},   {15, 2, 7, 0},
    {0, 7, 8, 5},   {1, 4, 9, 6},   {2, 5, 10, 7},   {3, 6, 11, 4},
    {4, 11, 12, 9}, {5, 8, 13, 10}, {6, 9, 14, 11},  {7, 10, 15, 8},
    {8, 15, 0, 13}, {9, 12, 1, 14}, {10, 13, 2, 15}, {11, 14, 3, 12},
};

// --- §1.1: device and core counts -------------------------------------------------------------

struct CountCase {
  const char* type;
  int devices;
  int cores_per_device;  // at the default LNC
  LegalSetRule rule;
};

TEST(Catalog, DeviceAndCoreCountsOfEveryNeuronType) {
  const CountCase cases[] = {
      {"inf1.xlarge", 1, 4, LegalSetRule::kContiguous},
      {"inf1.2xlarge", 1, 4, LegalSetRule::kContiguous},
      {"inf1.6xlarge", 4, 4, LegalSetRule::kContiguous},
      {"inf1.24xlarge", 16, 4, LegalSetRule::kContiguous},
      {"inf2.xlarge", 1, 2, LegalSetRule::kContiguous},
      {"inf2.8xlarge", 1, 2, LegalSetRule::kContiguous},
      {"inf2.24xlarge", 6, 2, LegalSetRule::kContiguous},
      {"inf2.48xlarge", 12, 2, LegalSetRule::kContiguous},
      {"trn1.2xlarge", 1, 2, LegalSetRule::kContiguous},
      {"trn1.32xlarge", 16, 2, LegalSetRule::kAligned},
      {"trn1n.32xlarge", 16, 2, LegalSetRule::kAligned},
      {"trn2.48xlarge", 16, 4, LegalSetRule::kAligned},
      {"trn2u.48xlarge", 16, 4, LegalSetRule::kAligned},
      {"trn3.48xlarge", 16, 4, LegalSetRule::kAny},
      {"trn3p.48xlarge", 16, 4, LegalSetRule::kAny},
      {"trn3e.24xlarge", 4, 4, LegalSetRule::kAny},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const InstanceType& t = TypeOf(c.type);
    EXPECT_EQ(t.name, c.type);
    EXPECT_EQ(t.devices, c.devices);
    EXPECT_EQ(t.cores_per_device, c.cores_per_device);
    EXPECT_EQ(t.rule, c.rule) << RuleName(t.rule);
    ASSERT_EQ(t.adjacency.size(), static_cast<size_t>(c.devices));
    auto shape = NodeShape::Make(t);
    ASSERT_TRUE(shape.ok()) << shape.error();
    EXPECT_EQ(shape->devices, c.devices);
    EXPECT_EQ(shape->cores_per_device, c.cores_per_device);
    EXPECT_EQ(shape->cores, c.devices * c.cores_per_device);
    if (c.rule == LegalSetRule::kAligned) {
      EXPECT_EQ(t.sizes, (std::vector<int>{1, 4, 8, 16}));
    } else {
      EXPECT_TRUE(t.sizes.empty());
    }
  }
}

TEST(Catalog, Trn2AndTrn3CoresFollowTheLncSetting) {
  for (const char* name : {"trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge", "trn3p.48xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    ASSERT_TRUE(t.has_lnc);
    EXPECT_EQ(t.lnc.physical_cores_per_device, 8);
    EXPECT_EQ(t.lnc.default_lnc, 2);
    EXPECT_EQ(t.lnc.allowed, (std::vector<int>{1, 2}));

    auto by_default = NodeShape::Make(t);
    ASSERT_TRUE(by_default.ok()) << by_default.error();
    EXPECT_EQ(by_default->lnc, 2);
    EXPECT_EQ(by_default->cores_per_device, 4);
    EXPECT_EQ(by_default->cores, 64);

    auto lnc2 = NodeShape::Make(t, 2);
    ASSERT_TRUE(lnc2.ok()) << lnc2.error();
    EXPECT_EQ(lnc2->cores_per_device, 4);
    EXPECT_EQ(lnc2->cores, 64);

    auto lnc1 = NodeShape::Make(t, 1);
    ASSERT_TRUE(lnc1.ok()) << lnc1.error();
    EXPECT_EQ(lnc1->lnc, 1);
    EXPECT_EQ(lnc1->cores_per_device, 8);
    EXPECT_EQ(lnc1->cores, 128);
    EXPECT_EQ(lnc1->devices, 16);

    for (int bad : {3, 4, 8}) {
      auto shape = NodeShape::Make(t, bad);
      ASSERT_FALSE(shape.ok()) << "LNC " << bad;
      EXPECT_THAT(shape.error(), HasSubstr(name));
      EXPECT_THAT(shape.error(), HasSubstr("LNC " + std::to_string(bad)));
    }
  }
}

TEST(Catalog, TypesWithoutLncRefuseAnLncOtherThanOne) {
  for (const char* name : {"inf2.48xlarge", "trn1.32xlarge", "inf1.6xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    EXPECT_FALSE(t.has_lnc);
    auto one = NodeShape::Make(t, 1);
    ASSERT_TRUE(one.ok()) << one.error();
    EXPECT_EQ(one->lnc, 0);
    EXPECT_EQ(one->cores_per_device, t.cores_per_device);
    auto two = NodeShape::Make(t, 2);
    ASSERT_FALSE(two.ok());
    EXPECT_THAT(two.error(), HasSubstr(name));
    EXPECT_THAT(two.error(), HasSubstr("LNC"));
  }
}

// --- §1.2: adjacency --------------------------------------------------------------------------

TEST(Catalog, Trn1TorusAdjacencyIsTheDriverTableInOrder) {
  for (const char* name : {"trn1.32xlarge", "trn1n.32xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    ASSERT_EQ(t.adjacency.size(), 16u);
    for (int d = 0; d < 16; ++d) {
      SCOPED_TRACE(d);
      EXPECT_THAT(t.adjacency[static_cast<size_t>(d)],
                  ElementsAreArray(kTrn1Torus[static_cast<size_t>(d)]));
    }
  }
}

TEST(Catalog, Trn1TorusIsRowAndColumnNeighboursWithWrap) {
  // An independent derivation of the table: row-major 4x4, up/left/down/right with wrap.
  const InstanceType& t = TypeOf("trn1.32xlarge");
  for (int d = 0; d < 16; ++d) {
    const int r = d / 4;
    const int c = d % 4;
    const std::vector<int> expected = {((r + 3) % 4) * 4 + c, r * 4 + (c + 3) % 4,
                                       ((r + 1) % 4) * 4 + c, r * 4 + (c + 1) % 4};
    EXPECT_EQ(t.adjacency[static_cast<size_t>(d)], expected) << "device " << d;
  }
}

TEST(Catalog, Trn2TorusHasTrn1NeighbourSetsAndTheDocumentedOrders) {
  struct Order {
    int device;
    std::vector<int> neighbours;
  };
  const Order documented[] = {
      {0, {12, 1, 3, 4}}, {4, {8, 5, 7, 0}}, {8, {4, 9, 11, 12}}, {15, {14, 3, 11, 12}}};
  for (const char* name : {"trn2.48xlarge", "trn2u.48xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    ASSERT_EQ(t.adjacency.size(), 16u);
    for (int d = 0; d < 16; ++d) {
      SCOPED_TRACE(d);
      const auto& got = t.adjacency[static_cast<size_t>(d)];
      EXPECT_EQ(got.size(), 4u);
      EXPECT_EQ(std::set<int>(got.begin(), got.end()),
                std::set<int>(kTrn1Torus[static_cast<size_t>(d)].begin(),
                              kTrn1Torus[static_cast<size_t>(d)].end()));
    }
    for (const auto& o : documented) {
      EXPECT_THAT(t.adjacency[static_cast<size_t>(o.device)], ElementsAreArray(o.neighbours))
          << "device " << o.device;
    }
  }
}

TEST(Catalog, Inf2_48xlargeIsARingWithWrap) {
  const InstanceType& t = TypeOf("inf2.48xlarge");
  ASSERT_EQ(t.adjacency.size(), 12u);
  EXPECT_THAT(t.adjacency[0], ElementsAreArray({11, 1}));
  EXPECT_THAT(t.adjacency[11], ElementsAreArray({10, 0}));
  for (int d = 0; d < 12; ++d) {
    EXPECT_THAT(t.adjacency[static_cast<size_t>(d)],
                ElementsAreArray({(d + 11) % 12, (d + 1) % 12}))
        << "device " << d;
  }
}

TEST(Catalog, Inf2_24xlargeIsAChainWithoutWrap) {
  const InstanceType& t = TypeOf("inf2.24xlarge");
  const std::vector<std::vector<int>> expected = {{1}, {0, 2}, {1, 3}, {2, 4}, {3, 5}, {4}};
  ASSERT_EQ(t.adjacency.size(), expected.size());
  for (size_t d = 0; d < expected.size(); ++d) {
    EXPECT_THAT(t.adjacency[d], ElementsAreArray(expected[d])) << "device " << d;
  }
}

TEST(Catalog, Trn3ChipsAreAllToAllThroughTheSwitch) {
  for (const char* name : {"trn3.48xlarge", "trn3p.48xlarge", "trn3e.24xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    for (int d = 0; d < t.devices; ++d) {
      EXPECT_EQ(t.adjacency[static_cast<size_t>(d)].size(), static_cast<size_t>(t.devices - 1));
    }
  }
}

TEST(Catalog, SingleDeviceTypesHaveNoNeighbours) {
  for (const char* name :
       {"inf1.xlarge", "inf1.2xlarge", "inf2.xlarge", "inf2.8xlarge", "trn1.2xlarge"}) {
    SCOPED_TRACE(name);
    const InstanceType& t = TypeOf(name);
    EXPECT_EQ(t.devices, 1);
    ASSERT_EQ(t.adjacency.size(), 1u);
    EXPECT_TRUE(t.adjacency[0].empty());
  }
}

TEST(Catalog, EveryEmbeddedAdjacencyIsSymmetricWithoutSelfLinks) {
  ASSERT_FALSE(Embedded().types().empty());
  for (const auto& [name, t] : Embedded().types()) {
    SCOPED_TRACE(name);
    ASSERT_EQ(t.adjacency.size(), static_cast<size_t>(t.devices));
    for (int a = 0; a < t.devices; ++a) {
      const auto& list = t.adjacency[static_cast<size_t>(a)];
      EXPECT_EQ(std::set<int>(list.begin(), list.end()).size(), list.size())
          << "duplicates at " << a;
      for (int b : list) {
        ASSERT_GE(b, 0);
        ASSERT_LT(b, t.devices);
        EXPECT_NE(a, b);
        const auto& back = t.adjacency[static_cast<size_t>(b)];
        EXPECT_NE(std::find(back.begin(), back.end(), a), back.end()) << a << " -> " << b;
      }
    }
  }
}

TEST(Catalog, NonNeuronExamplesAreAsDocumented) {
  const InstanceType& p4d = TypeOf("p4d.24xlarge");
  EXPECT_EQ(p4d.devices, 8);
  EXPECT_EQ(p4d.cores_per_device, 1);
  EXPECT_EQ(p4d.rule, LegalSetRule::kAny);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(p4d.adjacency[static_cast<size_t>(d)].size(), 7u);

  const InstanceType& ipu = TypeOf("ipu-pod16");
  EXPECT_EQ(ipu.devices, 16);
  EXPECT_EQ(ipu.rule, LegalSetRule::kAligned);
  EXPECT_EQ(ipu.sizes, (std::vector<int>{1, 2, 4, 8, 16}));
}

TEST(Catalog, SageMakerNamesAreTheSameMachinesAsTheirEc2Names) {
  for (const char* ec2 : {"inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge",
                          "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge"}) {
    SCOPED_TRACE(ec2);
    const InstanceType& a = TypeOf(ec2);
    const InstanceType& ml = TypeOf(std::string("ml.") + ec2);
    EXPECT_EQ(ml.name, std::string("ml.") + ec2);
    EXPECT_EQ(ml.devices, a.devices);
    EXPECT_EQ(ml.cores_per_device, a.cores_per_device);
    EXPECT_EQ(ml.rule, a.rule);
    EXPECT_EQ(ml.sizes, a.sizes);
    EXPECT_EQ(ml.adjacency, a.adjacency);
  }
}

TEST(Catalog, FindReturnsNullForUnknownTypes) {
  EXPECT_EQ(Embedded().Find("trn9.huge"), nullptr);
  EXPECT_EQ(Embedded().Find(""), nullptr);
  EXPECT_EQ(Embedded().Find("TRN1.32XLARGE"), nullptr);  // names are exact
  EXPECT_NE(Embedded().Find("trn1.32xlarge"), nullptr);
}

TEST(Catalog, UnknownTypeMessageNamesTheTypeAndHowToAddIt) {
  const std::string msg = Catalog::UnknownTypeMessage("trn9.huge");
  EXPECT_THAT(msg, HasSubstr("'trn9.huge'"));
  EXPECT_THAT(msg, HasSubstr("catalog/instance-types.yaml"));
  EXPECT_THAT(msg, HasSubstr("--catalog"));
}

TEST(Catalog, RuleNames) {
  EXPECT_EQ(RuleName(LegalSetRule::kContiguous), "contiguous");
  EXPECT_EQ(RuleName(LegalSetRule::kAligned), "aligned");
  EXPECT_EQ(RuleName(LegalSetRule::kAny), "any");
}

// --- The file on disk -------------------------------------------------------------------------

void ExpectSameType(const InstanceType& a, const InstanceType& b) {
  SCOPED_TRACE(a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.cores_per_device, b.cores_per_device);
  EXPECT_EQ(a.has_lnc, b.has_lnc);
  EXPECT_EQ(a.lnc.physical_cores_per_device, b.lnc.physical_cores_per_device);
  EXPECT_EQ(a.lnc.allowed, b.lnc.allowed);
  EXPECT_EQ(a.lnc.default_lnc, b.lnc.default_lnc);
  EXPECT_EQ(a.rule, b.rule);
  EXPECT_EQ(a.sizes, b.sizes);
  EXPECT_EQ(a.adjacency, b.adjacency);
  EXPECT_EQ(a.source, b.source);
}

TEST(Catalog, FileOnDiskParsesAndEqualsTheEmbeddedCatalog) {
  const std::string path = toposched::testing::SourcePath("catalog/instance-types.yaml");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = Catalog::Parse(text.str(), path);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const auto& disk = parsed->types();
  const auto& embedded = Embedded().types();
  ASSERT_EQ(disk.size(), embedded.size());
  for (const auto& [name, t] : disk) {
    auto it = embedded.find(name);
    ASSERT_NE(it, embedded.end()) << name << " is on disk but not embedded";
    ExpectSameType(t, it->second);
  }
}

// --- Parser errors ----------------------------------------------------------------------------

constexpr const char* kGoodEntry = R"(instance_types:
  small.chain:
    devices: 4
    cores_per_device: 2
    rule: contiguous
    adjacency:
      0: [1]
      1: [0, 2]
      2: [1, 3]
      3: [2]
    source: test
)";

TEST(CatalogParse, AcceptsAMinimalCatalog) {
  auto parsed = Catalog::Parse(kGoodEntry, "good.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const InstanceType* t = parsed->Find("small.chain");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->devices, 4);
  EXPECT_EQ(t->cores_per_device, 2);
  EXPECT_EQ(t->rule, LegalSetRule::kContiguous);
  EXPECT_EQ(t->adjacency, (std::vector<std::vector<int>>{{1}, {0, 2}, {1, 3}, {2}}));
  EXPECT_EQ(t->source, "test");
}

TEST(CatalogParse, MissingAdjacencyMeansNoNeighbours) {
  auto parsed = Catalog::Parse(
      "instance_types:\n  x:\n    devices: 3\n    cores_per_device: 1\n    rule: any\n", "x.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->Find("x")->adjacency, (std::vector<std::vector<int>>(3)));
}

struct BadCase {
  const char* what;
  const char* yaml;
  const char* prefix;    // "bad.yaml:LINE:"
  const char* contains;  // part of the message
};

TEST(CatalogParse, MalformedCatalogsNameTheSourceAndLine) {
  const BadCase cases[] = {
      {"unknown key",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "    adjacncy: {}\n",
       "bad.yaml:6:", "unknown key 'adjacncy'"},
      {"non-numeric devices",
       "instance_types:\n"
       "  t:\n"
       "    devices: four\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n",
       "bad.yaml:3:", "devices must be a whole number, got 'four'"},
      {"devices out of range",
       "instance_types:\n"
       "  t:\n"
       "    devices: 65\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n",
       "bad.yaml:3:", "devices must be between 1 and 64"},
      {"size not dividing devices",
       "instance_types:\n"
       "  t:\n"
       "    devices: 12\n"
       "    cores_per_device: 2\n"
       "    rule: aligned\n"
       "    sizes: [1, 8]\n",
       "bad.yaml:6:", "size 8 does not divide 12 devices"},
      {"sizes not a chain of multiples",
       "instance_types:\n"
       "  t:\n"
       "    devices: 12\n"
       "    cores_per_device: 2\n"
       "    rule: aligned\n"
       "    sizes: [4, 6]\n",
       "bad.yaml:6:", "each a multiple of the one before"},
      {"aligned without sizes",
       "instance_types:\n"
       "  t:\n"
       "    devices: 16\n"
       "    cores_per_device: 2\n"
       "    rule: aligned\n",
       "bad.yaml:3:", "needs 'sizes'"},
      {"sizes with another rule",
       "instance_types:\n"
       "  t:\n"
       "    devices: 16\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "    sizes: [4]\n",
       "bad.yaml:6:", "only applies to rule 'aligned'"},
      {"asymmetric adjacency",
       "instance_types:\n"
       "  t:\n"
       "    devices: 3\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "    adjacency:\n"
       "      0: [1]\n"
       "      1: [2]\n"
       "      2: [1]\n",
       "bad.yaml:7:", "adjacency is not symmetric: 0 lists 1 but 1 does not list 0"},
      {"neighbour out of range",
       "instance_types:\n"
       "  t:\n"
       "    devices: 2\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "    adjacency:\n"
       "      0: [1]\n"
       "      1: [0, 5]\n",
       "bad.yaml:8:", "adjacency neighbour must be between 0 and 1, got 5"},
      {"self link",
       "instance_types:\n"
       "  t:\n"
       "    devices: 2\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "    adjacency:\n"
       "      0: [0]\n",
       "bad.yaml:7:", "device 0 lists itself"},
      {"YAML syntax error",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: [2\n"
       "    rule: contiguous\n",
       "bad.yaml:", ""},
      {"duplicate type",
       "instance_types:\n"
       "  t:\n"
       "    devices: 1\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n"
       "  t:\n"
       "    devices: 2\n"
       "    cores_per_device: 2\n"
       "    rule: contiguous\n",
       "bad.yaml:6:", "'t' is defined twice"},
      {"unknown rule",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 2\n"
       "    rule: ring\n",
       "bad.yaml:5:", "rule must be contiguous, aligned or any, got 'ring'"},
      {"missing rule",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 2\n",
       "bad.yaml:3:", "has no 'rule'"},
      {"unknown top-level key",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 2\n"
       "    rule: any\n"
       "types: {}\n",
       "bad.yaml:6:", "unknown key 'types'"},
      {"no instance_types", "something: else\n", "bad.yaml:1:", "'instance_types'"},
      {"lnc default not allowed",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 4\n"
       "    lnc: {physical_cores_per_device: 8, allowed: [1], default: 2}\n"
       "    rule: any\n",
       "bad.yaml:5:", "lnc.default must be one of lnc.allowed"},
      {"lnc inconsistent with cores_per_device",
       "instance_types:\n"
       "  t:\n"
       "    devices: 4\n"
       "    cores_per_device: 2\n"
       "    lnc: {physical_cores_per_device: 8, allowed: [1, 2], default: 2}\n"
       "    rule: any\n",
       "bad.yaml:4:", "cores_per_device 2 must equal physical_cores_per_device 8 / default LNC 2"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto parsed = Catalog::Parse(c.yaml, "bad.yaml");
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.error(), StartsWith(c.prefix));
    EXPECT_THAT(parsed.error(), HasSubstr(c.contains));
  }
}

TEST(CatalogParse, SyntaxErrorCarriesALineNumber) {
  auto parsed = Catalog::Parse(
      "instance_types:\n  t:\n    devices: 4\n    cores_per_device: [2\n    rule: x\n", "syn.yaml");
  ASSERT_FALSE(parsed.ok());
  // "syn.yaml:L:C: ..." with L a real line (1-based), not 0.
  const std::string& e = parsed.error();
  ASSERT_THAT(e, StartsWith("syn.yaml:"));
  const int line = std::stoi(e.substr(std::string("syn.yaml:").size()));
  EXPECT_GE(line, 4);
  EXPECT_LE(line, 6);
}

TEST(CatalogParse, MissingLncFieldsAreReportedWithALine) {
  auto parsed = Catalog::Parse(
      "instance_types:\n"
      "  t:\n"
      "    devices: 4\n"
      "    cores_per_device: 4\n"
      "    lnc: {physical_cores_per_device: 8, default: 2}\n"
      "    rule: any\n",
      "lnc.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.error(), StartsWith("lnc.yaml:5:"));
  EXPECT_THAT(parsed.error(), HasSubstr("allowed"));
}

TEST(CatalogParse, ErrorsUseTheGivenSourceName) {
  auto parsed = Catalog::Parse("instance_types: []\n", "/etc/toposched/catalog.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.error(), StartsWith("/etc/toposched/catalog.yaml:1:"));
}

}  // namespace
}  // namespace toposched::topology
