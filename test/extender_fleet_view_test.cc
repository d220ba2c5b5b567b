// The operators' views (fleet_view.cc): who holds each unit, what is still free per request
// class, and why a pending pod waits, in filter's own words, per node; and the query parser the
// routes read (net/url_query.h).
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "net/url_query.h"

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

}  // namespace
}  // namespace toposched::extender
