// --filter-answer best (the default): filter passes only the node the policy picks, so
// kube-scheduler skips its scoring and the prioritize call. These tests show that the pods land
// where they did with every fitting node passed and prioritize's 10 deciding, on the same ids,
// and that a pod that fits nowhere is told exactly what the feasible answer tells it.
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "claims/keys.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "support/every_verdict.h"

namespace toposched::extender {
namespace {

using nlohmann::json;

// One extender service in offline mode (binds in memory) over a fixed mixed fleet.
struct Extender {
  explicit Extender(ExtenderOptions options)
      : service(
            topology::Catalog::Embedded(), std::move(options), writer, metrics,
            [] { return int64_t{1'000'000'000}; }, [] { return int64_t{1743574052764891534}; }) {}

  void Start(const std::vector<kube::Node>& nodes) {
    service.ReplaceNodes(nodes);
    service.ReplacePods({});
  }
  json Filter(const std::string& pod, const std::vector<std::string>& names) {
    return json::parse(service.Filter(Args(pod, names)));
  }
  json Prioritize(const std::string& pod, const std::vector<std::string>& names) {
    return json::parse(service.Prioritize(Args(pod, names)));
  }
  std::string Bind(const std::string& name, const std::string& uid, const std::string& node) {
    return json::parse(service.Bind(BindingArgs{name, "default", uid, node}))["Error"];
  }
  static ExtenderArgs Args(const std::string& pod, const std::vector<std::string>& names) {
    const simdjson::padded_string padded(testing::NamesArgs(pod, names));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    return args.ok() ? *args : ExtenderArgs{};
  }

  OfflineClusterWriter writer;
  Metrics metrics;
  ExtenderService service;
};

kube::Node Node(const std::string& name, const std::string& type, int devices, int cores) {
  auto node = kube::DecodeNode(testing::EksNodeJson(name, type, devices, cores));
  EXPECT_TRUE(node.ok()) << node.error();
  return node.ok() ? *node : kube::Node{};
}

std::vector<kube::Node> MixedFleet() {
  std::vector<kube::Node> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(Node("trn-" + std::to_string(i), "trn1.32xlarge", 16, 32));
    nodes.push_back(Node("inf-" + std::to_string(i), "inf2.48xlarge", 12, 24));
    nodes.push_back(Node("small-" + std::to_string(i), "inf1.6xlarge", 4, 16));
  }
  return nodes;
}

std::vector<std::string> NamesOf(const std::vector<kube::Node>& nodes) {
  std::vector<std::string> names;
  for (const auto& n : nodes) names.push_back(n.name);
  return names;
}

// Pods of mixed sizes arrive until the fleet is full; each is placed by both answers in
// lockstep. The best answer passes one node, the one prioritize scores 10 among the feasible
// answer's nodes, and the bind there takes the same ids; a pod that fits nowhere gets the same
// answer, byte for byte, from both.
TEST(FilterAnswerTest, TheBestAnswerPlacesEveryPodWherePrioritizeWouldOnTheSameIds) {
  const std::vector<kube::Node> fleet = MixedFleet();
  const std::vector<std::string> names = NamesOf(fleet);
  ASSERT_TRUE(ExtenderOptions{}.filter_best_only) << "best is the default";
  const std::vector<std::tuple<std::string, int>> sizes = {
      {"aws.amazon.com/neuron", 1},     {"aws.amazon.com/neuron", 2},
      {"aws.amazon.com/neuron", 4},     {"aws.amazon.com/neuron", 8},
      {"aws.amazon.com/neuroncore", 1}, {"aws.amazon.com/neuroncore", 2},
      {"aws.amazon.com/neuroncore", 3}, {"aws.amazon.com/neuroncore", 4}};
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Extender b(ExtenderOptions{});
    Extender f(testing::EveryVerdict());
    b.Start(fleet);
    f.Start(fleet);
    std::mt19937 rng(seed);
    int placed = 0;
    int refused = 0;
    for (int p = 0; p < 120; ++p) {
      const auto& [resource, count] = sizes[rng() % sizes.size()];
      const std::string name = "p" + std::to_string(p);
      const std::string uid = "uid-" + name;
      const std::string pod = testing::PodJson(name, uid, resource, count);
      // The scheduler's own filters may leave out some nodes: a random half or all of them.
      std::vector<std::string> offered;
      for (const auto& n : names) {
        if (rng() % 4 != 0 || p % 3 == 0) offered.push_back(n);
      }
      const json answer = b.Filter(pod, offered);
      const json every = f.Filter(pod, offered);
      if (every["NodeNames"].empty()) {
        EXPECT_EQ(answer, every) << name << ": a pod that fits nowhere is told the same";
        ++refused;
        continue;
      }
      ASSERT_EQ(answer["NodeNames"].size(), 1u) << name << ": " << answer.dump();
      EXPECT_TRUE(answer["FailedNodes"].empty() && answer["FailedAndUnresolvableNodes"].empty())
          << "the nodes left out carry no reasons: " << answer.dump();
      const std::string node = answer["NodeNames"][0];
      std::vector<std::string> fits;
      for (const auto& n : every["NodeNames"]) fits.push_back(n);
      const json scores = f.Prioritize(pod, fits);
      std::string ten;
      for (const auto& s : scores) {
        if (s["Score"] == 10) ten = s["Host"];
      }
      ASSERT_EQ(node, ten) << name << " (" << count << " " << resource << ")";
      ASSERT_EQ(b.Bind(name, uid, node), "");
      ASSERT_EQ(f.Bind(name, uid, node), "");
      EXPECT_EQ(b.writer.Bindings().at(uid).annotations, f.writer.Bindings().at(uid).annotations)
          << name << ": the same ids on " << node;
      ++placed;
    }
    EXPECT_GT(placed, 20);
    EXPECT_GT(refused, 0) << "the fleet filled up, so the refusal path ran too";
  }
}

// A node the DRA driver manages is never the pick, even where the policy would take it first,
// and is named with its reason when nothing else is offered.
TEST(FilterAnswerTest, ANodeTheDraDriverManagesIsNeverPassed) {
  std::vector<kube::Node> fleet = {Node("dra-node", "trn1.32xlarge", 16, 32),
                                   Node("plugin-node", "trn1.32xlarge", 16, 32)};
  fleet[0].labels[std::string(claims::kLabelNeuronManagement)] =
      std::string(claims::kNeuronManagementDra);
  Extender best(ExtenderOptions{});
  best.Start(fleet);
  const std::string pod = testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4);
  const json answer = best.Filter(pod, {"dra-node", "plugin-node"});
  EXPECT_EQ(answer["NodeNames"], json::array({"plugin-node"})) << answer.dump();
  const json alone = best.Filter(pod, {"dra-node"});
  EXPECT_TRUE(alone["NodeNames"].empty());
  EXPECT_THAT(alone["FailedNodes"]["dra-node"].get<std::string>(),
              ::testing::HasSubstr("managed by the DRA driver"));
}

}  // namespace
}  // namespace toposched::extender
