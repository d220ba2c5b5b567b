// The operators' views (fleet_view.cc): who holds each unit, what is still free per request
// class, and why a pending pod waits, in filter's own words, per node; the fleet history's sample,
// ring, JSON and gauges (fleet_history.h, fleet_sample.cc); and the query parser the routes read
// (net/url_query.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender/fleet_history.h"
#include "extender/fleet_reads.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "net/url_query.h"
#include "topology/catalog.h"
#include "topology/demand.h"

namespace toposched::extender {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class FleetViewTest : public ::testing::Test {
 protected:
  FleetViewTest()
      : service_(
            topology::Catalog::Embedded(), ExtenderOptions{}, writer_, metrics_,
            [] { return int64_t{1}; }, [] { return int64_t{1743574052764891534}; }) {
    std::vector<kube::Node> nodes;
    for (const auto& [name, type, devices, cores] :
         std::vector<std::tuple<std::string, std::string, int, int>>{
             {"inf-0", "inf2.48xlarge", 12, 24}, {"trn-0", "trn2.48xlarge", 16, 64}}) {
      auto node = kube::DecodeNode(testing::EksNodeJson(name, type, devices, cores));
      EXPECT_TRUE(node.ok()) << node.error();
      nodes.push_back(*node);
    }
    service_.ReplaceNodes(nodes);
    service_.ReplacePods({});
  }

  // Filter over both nodes, then bind where filter passed first; the watch then sees the pod.
  std::string Schedule(const std::string& name, int devices) {
    const std::string pod_json =
        testing::PodJson(name, name + "-uid", "aws.amazon.com/neuron", devices);
    auto padded = simdjson::padded_string(testing::NamesArgs(pod_json, {"inf-0", "trn-0"}));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    const json filtered = json::parse(service_.Filter(*args));
    if (filtered["NodeNames"].empty()) return "";
    const std::string node = filtered["NodeNames"][0];
    auto pod = kube::DecodePod(simdjson::padded_string(pod_json));
    const json bound =
        json::parse(service_.Bind(BindingArgs{pod->name, "default", pod->uid, node}));
    EXPECT_EQ(bound["Error"], "") << bound.dump();
    pod->node_name = node;
    const auto bindings = writer_.Bindings();  // a copy: keep it while reading it
    for (const auto& [k, v] : bindings.at(pod->uid).annotations) pod->annotations[k] = v;
    service_.UpsertPod(*pod);
    return node;
  }

  // A pod the watch shows pending (it never passed filter).
  void Pending(const std::string& name, int devices) {
    auto pod = kube::DecodePod(simdjson::padded_string(
        testing::PodJson(name, name + "-uid", "aws.amazon.com/neuron", devices)));
    ASSERT_TRUE(pod.ok()) << pod.error();
    service_.UpsertPod(*pod);
  }

  static const json& NodeNamed(const json& view, const std::string& name) {
    for (const auto& node : view["nodes"]) {
      if (node["name"] == name) return node;
    }
    ADD_FAILURE() << "no node " << name;
    static const json kNone;
    return kNone;
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  ExtenderService service_;
};

TEST_F(FleetViewTest, ShowsWhoHoldsEachUnitAndWhatIsStillFree) {
  const std::string node = Schedule("big", 12);  // 12 devices: all of inf2, never a trn set
  ASSERT_EQ(node, "inf-0");
  const json view = json::parse(service_.FleetView({}));
  EXPECT_EQ(view["apiVersion"], "toposched.io/v1");
  EXPECT_EQ(view["kind"], "FleetView");
  EXPECT_EQ(view["summary"]["nodes"], 2);
  EXPECT_EQ(view["summary"]["devices"], 28);
  const json& inf = NodeNamed(view, "inf-0");
  ASSERT_EQ(inf["holds"].size(), 1u);
  EXPECT_EQ(inf["holds"][0]["pod"], "default/big");
  EXPECT_EQ(inf["holds"][0]["state"], "committed");
  EXPECT_EQ(inf["holds"][0]["ids"].size(), 12u);
  EXPECT_EQ(inf["units"][5]["holds"], json::array({0}));
  EXPECT_EQ(inf["units"][5]["cores_used"], 2);
  EXPECT_TRUE(inf["free"]["devices"].empty());
  EXPECT_EQ(inf["free_sets"]["1 device"], 0);
  const json& trn = NodeNamed(view, "trn-0");
  EXPECT_TRUE(trn["holds"].empty());
  EXPECT_EQ(trn["free_sets"]["4 devices"], 4);
  EXPECT_EQ(trn["free_sets"]["16 devices"], 1);
  EXPECT_EQ(view["instance_types"]["trn2.48xlarge"]["rule"], "aligned");
  // Filters: one node, one type.
  FleetQuery one_node;
  one_node.node = "trn-0";
  EXPECT_EQ(json::parse(service_.FleetView(one_node))["nodes"].size(), 1u);
  FleetQuery one_type;
  one_type.instance_type = "inf2.48xlarge";
  EXPECT_EQ(json::parse(service_.FleetView(one_type))["nodes"][0]["name"], "inf-0");
}

TEST_F(FleetViewTest, SaysWhyAPendingPodWaitsPerNodeInFiltersWords) {
  ASSERT_EQ(Schedule("big", 12), "inf-0");
  ASSERT_EQ(Schedule("half", 8), "trn-0");
  ASSERT_EQ(Schedule("row", 4), "trn-0");
  Pending("waits", 4);  // trn-0 has one aligned row of 4 left
  Pending("too-big", 8);
  const json view = json::parse(service_.FleetView({}));
  ASSERT_EQ(view["pending"].size(), 2u);
  const json& big = view["pending"][0];
  EXPECT_EQ(big["pod"], "default/too-big");
  EXPECT_EQ(big["why"]["too-few-free"]["nodes"], 2) << big.dump();
  EXPECT_THAT(big["why"]["too-few-free"]["example"]["reason"].get<std::string>(),
              HasSubstr("free"));
  const json& waits = view["pending"][1];
  EXPECT_EQ(waits["why"]["fits"]["nodes"], 1) << waits.dump();

  auto why = service_.WhyPending("default/too-big");
  ASSERT_TRUE(why.ok()) << why.error();
  const json answer = json::parse(*why);
  EXPECT_EQ(answer["kind"], "PodPlacement");
  EXPECT_EQ(answer["nodes_that_fit"], 0);
  ASSERT_EQ(answer["nodes"].size(), 2u);
  EXPECT_EQ(answer["nodes"][1]["node"], "trn-0");
  EXPECT_EQ(answer["nodes"][1]["kind"], "too-few-free");

  // A bound pod: where it is, not why.
  const json placed = json::parse(*service_.WhyPending("default/row"));
  EXPECT_EQ(placed["node"], "trn-0");
  EXPECT_EQ(placed["allocation"][0]["ids"].size(), 4u);
  EXPECT_FALSE(service_.WhyPending("default/nobody").ok());
  EXPECT_FALSE(service_.WhyPending("nobody").ok());
}

TEST_F(FleetViewTest, FreeDevicesWithoutALegalSetAreNamedAsSuch) {
  // inf2's contiguous rule: 1-device pods on 0, 2, 4, ... leave 6 free devices and no run of 2.
  ASSERT_EQ(Schedule("whole-trn", 16), "trn-0");
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Schedule("one-" + std::to_string(i), 1), "inf-0");
  const json view = json::parse(service_.FleetView({}));
  EXPECT_EQ(NodeNamed(view, "inf-0")["holds"].size(), 12u);
  // Free three apart: release pods by deleting them.
  for (int i : {1, 2, 4, 5, 7, 8}) {
    auto pod = kube::DecodePod(simdjson::padded_string(
        testing::PodJson("one-" + std::to_string(i), "one-" + std::to_string(i) + "-uid",
                         "aws.amazon.com/neuron", 1)));
    service_.DeletePod(*pod);
  }
  Pending("three", 3);
  const json answer = json::parse(*service_.WhyPending("default/three"));
  EXPECT_EQ(answer["nodes"][0]["node"], "inf-0");
  EXPECT_EQ(answer["nodes"][0]["kind"], "no-legal-set") << answer.dump();
  EXPECT_THAT(answer["nodes"][0]["reason"].get<std::string>(), HasSubstr("contiguous"));
  // 3 devices is never a legal set on trn2's torus (rows of 4), free or not.
  EXPECT_EQ(answer["nodes"][1]["kind"], "never-on-this-type");
  // The history counts the pod under its closest kind: free units, no legal set.
  const auto sample = service_.SampleFleet(7);
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->pending_by_kind[WhyKindIndex("no-legal-set")], 1);
  EXPECT_EQ(sample->pending_pods, 1);
}

const TypeSample& TypeNamed(const FleetSample& sample, const std::string& name) {
  for (const auto& t : sample.types) {
    if (t.instance_type == name) return t;
  }
  ADD_FAILURE() << "no type " << name;
  static const TypeSample kNone;
  return kNone;
}

std::optional<int64_t> FreeSets(const FleetSample& sample, const TypeSample& type,
                                const std::string& request) {
  for (size_t c = 0; c < sample.classes.size() && c < type.free_sets.size(); ++c) {
    if (sample.classes[c].request == request) return type.free_sets[c];
  }
  return std::nullopt;
}

TEST_F(FleetViewTest, HistorySampleAddsUpPerTypeAndCountsEachPendingPodOnce) {
  ASSERT_EQ(Schedule("big", 12), "inf-0");
  ASSERT_EQ(Schedule("half", 8), "trn-0");
  ASSERT_EQ(Schedule("row", 4), "trn-0");
  Pending("waits", 4);      // trn-0's last row of 4
  Pending("waits-too", 4);  // the same requests: one answer for both
  Pending("too-big", 8);
  const auto sample = service_.SampleFleet(1743574052);
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->time, 1743574052);
  EXPECT_EQ(sample->nodes, 2);
  EXPECT_EQ(sample->devices, 28);
  EXPECT_DOUBLE_EQ(sample->allocated_share, 24.0 / 28.0);
  EXPECT_EQ(sample->pending_pods, 3);
  EXPECT_EQ(sample->pending_by_kind[WhyKindIndex("fits")], 2);
  EXPECT_EQ(sample->pending_by_kind[WhyKindIndex("too-few-free")], 1);
  EXPECT_EQ(sample->pending_unclassified, 0);
  ASSERT_EQ(sample->types.size(), 2u);
  const TypeSample& inf = TypeNamed(*sample, "inf2.48xlarge");
  EXPECT_EQ(inf.nodes, 1);
  EXPECT_DOUBLE_EQ(inf.allocated_devices, 12.0);
  EXPECT_EQ(FreeSets(*sample, inf, "1 device"), 0);
  const TypeSample& trn = TypeNamed(*sample, "trn2.48xlarge");
  EXPECT_EQ(trn.devices, 16);
  EXPECT_EQ(FreeSets(*sample, trn, "4 devices"), 1);
  EXPECT_EQ(FreeSets(*sample, trn, "16 devices"), 0);
  // The fleet's figures are /v1/fleet's.
  const json view = json::parse(service_.FleetView({}));
  EXPECT_DOUBLE_EQ(sample->allocated_share, view["summary"]["allocated_share"].get<double>());
  double fragmentation = 0;
  for (const auto& node : view["nodes"]) fragmentation += node["fragmentation"].get<double>();
  EXPECT_NEAR(sample->fragmentation, fragmentation, 1e-9);
  for (const auto& c : view["classes"]) {
    const auto it = std::find_if(sample->classes.begin(), sample->classes.end(),
                                 [&](const ClassSample& s) { return s.request == c["request"]; });
    ASSERT_NE(it, sample->classes.end()) << c.dump();
    EXPECT_EQ(it->free_sets, c["free_sets"]) << c.dump();
  }
}

TEST_F(FleetViewTest, MetricsFollowTheNewestSampleAndDropWhatLeftTheFleet) {
  ASSERT_EQ(Schedule("big", 12), "inf-0");
  ASSERT_EQ(Schedule("row", 4), "trn-0");
  Pending("too-big", 20);
  auto sample = service_.SampleFleet(100);
  ASSERT_TRUE(sample.has_value());
  Metrics metrics;
  metrics.SetFleet(*sample);
  std::string text = metrics.Serialize();
  EXPECT_THAT(text, HasSubstr("toposched_fleet_sample_timestamp_seconds 100"));
  EXPECT_THAT(text,
              HasSubstr("toposched_fleet_free_sets{instance_type=\"trn2.48xlarge\",request=\"4 "
                        "devices\"} 3"));
  EXPECT_THAT(text,
              HasSubstr("toposched_fleet_allocated_devices{instance_type=\"trn2.48xlarge\"} 4"));
  EXPECT_THAT(text, HasSubstr("toposched_fleet_pending_pods{reason=\"never-on-this-type\"} 1"));
  EXPECT_THAT(text, HasSubstr("toposched_fleet_pending_pods{reason=\"no-legal-set\"} 0"));
  // The trn2 node leaves: its series go, the inf2 node's stay.
  sample->types.erase(
      std::remove_if(sample->types.begin(), sample->types.end(),
                     [](const TypeSample& t) { return t.instance_type == "trn2.48xlarge"; }),
      sample->types.end());
  metrics.SetFleet(*sample);
  text = metrics.Serialize();
  EXPECT_THAT(text, Not(HasSubstr("instance_type=\"trn2.48xlarge\"")));
  EXPECT_THAT(text, HasSubstr("toposched_fleet_devices{instance_type=\"inf2.48xlarge\"} 12"));
}

FleetSample At(int64_t time) {
  FleetSample s;
  s.time = time;
  return s;
}

TEST(FleetHistoryTest, KeepsTheNewestSamplesUpToItsCapacity) {
  EXPECT_EQ(FleetHistory::CapacityFor(std::chrono::hours(6), std::chrono::seconds(30)), 720u);
  EXPECT_EQ(FleetHistory::CapacityFor(std::chrono::seconds(1), std::chrono::seconds(30)), 1u);
  FleetHistory history(3);
  EXPECT_FALSE(history.Latest().has_value());
  for (int64_t t = 1; t <= 5; ++t) history.Add(At(t));
  const auto kept = history.Snapshot();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.front().time, 3);
  EXPECT_EQ(kept.back().time, 5);
  EXPECT_EQ(history.Latest()->time, 5);
}

TEST(FleetHistoryTest, JsonNamesEveryFieldAndOnlyTheClassesATypeCanServe) {
  FleetSample s = At(42);
  s.nodes = 1;
  s.devices = 16;
  s.allocated_share = 0.25;
  s.pending_pods = 2;
  s.pending_by_kind[WhyKindIndex("no-legal-set")] = 2;
  s.classes = {{"4 devices", 0.5, 3, 0.1}, {"3 devices", 0.5, 0, 0}};
  s.types = {{"trn2.48xlarge", 1, 16, 4.0, 0.5, {3, std::nullopt}}};
  const json out =
      json::parse(HistoryJson(std::vector<FleetSample>{s}, std::chrono::seconds(30), 720));
  EXPECT_EQ(out["kind"], "FleetHistory");
  EXPECT_EQ(out["interval_seconds"], 30.0);
  EXPECT_EQ(out["capacity"], 720);
  EXPECT_EQ(out["kinds"].size(), kWhyKinds.size());
  const json& sample = out["samples"][0];
  EXPECT_EQ(sample["time"], 42);
  EXPECT_EQ(sample["pending_by_kind"]["no-legal-set"], 2);
  EXPECT_EQ(sample["pending_by_kind"]["fits"], 0);
  EXPECT_EQ(sample["classes"][0]["request"], "4 devices");
  EXPECT_EQ(sample["types"][0]["free_sets"], json({{"4 devices", 3}}));
}

TEST(FleetHistoryTest, TheSamplerSamplesAtOnceAndStopsWithoutWaitingOutItsInterval) {
  FleetHistory history(10);
  std::promise<void> sampled;
  std::atomic<int> calls{0};
  {
    FleetSampler sampler(history, std::chrono::hours(1), [&]() -> std::optional<FleetSample> {
      if (calls++ == 0) sampled.set_value();
      return At(7);
    });
    sampled.get_future().wait();
  }  // an hour's interval: the destructor returns only because it wakes the thread
  EXPECT_EQ(calls.load(), 1);
  ASSERT_EQ(history.Snapshot().size(), 1u);
  EXPECT_EQ(history.Snapshot()[0].time, 7);
}

TEST(FleetHistoryTest, BeforeTheFirstSampleTheSamplerTriesAgainWithoutWaitingAnInterval) {
  FleetHistory history(10);
  std::promise<void> sampled;
  std::atomic<int> calls{0};
  {
    FleetSampler sampler(history, std::chrono::hours(1), [&]() -> std::optional<FleetSample> {
      if (calls++ == 0) return std::nullopt;  // not ready yet
      if (calls == 2) sampled.set_value();
      return At(9);
    });
    // An hour's interval: only the retry (within a second) gets here; bounded so that a broken
    // sampler fails rather than hangs.
    ASSERT_EQ(sampled.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  }
  ASSERT_EQ(history.Snapshot().size(), 1u);
  EXPECT_EQ(history.Snapshot()[0].time, 9);
}

// The page draws the same state: every core a pod holds carries its name, on the right node;
// names are escaped; ?pod= pales every other pod; the pending pod is listed with its kinds.
TEST_F(FleetViewTest, PageDrawsEachPodOnItsUnitsAndThePendingPodsReasons) {
  ASSERT_EQ(Schedule("big", 12), "inf-0");
  ASSERT_EQ(Schedule("row", 4), "trn-0");
  Pending("too-big", 16);
  const std::string page = service_.FleetPage({}, "");
  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"))
      << "the page must load nothing from elsewhere";
  EXPECT_EQ(page.find("src="), std::string::npos);
  // inf2.48xlarge: 12 devices of 2 cores, all big's; drawn as one run per device.
  EXPECT_THAT(page, HasSubstr("data-node=\"inf-0\""));
  EXPECT_THAT(page,
              HasSubstr("data-device=\"11\" data-cores=\"22-23\" data-owner=\"default/big\""));
  // trn2.48xlarge at LNC 2: 4 cores per device; row holds an aligned row of 4 devices.
  int row_devices = 0;
  for (size_t at = page.find("data-owner=\"default/row\""); at != std::string::npos;
       at = page.find("data-owner=\"default/row\"", at + 1)) {
    ++row_devices;
  }
  EXPECT_EQ(row_devices, 4);
  EXPECT_THAT(page, HasSubstr("href=\"fleet?pod=default/big\""));
  EXPECT_THAT(page, HasSubstr("<tr class=\"pending\" data-pod=\"default/too-big\">"));
  EXPECT_THAT(page, HasSubstr("<div data-kind=\"too-few-free\">"));

  const std::string focus = service_.FleetPage({}, "default/row");
  EXPECT_THAT(focus, HasSubstr("data-focus=\"default/row\"><b>default/row</b> on <b>trn-0</b>"));
  const size_t big_rect = focus.find("data-owner=\"default/big\"");
  ASSERT_NE(big_rect, std::string::npos);
  EXPECT_THAT(focus.substr(big_rect, 200), HasSubstr("fill=\"#cfcfcf\""));
  const size_t row_rect = focus.find("data-owner=\"default/row\"");
  ASSERT_NE(row_rect, std::string::npos);
  EXPECT_THAT(focus.substr(row_rect, 200), Not(HasSubstr("fill=\"#cfcfcf\"")));

  FleetQuery one_type;
  one_type.instance_type = "trn2.48xlarge";
  const std::string trn_only = service_.FleetPage(one_type, "");
  EXPECT_EQ(trn_only.find("data-node=\"inf-0\""), std::string::npos);
  EXPECT_THAT(trn_only, HasSubstr("<option selected>trn2.48xlarge</option>"));

  // Pages of nodes: one node per page here.
  FleetQuery paged;
  paged.max_nodes = 1;
  paged.first_node = 1;
  const std::string second = service_.FleetPage(paged, "");
  EXPECT_EQ(second.find("data-node=\"inf-0\""), std::string::npos);
  EXPECT_THAT(second, HasSubstr("data-node=\"trn-0\""));
  EXPECT_THAT(second,
              HasSubstr("nodes 2-2 of 2 <a href=\"fleet?from=0&amp;count=1\">previous</a>"));
}

TEST_F(FleetViewTest, PageEscapesWhatItDoesNotWrite) {
  auto pod = kube::DecodePod(
      simdjson::padded_string(testing::PodJson("x", "x-uid", "aws.amazon.com/neuron", 1)));
  ASSERT_TRUE(pod.ok()) << pod.error();
  pod->name = "<script>alert(1)</script>";
  service_.UpsertPod(*pod);
  const std::string page = service_.FleetPage({}, "a\"><script>");
  EXPECT_EQ(page.find("<script>alert"), std::string::npos);
  EXPECT_EQ(page.find("\"><script>"), std::string::npos);
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

TEST(UrlQueryTest, DecodesPathAndParameters) {
  auto q = net::ParseTarget("/v1/why?pod=team-a%2Ftrain+0&x&pod=b%2Fc#frag");
  ASSERT_TRUE(q.ok()) << q.error();
  EXPECT_EQ(q->path, "/v1/why");
  EXPECT_EQ(q->Get("pod"), "b/c");  // the last one given
  EXPECT_EQ(q->Get("x"), "");
  EXPECT_EQ(q->Get("y"), std::nullopt);
  ASSERT_EQ(q->params.size(), 3u);
  EXPECT_EQ(q->params[0].second, "team-a/train 0");
  // Encoding is the inverse of decoding.
  const std::string odd = "a b&c=d%e/\xc3\xa9";
  auto back = net::ParseTarget("/x?v=" + net::UrlEncode(odd));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->Get("v"), odd);
}

TEST(UrlQueryTest, RefusesBadEscapesControlBytesAndFloods) {
  EXPECT_THAT(net::ParseTarget("/v1/why?pod=%zz").error(), HasSubstr("percent escape"));
  EXPECT_THAT(net::ParseTarget("/v1/why?pod=%4").error(), HasSubstr("percent escape"));
  EXPECT_THAT(net::ParseTarget("/v1/why?pod=a%00b").error(), HasSubstr("NUL"));
  EXPECT_THAT(net::ParseTarget("/v1/\x01").error(), HasSubstr("control byte"));
  std::string flood = "/v1/fleet?";
  for (int i = 0; i < 40; ++i) flood += "a=1&";
  EXPECT_THAT(net::ParseTarget(flood).error(), HasSubstr("more than 32"));
}

// The views' memo (NodeFreeMemo) answers each node as FreeSetsPerClass and ExpectedFragmentation
// would on their own: nodes of the same type and usage share one answer, others never do.
TEST(NodeFreeMemoTest, AnswersEachNodeAsTheDirectComputation) {
  const auto& catalog = topology::Catalog::Embedded();
  const auto trn1 = topology::NodeShape::Make(*catalog.Find("trn1.32xlarge"));
  const auto inf2 = topology::NodeShape::Make(*catalog.Find("inf2.48xlarge"));
  ASSERT_TRUE(trn1.ok() && inf2.ok());
  topology::SlotCosts costs;
  costs.classes = {{topology::Unit::kDevice, 1},
                   {topology::Unit::kDevice, 4},
                   {topology::Unit::kDevice, 12},
                   {topology::Unit::kCore, 2}};
  costs.shares = {0.4, 0.3, 0.2, 0.1};
  costs.per_slot = {1, 1, 1, 1};
  struct Node {
    topology::NodeShape shape;
    topology::NodeUsage usage;
  };
  std::vector<Node> nodes;
  for (int i = 0; i < 12; ++i) {
    Node& n = nodes.emplace_back(Node{i % 2 == 0 ? *trn1 : *inf2, {}});
    // Three usages per type, each on two nodes: empty, device 0, devices 0-3 plus a core.
    if (i % 6 >= 2) {
      ASSERT_TRUE(n.usage.Take(n.shape, topology::Unit::kDevice, {0}));
    }
    if (i % 6 >= 4) {
      ASSERT_TRUE(n.usage.Take(n.shape, topology::Unit::kDevice, {1, 2, 3}));
      ASSERT_TRUE(n.usage.Take(n.shape, topology::Unit::kCore, {9}));
    }
  }
  NodeFreeMemo memo(costs);
  for (const Node& n : nodes) {
    const NodeFreeMemo::Answer& answer = memo.Of(n.shape, n.usage);
    EXPECT_EQ(answer.sets, FreeSetsPerClass(n.shape, n.usage, costs));
    const double direct = topology::ExpectedFragmentation(n.shape, n.usage, costs);
    if (std::isnan(direct)) {
      EXPECT_TRUE(std::isnan(answer.fragmentation));
    } else {
      EXPECT_EQ(answer.fragmentation, direct);
    }
  }
  // Asked again, the same answer object: worked out once.
  EXPECT_EQ(&memo.Of(nodes[0].shape, nodes[0].usage), &memo.Of(nodes[6].shape, nodes[6].usage));
  EXPECT_NE(&memo.Of(nodes[0].shape, nodes[0].usage), &memo.Of(nodes[2].shape, nodes[2].usage));
}

}  // namespace
}  // namespace toposched::extender
