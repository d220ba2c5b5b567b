// `kubectl neuron` (src/kubectl, cli/kubectl_neuron_command.cc) against the fake API server with a
// small mixed fleet (inf2.48xlarge ring, trn1.32xlarge and trn2.48xlarge tori, an inf1.24xlarge
// chain with a long node name), bound pods recorded by AWS_NEURON_IDS and one pending pod: golden
// text for nodes, pods and why (each line within 80 columns), the JSON parsed back, the extender's
// views read over TLS and garbage from it refused, and the binary run as a kubectl plugin.
//
// The goldens are test/support/testdata/kubectl_neuron/*.txt; TOPOSCHED_UPDATE_GOLDEN=1 rewrites
// them (then read the diff).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "extender_fixtures.h"
#include "kubectl/plugin.h"
#include "kubectl/render.h"
#include "kubectl/sources.h"
#include "kubectl/views.h"
#include "support/build_paths.h"
#include "support/fake_apiserver.h"
#include "support/pods.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace toposched::kubectl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kInf1Node = "ip-10-0-1-23.us-west-2.compute.internal";

std::string GoldenPath(const std::string& name) {
  return toposched::testing::SourcePath("test/support/testdata/kubectl_neuron/" + name);
}

// Compares with the golden file, or rewrites it under TOPOSCHED_UPDATE_GOLDEN=1.
void ExpectGolden(const std::string& name, const std::string& text) {
  const std::string path = GoldenPath(name);
  if (const char* update = std::getenv("TOPOSCHED_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path) << text;
    return;
  }
  EXPECT_EQ(text, testing::ReadWholeFile(path)) << "golden " << path;
}

void ExpectFitsTerminal(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), kTerminalWidth) << "too wide: '" << line << "'";
  }
}

std::string BoundPod(const std::string& ns, const std::string& name, const std::string& node,
                     const std::string& resource, int count, const std::string& ids) {
  return testing::PodJson(testing::PodJsonSpec{.name = name,
                                               .ns = ns,
                                               .resource = resource,
                                               .count = count,
                                               .node = node,
                                               .phase = "Running",
                                               .annotations = {{"AWS_NEURON_IDS", ids}}});
}

class KubectlNeuronTest : public ::testing::Test {
 protected:
  KubectlNeuronTest() {
    api_.UpsertNode(testing::EksNodeJson("inf2-a", "inf2.48xlarge", 12, 24, 1));
    api_.UpsertNode(testing::EksNodeJson("trn1-a", "trn1.32xlarge", 16, 32, 1));
    api_.UpsertNode(testing::EksNodeJson("trn2-a", "trn2.48xlarge", 16, 64, 1));
    api_.UpsertNode(testing::EksNodeJson(kInf1Node, "inf1.24xlarge", 16, 64, 1));
    api_.UpsertNode(testing::EksNodeJson("cpu-a", "m5.large", 0, 0, 1));
    const std::string dev = "aws.amazon.com/neuron";
    api_.UpsertPod(BoundPod("default", "llama-a", "inf2-a", dev, 4, "0,1,2,3"));
    api_.UpsertPod(BoundPod("default", "llama-b", "inf2-a", dev, 4, "6,7,8,9"));
    api_.UpsertPod(BoundPod("default", "train-row", "trn1-a", dev, 4, "0,1,2,3"));
    api_.UpsertPod(BoundPod("team-b", "train-row2", "trn1-a", dev, 4, "8,9,10,11"));
    api_.UpsertPod(BoundPod("default", "trn2-quad", "trn2-a", dev, 4, "0,1,2,3"));
    api_.UpsertPod(BoundPod("team-b", "embed", "trn2-a", "aws.amazon.com/neuroncore", 2, "32,33"));
    api_.UpsertPod(BoundPod("default", "bert-x", kInf1Node, dev, 4, "2,3,4,5"));
    api_.UpsertPod(BoundPod("default", "bert-y", kInf1Node, dev, 4, "10,11,12,13"));
    api_.UpsertPod(testing::PodJson(testing::PodJsonSpec{.name = "wait-8", .count = 8}));
    api_.UpsertPod(testing::PodJson(testing::PodJsonSpec{.name = "cpu-only", .count = 0}));
    kubeconfig_ = api_.WriteKubeconfig(dir_ / "kubeconfig");
    ca_ = dir_.WriteFile("ca.pem", api_.ca_pem());
    cert_ = dir_.WriteFile("client.pem", api_.client_cert_pem());
    key_ = dir_.WriteFile("client-key.pem", api_.client_key_pem());
  }

  PluginOptions Options(const std::string& command) const {
    PluginOptions o;
    o.command = command;
    o.kubeconfig = kubeconfig_;
    return o;
  }

  // The fake API server stands in for the extender: it answers the paths it is told to.
  PluginOptions ViaExtender(const std::string& command) const {
    PluginOptions o;
    o.command = command;
    o.kubeconfig = kubeconfig_;
    o.extender = {api_.url(), ca_, cert_, key_, std::chrono::seconds(10)};
    return o;
  }

  std::string Run(const PluginOptions& o) const {
    auto out = RunPlugin(o);
    EXPECT_TRUE(out.ok()) << out.error();
    return out.ok() ? *out : "";
  }

  Cluster ReadAll() const {
    auto client = kube::ApiClient::FromKubeconfig(kubeconfig_);
    EXPECT_TRUE(client.ok()) << client.error();
    auto cluster = ReadCluster(**client);
    EXPECT_TRUE(cluster.ok()) << cluster.error();
    return *cluster;
  }

  testing::FakeApiServer api_;
  testing::TempDir dir_;
  std::string kubeconfig_;
  std::string ca_;
  std::string cert_;
  std::string key_;
};

TEST_F(KubectlNeuronTest, NodesDrawsEachTopologyWithAKeyWithin80Columns) {
  const std::string out = Run(Options("nodes"));
  ExpectGolden("nodes.txt", out);
  ExpectFitsTerminal(out);
  EXPECT_THAT(out, HasSubstr("AAAA..BBBB..  ring"));
  EXPECT_THAT(out, HasSubstr("AAAA  4x4 torus"));
  EXPECT_THAT(out, HasSubstr("..AAAA....BBBB..  chain"));
  EXPECT_THAT(out, HasSubstr("b..."));     // trn2: the core pod holds part of device 8
  EXPECT_THAT(out, HasSubstr(kInf1Node));  // never cut
  EXPECT_THAT(out, Not(HasSubstr("cpu-a")));
  EXPECT_THAT(out, HasSubstr("pending: default/wait-8 asks for 8 devices (main)"));
}

// A failed device (the device plugin's toposched.io/unhealthy-devices on the node) is drawn 'x'
// when no pod holds it, keeps its holder's letter when one does, and is named under the node.
TEST_F(KubectlNeuronTest, NodesMarkFailedDevices) {
  json node = json::parse(testing::EksNodeJson("inf2-a", "inf2.48xlarge", 12, 24, 1));
  node["metadata"]["annotations"]["toposched.io/unhealthy-devices"] = "2,5";
  api_.UpsertNode(node.dump());
  const std::string out = Run(Options("nodes"));
  EXPECT_THAT(out, HasSubstr("AAAA.xBBBB..  ring")) << out;
  EXPECT_THAT(out, HasSubstr("out of service (failed): devices 2,5")) << out;
  PluginOptions o = Options("nodes");
  o.json = true;
  const json nodes = json::parse(Run(o));
  EXPECT_EQ(nodes["nodes"][0]["out_of_service"], json::array({2, 5}));
  EXPECT_FALSE(nodes["nodes"][1].contains("out_of_service"));
}

TEST_F(KubectlNeuronTest, PodsListsWhoHoldsWhatPerNamespace) {
  PluginOptions all = Options("pods");
  all.all_namespaces = true;
  const std::string out = Run(all);
  ExpectGolden("pods.txt", out);
  ExpectFitsTerminal(out);
  EXPECT_THAT(out, Not(HasSubstr("cpu-only")));
  PluginOptions team = Options("pods");
  team.ns = "team-b";
  const std::string team_out = Run(team);
  EXPECT_THAT(team_out, HasSubstr("team-b/embed"));
  EXPECT_THAT(team_out, HasSubstr("cores 32-33"));
  EXPECT_THAT(team_out, Not(HasSubstr("default/")));
  // Without -n: the kubeconfig context's namespace (the fake's is "ml", where no pod runs).
  PluginOptions ml = Options("pods");
  ml.ns = "ml";
  EXPECT_EQ(Run(Options("pods")), Run(ml));
  EXPECT_THAT(Run(Options("pods")), HasSubstr("(no pod asks for Neuron devices or cores)"));
}

TEST_F(KubectlNeuronTest, WhySaysPerNodeWhyAPendingPodWaits) {
  PluginOptions o = Options("why");
  o.ns = "default";
  o.pod = "wait-8";
  const std::string out = Run(o);
  ExpectGolden("why.txt", out);
  ExpectFitsTerminal(out);
  EXPECT_THAT(out, HasSubstr("0 of 4 Neuron nodes fit it now"));
  EXPECT_THAT(out, HasSubstr("too-few-free"));
  EXPECT_THAT(out, HasSubstr("no-legal-set"));
  // A bound pod: where it is.
  o.pod = "team-b/embed";
  EXPECT_THAT(Run(o), HasSubstr("holds 2 cores 32-33 on node trn2-a"));
  o.pod = "default/nobody";
  auto missing = RunPlugin(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr("pod default/nobody not found"));
  o.pod = "cpu-only";
  missing = RunPlugin(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr("asks for no Neuron resource"));
}

TEST_F(KubectlNeuronTest, JsonOutputIsVersionedAndParsesBack) {
  PluginOptions o = Options("nodes");
  o.json = true;
  const json nodes = json::parse(Run(o));
  EXPECT_EQ(nodes["apiVersion"], "toposched.io/v1");
  EXPECT_EQ(nodes["kind"], "NeuronNodeList");
  EXPECT_EQ(nodes["source"], "api-server");
  ASSERT_EQ(nodes["nodes"].size(), 4u);
  const json& inf2 = nodes["nodes"][0];
  EXPECT_EQ(inf2["name"], "inf2-a");
  EXPECT_EQ(inf2["shape"], "ring");
  EXPECT_EQ(inf2["devices_used"], 8);
  EXPECT_EQ(inf2["cells"][0], "AAAA..BBBB..");
  EXPECT_EQ(inf2["holders"][1]["pod"], "default/llama-b");
  EXPECT_EQ(inf2["holders"][1]["ids"], json::array({6, 7, 8, 9}));
  EXPECT_EQ(nodes["pending"], json::array({"default/wait-8"}));
  EXPECT_EQ(nodes["summary"]["devices"], 60);
  EXPECT_EQ(nodes["summary"]["classes"][0], json({{"request", "1 device"}, {"free_sets", 31}}));

  o.command = "pods";
  o.all_namespaces = true;
  const json pods = json::parse(Run(o));
  EXPECT_EQ(pods["kind"], "NeuronPodList");
  ASSERT_EQ(pods["pods"].size(), 9u);
  EXPECT_EQ(pods["pods"][0]["name"], "bert-x");
  EXPECT_EQ(pods["pods"][0]["allocation"][0]["ids"], json::array({2, 3, 4, 5}));

  o.command = "why";
  o.pod = "default/wait-8";
  const json why = json::parse(Run(o));
  EXPECT_EQ(why["kind"], "NeuronPodWhy");
  EXPECT_EQ(why["nodes_that_fit"], 0);
  ASSERT_EQ(why["nodes"].size(), 4u);
  for (const json& node : why["nodes"]) {
    EXPECT_FALSE(node["reason"].get<std::string>().empty()) << node.dump();
  }
}

TEST_F(KubectlNeuronTest, ReadsTheExtendersViewsOverTls) {
  const Cluster cluster = ReadAll();
  api_.ServeJson("/v1/fleet", LocalFleetJson(cluster, topology::Catalog::Embedded()));
  // The same state drawn from the extender's answer as from the records.
  EXPECT_EQ(Run(ViaExtender("nodes")), Run(Options("nodes")));
  // `pods` adds the state of a hold the extender has not committed yet (a bind in flight).
  std::string fleet = LocalFleetJson(cluster, topology::Catalog::Embedded());
  const size_t at = fleet.find("\"committed\"", fleet.find("default/llama-b"));
  ASSERT_NE(at, std::string::npos);
  fleet.replace(at, 11, "\"reserved\"");
  api_.ServeJson("/v1/fleet", fleet);
  PluginOptions pods = ViaExtender("pods");
  pods.ns = "default";
  const std::string pods_out = Run(pods);
  ExpectFitsTerminal(pods_out);
  EXPECT_THAT(pods_out, HasSubstr("default/llama-b           inf2-a           4 devices   6-9"
                                  "           Running\n    the extender's hold: reserved\n"));
  api_.ServeJson("/v1/why", R"({"apiVersion":"toposched.io/v1","kind":"PodPlacement",
      "pod":"default/wait-8","uid":"u","requests":[{"container":"main","init":false,
      "request":"8 devices"}],"node":"trn1-a","state":"reserved","allocation":[
      {"container":"main","unit":"device","ids":[8,9,10,11,12,13,14,15]}]})");
  PluginOptions why = ViaExtender("why");
  why.ns = "default";
  why.pod = "wait-8";
  EXPECT_THAT(Run(why), HasSubstr("holds 8 devices 8-15 on node trn1-a (main: reserved)"));
  why.ns.clear();  // a bare name: the kubeconfig context's namespace, ml
  EXPECT_TRUE(RunPlugin(why).ok());
  // The requests the extender got: the pod's key, escaped.
  std::vector<std::string> asked;
  for (const auto& r : api_.requests()) {
    if (r.path == "/v1/why") asked.push_back(r.target);
  }
  EXPECT_EQ(asked,
            (std::vector<std::string>{"/v1/why?pod=default%2Fwait-8", "/v1/why?pod=ml%2Fwait-8"}));
}

TEST_F(KubectlNeuronTest, RefusesGarbageFromTheExtenderWithAClearMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json at all", "not its view"},
      {R"({"apiVersion":"toposched.io/v1","kind":"PodPlacement"})", "expected \"FleetView\""},
      {R"({"apiVersion":"v2","kind":"FleetView"})", "expected \"toposched.io/v1\""},
      {R"({"kind":"FleetView","nodes":[]})", "apiVersion and kind are missing"},
      {R"({"apiVersion":"toposched.io/v1","kind":"FleetView","nodes":[{"name":"n",
         "devices":2,"holds":[],"units":[{"device":0,"holds":[3]}]}]})",
       "nodes[0]: device 0 names hold 3"},
      {R"({"apiVersion":"toposched.io/v1","kind":"FleetView","nodes":[{"name":"n",
         "devices":2,"holds":[{"pod":"p","ids":[-1]}]}]})",
       "nodes[0].holds[0].ids[0]"},
      {R"({"apiVersion":"toposched.io/v1","kind":"FleetView","nodes":{}})", "nodes"},
  };
  for (const auto& [body, message] : cases) {
    api_.ServeJson("/v1/fleet", body);
    auto out = RunPlugin(ViaExtender("nodes"));
    ASSERT_FALSE(out.ok()) << body;
    EXPECT_THAT(out.error(), HasSubstr(message)) << body;
    EXPECT_THAT(out.error(), HasSubstr("extender")) << body;
  }
  api_.ServeJson("/v1/fleet", "busy", 503);
  auto busy = RunPlugin(ViaExtender("nodes"));
  ASSERT_FALSE(busy.ok());
  EXPECT_THAT(busy.error(), HasSubstr("HTTP 503: busy"));
  // No client certificate: the server refuses (the fake wants a certificate or a token).
  PluginOptions anonymous = ViaExtender("nodes");
  anonymous.extender.cert_file.clear();
  anonymous.extender.key_file.clear();
  auto refused = RunPlugin(anonymous);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("HTTP 401"));
  PluginOptions plain = ViaExtender("nodes");
  plain.extender.url = "http://127.0.0.1:1";
  EXPECT_THAT(RunPlugin(plain).error(), HasSubstr("need an https:// URL"));
  plain.extender = {"http://127.0.0.1:1", "", "", "", std::chrono::seconds(5)};
  EXPECT_THAT(RunPlugin(plain).error(), HasSubstr("extender http://127.0.0.1:1/v1/fleet"));
  plain.extender.url = "ftp://x";
  EXPECT_THAT(RunPlugin(plain).error(), HasSubstr("expected an http:// or https:// URL"));
}

TEST_F(KubectlNeuronTest, SaysWhichApiServerItCannotReach) {
  testing::KubeconfigOptions options;
  const std::string path = api_.WriteKubeconfig(dir_ / "other", options);
  std::string text = testing::ReadWholeFile(path);
  const std::string url = api_.url();
  text.replace(text.find(url), url.size(), "https://127.0.0.1:1");
  PluginOptions o = Options("nodes");
  o.kubeconfig = dir_.WriteFile("unreachable", text);
  auto out = RunPlugin(o);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.error(), HasSubstr("GET /api/v1/nodes from https://127.0.0.1:1"));
  o.kubeconfig = dir_ / "missing";
  EXPECT_THAT(RunPlugin(o).error(), HasSubstr("cannot find the API server"));
}

TEST_F(KubectlNeuronTest, RunsAsAKubectlPluginThroughASymlink) {
  const std::string link = dir_ / "kubectl-neuron";
  std::filesystem::create_symlink(toposched::testing::ToposchedBinary(), link);
  PluginOptions all = Options("pods");
  all.all_namespaces = true;
  const std::string expected = Run(all);
  const auto plugin = testing::RunCommand(link + " pods -A --kubeconfig " + kubeconfig_);
  EXPECT_EQ(plugin.exit_code, 0) << plugin.err;
  EXPECT_EQ(plugin.out, expected);
  const auto sub = testing::RunToposched("kubectl-neuron --kubeconfig " + kubeconfig_ + " pods -A");
  EXPECT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_EQ(sub.out, expected);
  // -v logs what the extender's code logs, to stderr: stdout stays JSON.
  const auto json_out =
      testing::RunCommand(link + " why default/wait-8 -v -o json --kubeconfig " + kubeconfig_);
  EXPECT_THAT(json_out.err, HasSubstr("LNC 2"));
  EXPECT_EQ(json_out.exit_code, 0) << json_out.err;
  EXPECT_EQ(json::parse(json_out.out)["kind"], "NeuronPodWhy");

  const auto bad = testing::RunCommand(link + " nodes --bogus");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--bogus"));
  const auto bad_output = testing::RunCommand(link + " nodes -o yaml");
  EXPECT_EQ(bad_output.exit_code, 2);
  const auto no_pod = testing::RunCommand(link + " why");
  EXPECT_EQ(no_pod.exit_code, 2);
  const auto unreachable = testing::RunCommand(link + " nodes --kubeconfig " + dir_ / "missing");
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.err, HasSubstr("kubectl-neuron: cannot find the API server"));
  const auto help = testing::RunCommand(link + " --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--kubeconfig", "--namespace", "--all-namespaces", "--extender",
                           "--extender-ca-file", "--extender-cert-file", "--extender-key-file",
                           "--output", "--request-timeout", "--verbose", "nodes", "pods", "why"}) {
    EXPECT_THAT(help.out, HasSubstr(flag));
  }
}

// The fuzz target's seeds (fuzz/corpus/kubectl_views_fuzz) are what they say: every field of
// both views read and drawn, and a hold index out of range refused.
TEST(KubectlNeuronViewsTest, ReadsTheFuzzSeedsAndDrawsThem) {
  const std::string dir = toposched::testing::SourcePath("fuzz/corpus/kubectl_views_fuzz/");
  auto fleet = ParseFleetView(testing::ReadWholeFile(dir + "fleet"));
  ASSERT_TRUE(fleet.ok()) << fleet.error();
  ASSERT_EQ(fleet->nodes.size(), 2u);
  EXPECT_EQ(fleet->nodes[0].holds[1].gang_seat, true);
  EXPECT_EQ(fleet->nodes[1].managed_by, "dra");
  EXPECT_EQ(fleet->pending[0].why[0].example_reason, "no free aligned block");
  const std::string text = RenderNodes(*fleet, {"extender", false});
  ExpectFitsTerminal(text);
  EXPECT_THAT(text, HasSubstr("A...  4x4 torus\n"));
  EXPECT_THAT(text, HasSubstr(" b...\n"));  // device 4 (second row) partly held by team/b
  EXPECT_THAT(text, HasSubstr("main: 1 core 9 (reserved) (gang seat)"));
  EXPECT_THAT(text, HasSubstr("reserved for gang g"));
  EXPECT_THAT(text, HasSubstr("managed by dra"));
  auto why = ParsePodPlacement(testing::ReadWholeFile(dir + "why"));
  ASSERT_TRUE(why.ok()) << why.error();
  EXPECT_THAT(RenderWhy(*why, {"extender", false}), HasSubstr("not-managed"));
  auto placed = ParsePodPlacement(testing::ReadWholeFile(dir + "placed"));
  ASSERT_TRUE(placed.ok()) << placed.error();
  EXPECT_EQ(placed->allocation[0].ids, (std::vector<int>{0, 1, 2, 3}));
  auto bad = ParseFleetView(testing::ReadWholeFile(dir + "bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("names hold 5"));
}

TEST(KubectlNeuronWrapTest, BreaksAtSpacesIndentsAndCutsLongWords) {
  EXPECT_EQ(Wrap("aa bb cc", 5, 2), (std::vector<std::string>{"aa bb", "  cc"}));
  EXPECT_EQ(Wrap("abcdefgh", 4, 0), (std::vector<std::string>{"abcd", "efgh"}));
  EXPECT_EQ(Wrap("", 4, 0), std::vector<std::string>{});
  for (const auto& line : Wrap(std::string(300, 'x') + " y", 80, 4)) EXPECT_LE(line.size(), 80u);
}

}  // namespace
}  // namespace toposched::kubectl
