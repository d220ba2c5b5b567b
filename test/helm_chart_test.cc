// The Helm chart deploy/helm/toposched, through the real helm (scripts/install-tools.sh puts it in
// /opt/toposched-tools/bin): `helm lint`, and `helm template` with AWS's install commands, an AWS
// values file, toposched's own values and bad values, asserting the rendered objects.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include "support/build_paths.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kChart = toposched::testing::SourcePath("deploy/helm/toposched");

// $HELM, else where scripts/install-tools.sh puts it, else the PATH.
std::string Helm() {
  if (const char* env = std::getenv("HELM"); env != nullptr && *env != '\0') return env;
  if (::access("/opt/toposched-tools/bin/helm", X_OK) == 0) return "/opt/toposched-tools/bin/helm";
  return "helm";
}

using toposched::testing::Outcome;

Outcome RunHelm(const std::string& args) {
  Outcome o = toposched::testing::RunCommand("'" + Helm() + "' " + args);
  if (o.exit_code == 127) {
    ADD_FAILURE() << "helm not found: run scripts/install-deps.sh (or set HELM)\n" << o.err;
  }
  return o;
}

// The objects of one `helm template` run.
class Rendered {
 public:
  explicit Rendered(const std::string& set_args) {
    outcome_ = RunHelm("template toposched '" + std::string(kChart) + "' " + set_args);
    if (outcome_.exit_code != 0) return;
    for (const YAML::Node& doc : YAML::LoadAll(outcome_.out)) {
      if (doc.IsMap()) objects_.push_back(doc);
    }
  }
  const Outcome& outcome() const { return outcome_; }
  const std::vector<YAML::Node>& objects() const { return objects_; }

  // The object of this kind and name; a null node (not a map) when there is none.
  YAML::Node Get(const std::string& kind, const std::string& name) const {
    for (const YAML::Node& o : objects_) {
      if (o["kind"].as<std::string>() == kind && o["metadata"]["name"].as<std::string>() == name) {
        return o;
      }
    }
    return YAML::Node();
  }
  std::vector<std::string> KindsAndNames() const {
    std::vector<std::string> out;
    for (const YAML::Node& o : objects_) {
      out.push_back(o["kind"].as<std::string>() + "/" + o["metadata"]["name"].as<std::string>());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  Outcome outcome_;
  std::vector<YAML::Node> objects_;
};

std::vector<std::string> Strings(const YAML::Node& sequence) {
  std::vector<std::string> out;
  for (const YAML::Node& item : sequence) out.push_back(item.as<std::string>());
  return out;
}

YAML::Node Container(const YAML::Node& workload) {
  return workload["spec"]["template"]["spec"]["containers"][0];
}

// The KubeSchedulerConfiguration held by a ConfigMap.
YAML::Node ConfigIn(const YAML::Node& config_map, const std::string& key) {
  return YAML::Load(config_map["data"][key].as<std::string>());
}

const char kSecondScheduler[] = "--set scheduler.enabled=true --set npd.enabled=false";
const char kDefaultScheduler[] =
    "--set scheduler.enabled=true --set scheduler.customScheduler.enabled=false "
    "--set scheduler.defaultScheduler.enabled=true --set npd.enabled=false";

const char kDra[] = "--set draDriver.enabled=true";

TEST(HelmChart, LintsCleanInBothModes) {
  for (const char* values :
       {"", kSecondScheduler, kDefaultScheduler, kDra,
        "--set grafana.dashboard.enabled=true --set prometheus.rules.enabled=true"}) {
    const Outcome o = RunHelm("lint --strict '" + std::string(kChart) + "' " + values);
    EXPECT_EQ(o.exit_code, 0) << values << "\n" << o.out << o.err;
    EXPECT_THAT(o.out, HasSubstr("0 chart(s) failed")) << values;
  }
}

TEST(HelmChart, DefaultsInstallTheDevicePluginOnlyAsAwsDoes) {
  const Rendered r("");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  EXPECT_THAT(r.KindsAndNames(), ElementsAre("ClusterRole/neuron-device-plugin",
                                             "ClusterRoleBinding/neuron-device-plugin",
                                             "DaemonSet/neuron-device-plugin-daemonset",
                                             "ServiceAccount/neuron-device-plugin"));
  const YAML::Node ds = r.Get("DaemonSet", "neuron-device-plugin-daemonset");
  EXPECT_EQ(ds["metadata"]["namespace"].as<std::string>(), "kube-system");
  const YAML::Node terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
                             ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                             [0]["matchExpressions"];
  EXPECT_EQ(terms[0]["key"].as<std::string>(), "node.kubernetes.io/instance-type");
  const std::vector<std::string> types = Strings(terms[0]["values"]);
  EXPECT_EQ(types.size(), 23u);  // AWS's 20, and the three Trn3 types
  EXPECT_THAT(types, Contains("trn2.48xlarge"));
  EXPECT_THAT(types, Contains("trn3.48xlarge"));
  EXPECT_THAT(types, Contains("ml.trn1n.32xlarge"));
  EXPECT_THAT(Strings(terms[1]["values"]), ElementsAre("fargate", "hybrid", "auto"));
  const YAML::Node c = Container(ds);
  EXPECT_THAT(Strings(c["command"]),
              ElementsAre("/usr/local/bin/toposched", "device-plugin", "--dev-root", "/host/dev",
                          "--probe-listen", "0.0.0.0:8081"));
  // Ready once kubelet holds the advertised devices (docs/device-plugin.md, "Readiness").
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 8081);
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["port"].as<std::string>(), "probe");
  EXPECT_EQ(c["image"].as<std::string>(), "toposched:latest");
  ASSERT_EQ(c["env"].size(), 1u);
  EXPECT_EQ(c["env"][0]["name"].as<std::string>(), "NODE_NAME");
}

TEST(HelmChart, AwsSecondSchedulerCommand) {
  const Rendered r(kSecondScheduler);
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const std::vector<std::string> names = r.KindsAndNames();
  for (const char* want :
       {"Deployment/k8s-neuron-scheduler", "Service/k8s-neuron-scheduler",
        "ServiceAccount/k8s-neuron-scheduler", "ClusterRole/k8s-neuron-scheduler",
        "ClusterRoleBinding/k8s-neuron-scheduler", "ConfigMap/my-scheduler-config",
        "Deployment/my-scheduler", "ServiceAccount/my-scheduler", "Role/my-scheduler",
        "RoleBinding/my-scheduler", "ClusterRoleBinding/my-scheduler-as-kube-scheduler",
        "ClusterRoleBinding/my-scheduler-as-volume-scheduler",
        "DaemonSet/neuron-device-plugin-daemonset"}) {
    EXPECT_THAT(names, Contains(want));
  }
  EXPECT_THAT(names, Not(Contains("ConfigMap/k8s-neuron-scheduler-config")));

  const YAML::Node extender = r.Get("Deployment", "k8s-neuron-scheduler");
  EXPECT_EQ(extender["spec"]["strategy"]["type"].as<std::string>(), "Recreate");
  // Two replicas, one leader: kube-scheduler's flag names and defaults.
  EXPECT_EQ(extender["spec"]["replicas"].as<int>(), 2);
  const YAML::Node c = Container(extender);
  const std::vector<std::string> command = Strings(c["command"]);
  EXPECT_THAT(
      command,
      ElementsAre("/usr/local/bin/toposched", "extender", "--listen", "0.0.0.0:12345",
                  "--tls-cert-file", "/etc/toposched/tls/tls.crt", "--tls-key-file",
                  "/etc/toposched/tls/tls.key", "--tls-client-ca-file", "/etc/toposched/tls/ca.crt",
                  "--leader-elect=true", "--leader-elect-lease-duration", "15s",
                  "--leader-elect-renew-deadline", "10s", "--leader-elect-retry-period", "2s",
                  "--leader-elect-resource-name", "k8s-neuron-scheduler",
                  "--leader-elect-resource-namespace", "kube-system", "--views-listen",
                  "127.0.0.1:8090", "--policy", "scarcity"));
  EXPECT_EQ(extender["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                    ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
                    ["topologyKey"]
                        .as<std::string>(),
            "kubernetes.io/hostname");
  const YAML::Node role = r.Get("Role", "k8s-neuron-scheduler");
  ASSERT_TRUE(role.IsMap());
  EXPECT_EQ(role["rules"][0]["resources"][0].as<std::string>(), "leases");
  EXPECT_THAT(Strings(role["rules"][0]["verbs"]), ElementsAre("get", "create", "update"));
  EXPECT_EQ(r.Get("RoleBinding", "k8s-neuron-scheduler")["roleRef"]["name"].as<std::string>(),
            "k8s-neuron-scheduler");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
  EXPECT_FALSE(extender["spec"]["template"]["spec"]["hostNetwork"].IsDefined());
  const YAML::Node service = r.Get("Service", "k8s-neuron-scheduler");
  EXPECT_EQ(service["spec"]["ports"][0]["port"].as<int>(), 12345);
  // Spelled out for Helm 4's server-side apply on API servers before 1.22 (found by e2e_helm).
  EXPECT_EQ(service["spec"]["ports"][0]["protocol"].as<std::string>(), "TCP");
  EXPECT_EQ(c["ports"][0]["protocol"].as<std::string>(), "TCP");
  EXPECT_EQ(service["spec"]["selector"]["app"].as<std::string>(),
            extender["spec"]["template"]["metadata"]["labels"]["app"].as<std::string>());

  const YAML::Node config =
      ConfigIn(r.Get("ConfigMap", "my-scheduler-config"), "my-scheduler-config.yaml");
  EXPECT_EQ(config["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1");
  EXPECT_EQ(config["profiles"][0]["schedulerName"].as<std::string>(), "my-scheduler");
  const YAML::Node entry = config["extenders"][0];
  EXPECT_EQ(entry["urlPrefix"].as<std::string>(),
            "https://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345");
  EXPECT_EQ(entry["weight"].as<int>(), 100);
  EXPECT_TRUE(entry["nodeCacheCapable"].as<bool>());
  EXPECT_FALSE(entry["ignorable"].as<bool>());
  EXPECT_EQ(entry["bindVerb"].as<std::string>(), "bind");
  EXPECT_EQ(entry["preemptVerb"].as<std::string>(), "preempt");
  EXPECT_EQ(entry["managedResources"].size(), 2u);

  const YAML::Node scheduler = r.Get("Deployment", "my-scheduler");
  EXPECT_THAT(Strings(Container(scheduler)["command"]),
              Contains("--config=/etc/kubernetes/my-scheduler/my-scheduler-config.yaml"));
  EXPECT_EQ(
      scheduler["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].as<std::string>(),
      "my-scheduler-config");
}

// Nobody has to know which KubeSchedulerConfiguration version their scheduler reads: the chart
// takes it from the cluster's version (helm install: the API server's; here --kube-version).
// extender.filterAnswer: by default filter passes the policy's node alone and the scheduler's
// entry has no prioritizeVerb (it would never be called); feasible passes the flag and adds it.
TEST(HelmChart, TheFilterAnswerDecidesThePrioritizeVerb) {
  for (const bool feasible : {false, true}) {
    SCOPED_TRACE(feasible ? "feasible" : "best");
    const Rendered r(std::string(kSecondScheduler) +
                     (feasible ? " --set extender.filterAnswer=feasible" : ""));
    ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
    const YAML::Node entry = ConfigIn(r.Get("ConfigMap", "my-scheduler-config"),
                                      "my-scheduler-config.yaml")["extenders"][0];
    EXPECT_EQ(entry["filterVerb"].as<std::string>(), "filter");
    EXPECT_EQ(entry["prioritizeVerb"].IsDefined(), feasible);
    const std::vector<std::string> command =
        Strings(Container(r.Get("Deployment", "k8s-neuron-scheduler"))["command"]);
    EXPECT_EQ(std::find(command.begin(), command.end(), "--filter-answer") != command.end(),
              feasible);
  }
  const Rendered bad(std::string(kSecondScheduler) + " --set extender.filterAnswer=all");
  EXPECT_NE(bad.outcome().exit_code, 0);
  EXPECT_THAT(bad.outcome().err, HasSubstr("filterAnswer"));
}

TEST(HelmChart, PicksTheSchedulerConfigVersionFromTheCluster) {
  for (const auto& [kube, want] :
       std::vector<std::pair<std::string, std::string>>{{"1.20.2", "v1beta1"},
                                                        {"1.22.0", "v1beta1"},
                                                        {"1.24.3", "v1beta3"},
                                                        {"1.25.0", "v1"},
                                                        {"1.34.4", "v1"},
                                                        {"1.37.2", "v1"}}) {
    for (const bool second : {true, false}) {
      const Rendered r(std::string(second ? kSecondScheduler : kDefaultScheduler) +
                       " --kube-version " + kube);
      ASSERT_EQ(r.outcome().exit_code, 0) << kube << ": " << r.outcome().err;
      const YAML::Node config =
          second ? ConfigIn(r.Get("ConfigMap", "my-scheduler-config"), "my-scheduler-config.yaml")
                 : ConfigIn(r.Get("ConfigMap", "k8s-neuron-scheduler-config"),
                            "kube-scheduler-config.yaml");
      EXPECT_EQ(config["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/" + want)
          << "Kubernetes " << kube << (second ? ", my-scheduler" : ", default scheduler");
    }
  }
  // An explicit value still wins.
  const Rendered set(
      std::string(kSecondScheduler) +
      " --kube-version 1.37.2 --set scheduler.customScheduler.configApiVersion=v1beta3");
  ASSERT_EQ(set.outcome().exit_code, 0) << set.outcome().err;
  EXPECT_EQ(ConfigIn(set.Get("ConfigMap", "my-scheduler-config"),
                     "my-scheduler-config.yaml")["apiVersion"]
                .as<std::string>(),
            "kubescheduler.config.k8s.io/v1beta3");
}

// my-scheduler runs kube-scheduler at the cluster's own version (the API server's, as helm sees it;
// here --kube-version), reduced to the vMAJOR.MINOR.PATCH of registry.k8s.io's tags; an explicit
// repository and tag (AWS's keys) still win.
TEST(HelmChart, MySchedulerImageFollowsTheCluster) {
  auto image = [](const Rendered& r) {
    return Container(r.Get("Deployment", "my-scheduler"))["image"].as<std::string>();
  };
  for (const auto& [kube, want] : std::vector<std::pair<std::string, std::string>>{
           {"1.37.2", "v1.37.2"},
           {"1.34.4-eks-3025e55", "v1.34.4"},  // EKS's gitVersion
           {"v1.33.5-gke.1201000", "v1.33.5"},
           {"1.20.2", "v1.20.2"}}) {
    const Rendered r(std::string(kSecondScheduler) + " --kube-version " + kube);
    ASSERT_EQ(r.outcome().exit_code, 0) << kube << ": " << r.outcome().err;
    EXPECT_EQ(image(r), "registry.k8s.io/kube-scheduler:" + want) << kube;
  }
  const Rendered aws(std::string(kSecondScheduler) +
                     " --kube-version 1.34.4 --set "
                     "scheduler.customScheduler.image.repository=public.ecr.aws/eks-distro/"
                     "kubernetes/kube-scheduler --set "
                     "scheduler.customScheduler.image.tag=v1.31.12-eks-1-31-30");
  ASSERT_EQ(aws.outcome().exit_code, 0) << aws.outcome().err;
  EXPECT_EQ(image(aws), "public.ecr.aws/eks-distro/kubernetes/kube-scheduler:v1.31.12-eks-1-31-30");
  // A mirror of registry.k8s.io: its repository, still the cluster's tag.
  const Rendered mirror(
      std::string(kSecondScheduler) +
      " --kube-version 1.37.2 --set "
      "scheduler.customScheduler.image.repository=mirror.example.com/kube-scheduler");
  ASSERT_EQ(mirror.outcome().exit_code, 0) << mirror.outcome().err;
  EXPECT_EQ(image(mirror), "mirror.example.com/kube-scheduler:v1.37.2");
}

TEST(HelmChart, AwsDefaultSchedulerCommand) {
  const Rendered r(kDefaultScheduler);
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const std::vector<std::string> names = r.KindsAndNames();
  EXPECT_THAT(names, Contains("Deployment/k8s-neuron-scheduler"));
  EXPECT_THAT(names, Contains("ConfigMap/k8s-neuron-scheduler-config"));
  EXPECT_THAT(names, Contains("ClusterRole/k8s-neuron-scheduler"));
  EXPECT_THAT(names, Contains("DaemonSet/neuron-device-plugin-daemonset"));
  EXPECT_THAT(names, Not(Contains("Deployment/my-scheduler")));
  EXPECT_THAT(names, Not(Contains("ConfigMap/my-scheduler-config")));
  EXPECT_THAT(names, Not(Contains("Service/k8s-neuron-scheduler")));

  const YAML::Node extender = r.Get("Deployment", "k8s-neuron-scheduler");
  const YAML::Node pod = extender["spec"]["template"]["spec"];
  EXPECT_TRUE(pod["hostNetwork"].as<bool>());
  EXPECT_EQ(extender["spec"]["replicas"].as<int>(), 1);
  EXPECT_TRUE(pod["nodeSelector"]["node-role.kubernetes.io/control-plane"].IsDefined());
  const std::vector<std::string> command = Strings(Container(extender)["command"]);
  // One replica beside the scheduler: no election, no lease role.
  EXPECT_THAT(command,
              ElementsAre("/usr/local/bin/toposched", "extender", "--listen", "127.0.0.1:32700",
                          "--views-listen", "127.0.0.1:8090", "--policy", "scarcity"));
  EXPECT_THAT(names, Not(Contains("Role/k8s-neuron-scheduler")));

  const YAML::Node config =
      ConfigIn(r.Get("ConfigMap", "k8s-neuron-scheduler-config"), "kube-scheduler-config.yaml");
  EXPECT_EQ(config["clientConnection"]["kubeconfig"].as<std::string>(),
            "/etc/kubernetes/scheduler.conf");
  YAML::Node entry = config["extenders"][0];
  EXPECT_EQ(entry["urlPrefix"].as<std::string>(), "http://127.0.0.1:32700");

  // The same entry as the second scheduler's, apart from the URL.
  const Rendered second(kSecondScheduler);
  YAML::Node other = ConfigIn(second.Get("ConfigMap", "my-scheduler-config"),
                              "my-scheduler-config.yaml")["extenders"][0];
  // The default-scheduler mode is plain HTTP on loopback: no TLS settings.
  EXPECT_FALSE(entry["enableHTTPS"].as<bool>());
  EXPECT_FALSE(entry["tlsConfig"].IsDefined());
  entry["urlPrefix"] = "x";
  other["urlPrefix"] = "x";
  other["enableHTTPS"] = false;
  other.remove("tlsConfig");
  EXPECT_EQ(YAML::Dump(entry), YAML::Dump(other));
}

// The default: TLS both ways. The chart's CA signs the extender's serving certificate (valid for
// the Service's names) and my-scheduler's client certificate; the extender requires a client
// certificate from that CA, my-scheduler's configuration presents its own and trusts the CA; a
// NetworkPolicy lets only my-scheduler's pods reach the port.
TEST(HelmChart, DefaultIsTlsWithClientCertificates) {
  const Rendered r(kSecondScheduler);
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const YAML::Node server = r.Get("Secret", "k8s-neuron-scheduler-tls");
  const YAML::Node client = r.Get("Secret", "my-scheduler-extender-client");
  ASSERT_TRUE(server.IsMap());
  ASSERT_TRUE(client.IsMap());
  const toposched::testing::TempDir dir;
  auto write = [&](const YAML::Node& secret, const std::string& key, const std::string& file) {
    std::ofstream(dir / (file + ".b64")) << secret["data"][key].as<std::string>();
    const Outcome o = toposched::testing::RunCommand("(base64 -d '" + dir / (file + ".b64") +
                                                     "' > '" + dir / file + "')");
    ASSERT_EQ(o.exit_code, 0) << o.err;
  };
  write(server, "ca.crt", "ca.pem");
  write(server, "tls.crt", "server.pem");
  write(client, "tls.crt", "client.pem");
  write(client, "ca.crt", "client-ca.pem");
  const Outcome verify = toposched::testing::RunCommand(
      "(openssl verify -CAfile '" + dir / "ca.pem" + "' '" + dir / "server.pem" + "' '" +
      dir / "client.pem" + "' && cmp '" + dir / "ca.pem" + "' '" + dir / "client-ca.pem" +
      "' && openssl x509 -noout -ext subjectAltName -in '" + dir / "server.pem" + "')");
  ASSERT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("DNS:k8s-neuron-scheduler.kube-system.svc.cluster.local"));

  const YAML::Node extender = r.Get("Deployment", "k8s-neuron-scheduler");
  const YAML::Node c = Container(extender);
  EXPECT_THAT(Strings(c["command"]), Contains("--tls-client-ca-file"));
  EXPECT_THAT(Strings(c["command"]), Not(Contains("--allow-insecure-http")));
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["scheme"].as<std::string>(), "HTTPS");
  EXPECT_EQ(
      extender["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"].as<std::string>(),
      "k8s-neuron-scheduler-tls");

  const YAML::Node entry = ConfigIn(r.Get("ConfigMap", "my-scheduler-config"),
                                    "my-scheduler-config.yaml")["extenders"][0];
  EXPECT_TRUE(entry["enableHTTPS"].as<bool>());
  EXPECT_FALSE(entry["tlsConfig"]["insecure"].as<bool>());
  const std::string dir_in_pod = "/etc/kubernetes/my-scheduler/extender-tls";
  EXPECT_EQ(entry["tlsConfig"]["certFile"].as<std::string>(), dir_in_pod + "/tls.crt");
  EXPECT_EQ(entry["tlsConfig"]["keyFile"].as<std::string>(), dir_in_pod + "/tls.key");
  EXPECT_EQ(entry["tlsConfig"]["caFile"].as<std::string>(), dir_in_pod + "/ca.crt");
  const YAML::Node pod = r.Get("Deployment", "my-scheduler")["spec"]["template"]["spec"];
  EXPECT_EQ(pod["volumes"][1]["secret"]["secretName"].as<std::string>(),
            "my-scheduler-extender-client");
  EXPECT_EQ(pod["containers"][0]["volumeMounts"][1]["mountPath"].as<std::string>(), dir_in_pod);

  const YAML::Node policy = r.Get("NetworkPolicy", "k8s-neuron-scheduler");
  ASSERT_TRUE(policy.IsMap());
  EXPECT_EQ(policy["spec"]["podSelector"]["matchLabels"]["component"].as<std::string>(),
            "k8s-neuron-scheduler");
  const YAML::Node from = policy["spec"]["ingress"][0]["from"];
  ASSERT_EQ(from.size(), 1u);
  // my-scheduler's pod labels.
  EXPECT_EQ(from[0]["podSelector"]["matchLabels"]["component"].as<std::string>(), "scheduler");
  EXPECT_EQ(pod["containers"][0]["name"].as<std::string>(), "kube-scheduler");
  EXPECT_EQ(
      r.Get("Deployment", "my-scheduler")["spec"]["template"]["metadata"]["labels"]["component"]
          .as<std::string>(),
      "scheduler");
  EXPECT_EQ(policy["spec"]["ingress"][0]["ports"][0]["port"].as<int>(), 12345);

  // Plain HTTP on the Pod network only when asked for in so many words.
  const Rendered plain(std::string(kSecondScheduler) +
                       " --set extender.tls.enabled=false --set extender.allowInsecureHttp=true");
  ASSERT_EQ(plain.outcome().exit_code, 0) << plain.outcome().err;
  EXPECT_THAT(Strings(Container(plain.Get("Deployment", "k8s-neuron-scheduler"))["command"]),
              Contains("--allow-insecure-http"));
  EXPECT_EQ(ConfigIn(plain.Get("ConfigMap", "my-scheduler-config"),
                     "my-scheduler-config.yaml")["extenders"][0]["urlPrefix"]
                .as<std::string>(),
            "http://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345");
  EXPECT_FALSE(plain.Get("Secret", "k8s-neuron-scheduler-tls").IsMap());
}

TEST(HelmChart, AnAwsValuesFileMostlyWorks) {
  // Keys as AWS's values.yaml writes them: its env (KUBECONFIG would point our plugin at a file it
  // does not have), its affinity placeholders, its instance list, its replicaCount.
  const toposched::testing::TempDir dir;
  const std::string values =
      dir.WriteFile("aws-values.yaml", R"(neuronInstances: [trn2.48xlarge, trn2u.48xlarge]
devicePlugin:
  fullnameOverride: neuron-device-plugin
  env:
    - name: KUBECONFIG
      value: /etc/kubernetes/kubelet.conf
    - name: NODE_NAME
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: EXTRA
      value: "1"
  tolerations:
    - {key: sagemaker.amazonaws.com/node-health-status, operator: Equal, value: Unschedulable, effect: NoSchedule}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: "__INSTANCE_TYPE_KEY__"
                operator: In
                values: "__NEURON_INSTANCES__"
scheduler:
  enabled: true
  replicaCount: 1
  env:
    - name: PORT
      value: "12345"
npd:
  enabled: true
)");
  const Rendered r("-f '" + values + "'");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const YAML::Node ds = r.Get("DaemonSet", "neuron-device-plugin-daemonset");
  const YAML::Node expression = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
                                  ["requiredDuringSchedulingIgnoredDuringExecution"]
                                  ["nodeSelectorTerms"][0]["matchExpressions"][0];
  EXPECT_EQ(expression["key"].as<std::string>(), "node.kubernetes.io/instance-type");
  EXPECT_THAT(Strings(expression["values"]), ElementsAre("trn2.48xlarge", "trn2u.48xlarge"));
  std::vector<std::string> env;
  for (const YAML::Node& e : Container(ds)["env"]) env.push_back(e["name"].as<std::string>());
  EXPECT_THAT(env, ElementsAre("NODE_NAME", "EXTRA"));
  EXPECT_EQ(ds["spec"]["template"]["spec"]["tolerations"][0]["key"].as<std::string>(),
            "sagemaker.amazonaws.com/node-health-status");
  EXPECT_TRUE(r.Get("Deployment", "my-scheduler").IsMap());
  EXPECT_TRUE(r.Get("Deployment", "k8s-neuron-scheduler").IsMap());
}

TEST(HelmChart, ToposchedsOwnValues) {
  const Rendered single(
      "--set scheduler.enabled=true --set extender.replicas=1 "
      "--set extender.leaderElection.enabled=false");
  ASSERT_EQ(single.outcome().exit_code, 0) << single.outcome().err;
  EXPECT_THAT(Strings(Container(single.Get("Deployment", "k8s-neuron-scheduler"))["command"]),
              Not(Contains("--leader-elect=true")));
  EXPECT_FALSE(single.Get("Role", "k8s-neuron-scheduler").IsMap());
  // A device that fails under a pod: told by default (pods/status), evicted on request.
  const auto rules_of = [](const Rendered& rendered) {
    std::vector<std::string> resources;
    for (const YAML::Node& rule : rendered.Get("ClusterRole", "k8s-neuron-scheduler")["rules"]) {
      for (const std::string& res : Strings(rule["resources"])) resources.push_back(res);
    }
    return resources;
  };
  EXPECT_THAT(rules_of(single), Contains("pods/status"));
  EXPECT_THAT(rules_of(single), Not(Contains("pods/eviction")));
  EXPECT_THAT(Strings(Container(single.Get("Deployment", "k8s-neuron-scheduler"))["command"]),
              Not(Contains("--on-device-failure")));
  const Rendered evict("--set scheduler.enabled=true --set extender.onDeviceFailure=evict");
  ASSERT_EQ(evict.outcome().exit_code, 0) << evict.outcome().err;
  EXPECT_THAT(rules_of(evict), Contains("pods/eviction"));
  const std::vector<std::string> evict_command =
      Strings(Container(evict.Get("Deployment", "k8s-neuron-scheduler"))["command"]);
  EXPECT_THAT(evict_command, Contains("--on-device-failure"));
  EXPECT_THAT(evict_command, Contains("evict"));
  const Rendered bad("--set scheduler.enabled=true --set extender.onDeviceFailure=reboot");
  EXPECT_NE(bad.outcome().exit_code, 0);
  // Smaller pods first: off unless asked, the flag's hours as given, a negative count refused.
  EXPECT_THAT(Strings(Container(single.Get("Deployment", "k8s-neuron-scheduler"))["command"]),
              Not(Contains("--hold-back-hours")));
  const Rendered hold("--set scheduler.enabled=true --set extender.holdBackHours=24");
  ASSERT_EQ(hold.outcome().exit_code, 0) << hold.outcome().err;
  const std::vector<std::string> hold_command =
      Strings(Container(hold.Get("Deployment", "k8s-neuron-scheduler"))["command"]);
  const auto hold_flag = std::find(hold_command.begin(), hold_command.end(), "--hold-back-hours");
  ASSERT_NE(hold_flag, hold_command.end());
  ASSERT_NE(std::next(hold_flag), hold_command.end());
  EXPECT_EQ(*std::next(hold_flag), "24");
  const Rendered negative("--set scheduler.enabled=true --set extender.holdBackHours=-1");
  EXPECT_NE(negative.outcome().exit_code, 0);

  // No probe port: neither the flag nor a readinessProbe.
  const Rendered no_probe("--set devicePlugin.probePort=0");
  ASSERT_EQ(no_probe.outcome().exit_code, 0) << no_probe.outcome().err;
  const YAML::Node plugin = Container(no_probe.Get("DaemonSet", "neuron-device-plugin-daemonset"));
  EXPECT_THAT(Strings(plugin["command"]), Not(Contains("--probe-listen")));
  EXPECT_FALSE(plugin["readinessProbe"].IsDefined());

  const Rendered r(
      "--set scheduler.enabled=true --set extender.replicas=3 --set extender.logLevel=debug "
      "--set extender.scoringPolicy=first-fit "
      "--set extender.port=8443 --set extender.tls.enabled=true --set "
      "extender.tls.secretName=ext-tls --set extender.tls.clientSecretName=sched-tls "
      "--set extender.tls.caBundle=Q0E= --set scheduler.namespaceOverride=neuron "
      "--set scheduler.customScheduler.namespaceOverride=neuron "
      "--set devicePlugin.namespaceOverride=neuron --set devicePlugin.image.repository=reg/t "
      "--set devicePlugin.image.tag=1.2 --set scheduler.image.repository=reg/t "
      "--set scheduler.image.tag=1.2 --set scheduler.customScheduler.configApiVersion=v1beta1");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  for (const YAML::Node& o : r.objects()) {
    const std::string kind = o["kind"].as<std::string>();
    if (kind.rfind("Cluster", 0) == 0) continue;
    EXPECT_EQ(o["metadata"]["namespace"].as<std::string>(), "neuron") << kind;
  }
  const YAML::Node extender = r.Get("Deployment", "k8s-neuron-scheduler");
  EXPECT_EQ(extender["spec"]["replicas"].as<int>(), 3);
  const YAML::Node c = Container(extender);
  EXPECT_EQ(c["image"].as<std::string>(), "reg/t:1.2");
  EXPECT_EQ(
      Container(r.Get("DaemonSet", "neuron-device-plugin-daemonset"))["image"].as<std::string>(),
      "reg/t:1.2");
  const std::vector<std::string> command = Strings(c["command"]);
  EXPECT_THAT(command, Contains("0.0.0.0:8443"));
  EXPECT_THAT(command, Contains("/etc/toposched/tls/tls.crt"));
  EXPECT_THAT(command, Contains("debug"));
  EXPECT_THAT(command, Contains("first-fit"));
  EXPECT_THAT(command, Contains("neuron"));  // --leader-elect-resource-namespace follows
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["scheme"].as<std::string>(), "HTTPS");
  EXPECT_EQ(
      extender["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"].as<std::string>(),
      "ext-tls");
  const YAML::Node config =
      ConfigIn(r.Get("ConfigMap", "my-scheduler-config"), "my-scheduler-config.yaml");
  EXPECT_EQ(config["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1beta1");
  EXPECT_EQ(config["leaderElection"]["resourceNamespace"].as<std::string>(), "neuron");
  const YAML::Node entry = config["extenders"][0];
  EXPECT_EQ(entry["urlPrefix"].as<std::string>(),
            "https://k8s-neuron-scheduler.neuron.svc.cluster.local:8443");
  EXPECT_TRUE(entry["enableHTTPS"].as<bool>());
  EXPECT_EQ(entry["tlsConfig"]["caData"].as<std::string>(), "Q0E=");
  EXPECT_FALSE(entry["tlsConfig"]["caFile"].IsDefined());
  EXPECT_EQ(entry["tlsConfig"]["certFile"].as<std::string>(),
            "/etc/kubernetes/my-scheduler/extender-tls/tls.crt");
  EXPECT_EQ(r.Get("Deployment",
                  "my-scheduler")["spec"]["template"]["spec"]["volumes"][1]["secret"]["secretName"]
                .as<std::string>(),
            "sched-tls");
  // Your own certificates: the chart generates none.
  EXPECT_FALSE(r.Get("Secret", "k8s-neuron-scheduler-tls").IsMap());
  EXPECT_EQ(r.Get("ClusterRoleBinding", "k8s-neuron-scheduler")["subjects"][0]["namespace"]
                .as<std::string>(),
            "neuron");
}

TEST(HelmChart, AChangedValueRollsTheSchedulerOnUpgrade) {
  const Rendered before(kSecondScheduler);
  const Rendered after(std::string(kSecondScheduler) + " --set extender.httpTimeout=30s");
  ASSERT_EQ(after.outcome().exit_code, 0) << after.outcome().err;
  auto stamp = [](const Rendered& r) {
    return r
        .Get("Deployment", "my-scheduler")["spec"]["template"]["metadata"]["annotations"]
                                          ["toposched.io/config-sha256"]
        .as<std::string>();
  };
  EXPECT_NE(stamp(before), stamp(after));
}

// The device plugin stays off the nodes the DRA plugin manages
// (toposched.io/neuron-management=dra), whether or not the DRA plugin is installed: the label
// decides who manages a node.
TEST(HelmChart, DevicePluginAvoidsDraNodes) {
  for (const char* values : {"", kDra}) {
    const Rendered r(values);
    ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
    const YAML::Node terms = r.Get(
        "DaemonSet",
        "neuron-device-plugin-daemonset")["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
                                         ["requiredDuringSchedulingIgnoredDuringExecution"]
                                         ["nodeSelectorTerms"][0]["matchExpressions"];
    ASSERT_EQ(terms.size(), 3u) << values;
    EXPECT_EQ(terms[2]["key"].as<std::string>(), "toposched.io/neuron-management");
    EXPECT_EQ(terms[2]["operator"].as<std::string>(), "NotIn");
    EXPECT_THAT(Strings(terms[2]["values"]), ElementsAre("dra"));
  }
}

// draDriver.enabled=true: `toposched dra-plugin` under AWS's names and keys
// (ultraserver-dra-helm.md §2, kubernetes-2026.md §1.1), on the dra-labelled nodes only, with
// least-privilege RBAC.
TEST(HelmChart, DraDriverUnderAwsNames) {
  const Rendered r(std::string(kDra) + " --kube-version 1.37.2");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  // With the admission webhook of draDriver.countRequests (on by default; its own test below).
  EXPECT_THAT(
      r.KindsAndNames(),
      ElementsAreArray(std::vector<std::string>{
          "ClusterRole/neuron-device-plugin", "ClusterRole/neuron-dra-driver",
          "ClusterRole/toposched-admission-webhook", "ClusterRoleBinding/neuron-device-plugin",
          "ClusterRoleBinding/neuron-dra-driver", "ClusterRoleBinding/toposched-admission-webhook",
          "DaemonSet/neuron-device-plugin-daemonset", "DaemonSet/neuron-dra-driver-kubelet-plugin",
          "Deployment/toposched-admission-webhook", "DeviceClass/neuron.aws.com",
          "DeviceClass/neurondevices.toposched.io",
          "MutatingWebhookConfiguration/toposched-neuron-count-requests",
          "Secret/toposched-admission-webhook-tls", "Service/toposched-admission-webhook",
          "ServiceAccount/neuron-device-plugin", "ServiceAccount/neuron-dra-driver-sa",
          "ServiceAccount/toposched-admission-webhook"}));
  const YAML::Node ds = r.Get("DaemonSet", "neuron-dra-driver-kubelet-plugin");
  EXPECT_EQ(ds["metadata"]["namespace"].as<std::string>(), "kube-system");
  const YAML::Node spec = ds["spec"]["template"]["spec"];
  EXPECT_EQ(spec["serviceAccountName"].as<std::string>(), "neuron-dra-driver-sa");
  EXPECT_EQ(spec["nodeSelector"]["toposched.io/neuron-management"].as<std::string>(), "dra");
  EXPECT_EQ(ds["spec"]["updateStrategy"]["type"].as<std::string>(), "RollingUpdate");
  EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as<int>(), 0);
  EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"].as<int>(), 1);
  std::vector<std::string> tolerated;
  for (const YAML::Node& t : spec["tolerations"]) tolerated.push_back(t["key"].as<std::string>());
  EXPECT_THAT(tolerated, ElementsAre("CriticalAddonsOnly", "aws.amazon.com/neuron",
                                     "sagemaker.amazonaws.com/node-health-status"));
  const YAML::Node c = Container(ds);
  EXPECT_THAT(Strings(c["command"]),
              ElementsAre("/usr/local/bin/toposched", "dra-plugin", "--dev-root", "/host/dev",
                          "--plugin-dir", "$(KUBELET_PLUGINS_DIRECTORY_PATH)/neuron.aws.com",
                          "--registry-dir", "$(KUBELET_REGISTRAR_DIRECTORY_PATH)", "--set-offers",
                          "auto", "--probe-listen", "0.0.0.0:8081"));
  std::vector<std::string> env;
  for (const YAML::Node& e : c["env"]) {
    env.push_back(e["name"].as<std::string>() + "=" +
                  (e["value"] ? e["value"].as<std::string>() : std::string("(ref)")));
  }
  EXPECT_THAT(env, ElementsAre("NODE_NAME=(ref)", "CDI_ROOT=/var/run/cdi",
                               "KUBELET_REGISTRAR_DIRECTORY_PATH=/var/lib/kubelet/plugins_registry",
                               "KUBELET_PLUGINS_DIRECTORY_PATH=/var/lib/kubelet/plugins"));
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
  EXPECT_EQ(c["resources"]["limits"]["memory"].as<std::string>(), "256Mi");
  std::vector<std::string> host_paths;
  for (const YAML::Node& v : spec["volumes"])
    host_paths.push_back(v["hostPath"]["path"].as<std::string>());
  EXPECT_THAT(host_paths, ElementsAre("/var/lib/kubelet/plugins",
                                      "/var/lib/kubelet/plugins_registry", "/var/run/cdi", "/sys",
                                      "/dev", "/opt/aws", "/var/lib/kubelet/pod-resources"));
  // Each hostPath is mounted at the same path, but /dev (at /host/dev, as the device plugin's).
  for (const YAML::Node& m : c["volumeMounts"]) {
    if (m["name"].as<std::string>() == "dev") {
      EXPECT_EQ(m["mountPath"].as<std::string>(), "/host/dev");
    }
  }
  EXPECT_FALSE(spec["hostNetwork"]) << "unix sockets only: no host network";
  EXPECT_EQ(c["securityContext"]["capabilities"]["drop"][0].as<std::string>(), "ALL");

  const YAML::Node rules = r.Get("ClusterRole", "neuron-dra-driver")["rules"];
  ASSERT_EQ(rules.size(), 5u);
  EXPECT_THAT(Strings(rules[0]["resources"]), ElementsAre("resourceslices"));
  EXPECT_THAT(Strings(rules[0]["verbs"]), ElementsAre("get", "list", "watch", "create", "update",
                                                      "patch", "delete", "deletecollection"));
  EXPECT_THAT(Strings(rules[1]["resources"]), ElementsAre("resourceclaims", "deviceclasses"));
  EXPECT_THAT(Strings(rules[1]["verbs"]), ElementsAre("get", "list", "watch"));
  EXPECT_THAT(Strings(rules[2]["resources"]), ElementsAre("nodes"));
  EXPECT_THAT(Strings(rules[2]["verbs"]), ElementsAre("get", "list", "watch", "patch"));
  // Telling the pods whose claims hold a failed device.
  EXPECT_THAT(Strings(rules[3]["resources"]), ElementsAre("events"));
  EXPECT_THAT(Strings(rules[3]["verbs"]), ElementsAre("create"));
  EXPECT_THAT(Strings(rules[4]["resources"]), ElementsAre("pods/status"));
  EXPECT_THAT(Strings(rules[4]["verbs"]), ElementsAre("patch"));
  const YAML::Node binding = r.Get("ClusterRoleBinding", "neuron-dra-driver");
  EXPECT_EQ(binding["subjects"][0]["name"].as<std::string>(), "neuron-dra-driver-sa");

  // The design's three classes, resource.k8s.io/v1.
  const auto cel = [&](const std::string& name) {
    const YAML::Node dc = r.Get("DeviceClass", name);
    EXPECT_EQ(dc["apiVersion"].as<std::string>(), "resource.k8s.io/v1") << name;
    return dc["spec"]["selectors"][0]["cel"]["expression"].as<std::string>();
  };
  EXPECT_EQ(cel("neuron.aws.com"),
            "device.driver == \"neuron.aws.com\" && "
            "device.attributes[\"neuron.aws.com\"].resourceType == \"neuron_device\"");
  EXPECT_THAT(cel("neurondevices.toposched.io"), HasSubstr("== \"neuron_device_set\" ||"));
  EXPECT_THAT(cel("neurondevices.toposched.io"), HasSubstr("== \"neuron_device\")"));
  // Core ranges only with draDriver.coreOffers: the plugin's --core-offers and the cores class.
  EXPECT_THAT(Strings(Container(ds)["command"]), Not(Contains("--core-offers")));
  const Rendered cores(std::string(kDra) +
                       " --set draDriver.coreOffers=true --kube-version 1.37.2");
  ASSERT_EQ(cores.outcome().exit_code, 0) << cores.outcome().err;
  EXPECT_THAT(
      Strings(Container(cores.Get("DaemonSet", "neuron-dra-driver-kubelet-plugin"))["command"]),
      Contains("--core-offers"));
  EXPECT_THAT(cores
                  .Get("DeviceClass",
                       "neuroncores.toposched.io")["spec"]["selectors"][0]["cel"]["expression"]
                  .as<std::string>(),
              HasSubstr("resourceType == \"neuron_cores\""));
  // Set offers: auto unless asked; a value the plugin would refuse fails the render instead.
  const auto set_offers = [](const Rendered& rendered) {
    const std::vector<std::string> args = Strings(
        Container(rendered.Get("DaemonSet", "neuron-dra-driver-kubelet-plugin"))["command"]);
    const auto flag = std::find(args.begin(), args.end(), "--set-offers");
    return flag == args.end() || flag + 1 == args.end() ? std::string("(none)") : *(flag + 1);
  };
  EXPECT_EQ(set_offers(r), "auto");
  const Rendered on(std::string(kDra) + " --set draDriver.setOffers=on --kube-version 1.37.2");
  ASSERT_EQ(on.outcome().exit_code, 0) << on.outcome().err;
  EXPECT_EQ(set_offers(on), "on");
  const Rendered bad(std::string(kDra) + " --set draDriver.setOffers=sets --kube-version 1.37.2");
  EXPECT_NE(bad.outcome().exit_code, 0);
  EXPECT_THAT(bad.outcome().err,
              HasSubstr("draDriver.setOffers: \"sets\" is none of auto, on, off"));
  const Rendered both(std::string(kDra) +
                      " --set draDriver.setOffers=off --set draDriver.coreOffers=true");
  EXPECT_NE(both.outcome().exit_code, 0);
  EXPECT_THAT(both.outcome().err, HasSubstr("core ranges need the shared counters"));
  // A failed device's taint: the plugin's defaults unless asked; a bad value fails the render.
  const auto args_of = [](const Rendered& rendered) {
    return Strings(
        Container(rendered.Get("DaemonSet", "neuron-dra-driver-kubelet-plugin"))["command"]);
  };
  EXPECT_THAT(args_of(r), Not(Contains("--on-device-failure")));
  EXPECT_THAT(args_of(r), Not(Contains("--device-taints")));
  const Rendered evict(std::string(kDra) +
                       " --set draDriver.onDeviceFailure=evict --set draDriver.deviceTaints=off"
                       " --kube-version 1.37.2");
  ASSERT_EQ(evict.outcome().exit_code, 0) << evict.outcome().err;
  const std::vector<std::string> evict_args = args_of(evict);
  const auto on_failure = std::find(evict_args.begin(), evict_args.end(), "--on-device-failure");
  ASSERT_NE(on_failure, evict_args.end());
  ASSERT_NE(on_failure + 1, evict_args.end());
  EXPECT_EQ(*(on_failure + 1), "evict");
  EXPECT_THAT(evict_args, Contains("--device-taints"));
  const Rendered sometimes(std::string(kDra) + " --set draDriver.onDeviceFailure=sometimes");
  EXPECT_NE(sometimes.outcome().exit_code, 0);
  EXPECT_THAT(sometimes.outcome().err,
              HasSubstr("draDriver.onDeviceFailure: \"sometimes\" is neither event nor evict"));
}

// DeviceClasses exist only where the cluster serves resource.k8s.io/v1 (helm install asks the
// API server: Kubernetes 1.34+), unless forced; AWS's values (fullnameOverride, serviceAccount)
// rename the objects.
TEST(HelmChart, DraDeviceClassesFollowTheCluster) {
  const auto classes = [](const std::string& values) {
    const Rendered r(values);
    EXPECT_EQ(r.outcome().exit_code, 0) << values << r.outcome().err;
    int n = 0;
    for (const YAML::Node& o : r.objects()) n += o["kind"].as<std::string>() == "DeviceClass";
    return n;
  };
  // helm template's built-in API list has resource.k8s.io/v1 whatever the version; the version
  // decides there (helm install asks the live API server, e2e_dra checks that path).
  EXPECT_EQ(classes(std::string(kDra) + " --kube-version 1.33.5"), 0) << "no resource.k8s.io/v1";
  EXPECT_EQ(classes(std::string(kDra) + " --kube-version 1.20.2"), 0);
  EXPECT_EQ(classes(std::string(kDra) + " --kube-version 1.34.0"), 2);
  EXPECT_EQ(classes(std::string(kDra) + " --kube-version 1.37.2"), 2);
  EXPECT_EQ(
      classes(std::string(kDra) + " --kube-version 1.33.5 --set draDriver.deviceClasses=true"), 2);
  EXPECT_EQ(
      classes(std::string(kDra) + " --kube-version 1.37.2 --set draDriver.deviceClasses=false"), 0);
  EXPECT_EQ(classes("--kube-version 1.37.2"), 0) << "draDriver off";

  const Rendered r(
      std::string(kDra) +
      " --set draDriver.fullnameOverride=my-dra --set draDriver.serviceAccount.name=my-sa"
      " --set draDriver.namespaceOverride=neuron-dra-driver"
      " --set-json draDriver.nodeSelector='{\"pool\":\"trn\"}'");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const YAML::Node ds = r.Get("DaemonSet", "my-dra");
  ASSERT_TRUE(ds.IsMap());
  EXPECT_EQ(ds["metadata"]["namespace"].as<std::string>(), "neuron-dra-driver");
  EXPECT_EQ(ds["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>(), "my-sa");
  EXPECT_EQ(ds["spec"]["template"]["spec"]["nodeSelector"]["pool"].as<std::string>(), "trn");
  EXPECT_EQ(ds["spec"]["template"]["spec"]["nodeSelector"]["toposched.io/neuron-management"]
                .as<std::string>(),
            "dra");
  EXPECT_TRUE(r.Get("ServiceAccount", "my-sa").IsMap());
  EXPECT_EQ(r.Get("ClusterRoleBinding", "neuron-dra-driver")["subjects"][0]["namespace"]
                .as<std::string>(),
            "neuron-dra-driver");
  // serviceAccount.create=false: bring your own.
  const Rendered own(std::string(kDra) + " --set draDriver.serviceAccount.create=false");
  ASSERT_EQ(own.outcome().exit_code, 0) << own.outcome().err;
  EXPECT_FALSE(own.Get("ServiceAccount", "neuron-dra-driver-sa").IsMap());
  EXPECT_TRUE(own.Get("ClusterRoleBinding", "neuron-dra-driver").IsMap());
}

// draDriver.countRequests: `toposched admission-webhook` and the MutatingWebhookConfiguration that
// sends it the creations of opted-in pods (namespace or pod labelled toposched.io/neuron-dra=true)
// asking a Neuron count; its serving certificate generated by the chart, the CA in caBundle.
TEST(HelmChart, DraCountRequestsWebhook) {
  const Rendered r(std::string(kDra) + " --kube-version 1.37.2");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  const std::string name = "toposched-admission-webhook";

  const YAML::Node deployment = r.Get("Deployment", name);
  ASSERT_TRUE(deployment.IsMap());
  EXPECT_EQ(deployment["metadata"]["namespace"].as<std::string>(), "kube-system");
  EXPECT_EQ(deployment["spec"]["replicas"].as<int>(), 2);
  const YAML::Node pod = deployment["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(), name);
  EXPECT_EQ(pod["priorityClassName"].as<std::string>(), "system-cluster-critical");
  EXPECT_EQ(pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
               ["podAffinityTerm"]["topologyKey"]
                   .as<std::string>(),
            "kubernetes.io/hostname");
  const YAML::Node c = Container(deployment);
  EXPECT_EQ(c["image"].as<std::string>(), "toposched:latest");  // draDriver.image
  EXPECT_THAT(Strings(c["command"]),
              ElementsAre("/usr/local/bin/toposched", "admission-webhook", "--listen",
                          "0.0.0.0:9443", "--tls-cert-file", "/etc/toposched/tls/tls.crt",
                          "--tls-key-file", "/etc/toposched/tls/tls.key"));
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 9443);
  for (const auto& [probe, path] :
       {std::pair{"readinessProbe", "/readyz"}, std::pair{"livenessProbe", "/healthz"}}) {
    EXPECT_EQ(c[probe]["httpGet"]["path"].as<std::string>(), path);
    EXPECT_EQ(c[probe]["httpGet"]["scheme"].as<std::string>(), "HTTPS") << probe;
    EXPECT_EQ(c[probe]["httpGet"]["port"].as<std::string>(), "https") << probe;
  }
  EXPECT_TRUE(c["securityContext"]["runAsNonRoot"].as<bool>());
  EXPECT_EQ(c["volumeMounts"][0]["mountPath"].as<std::string>(), "/etc/toposched/tls");
  EXPECT_EQ(pod["volumes"][0]["secret"]["secretName"].as<std::string>(), name + "-tls");

  const YAML::Node service = r.Get("Service", name);
  EXPECT_EQ(service["spec"]["ports"][0]["port"].as<int>(), 443);
  EXPECT_EQ(service["spec"]["ports"][0]["targetPort"].as<std::string>(), "https");
  EXPECT_EQ(YAML::Dump(service["spec"]["selector"]),
            YAML::Dump(deployment["spec"]["template"]["metadata"]["labels"]));

  const YAML::Node rules = r.Get("ClusterRole", name)["rules"];
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_THAT(Strings(rules[0]["apiGroups"]), ElementsAre("resource.k8s.io"));
  EXPECT_THAT(Strings(rules[0]["resources"]), ElementsAre("resourceclaimtemplates"));
  EXPECT_THAT(Strings(rules[0]["verbs"]), ElementsAre("get", "list", "watch", "create"));
  const YAML::Node subject = r.Get("ClusterRoleBinding", name)["subjects"][0];
  EXPECT_EQ(subject["name"].as<std::string>(), name);
  EXPECT_EQ(subject["namespace"].as<std::string>(), "kube-system");

  const YAML::Node mwc = r.Get("MutatingWebhookConfiguration", "toposched-neuron-count-requests");
  ASSERT_TRUE(mwc.IsMap());
  EXPECT_EQ(mwc["apiVersion"].as<std::string>(), "admissionregistration.k8s.io/v1");
  const YAML::Node hooks = mwc["webhooks"];
  ASSERT_EQ(hooks.size(), 2u);
  const YAML::Node by_namespace = hooks[0];
  const YAML::Node by_pod = hooks[1];
  EXPECT_EQ(by_namespace["name"].as<std::string>(), "namespaces.neuron-dra.toposched.io");
  EXPECT_EQ(by_pod["name"].as<std::string>(), "pods.neuron-dra.toposched.io");
  EXPECT_EQ(
      by_namespace["namespaceSelector"]["matchLabels"]["toposched.io/neuron-dra"].as<std::string>(),
      "true");
  EXPECT_FALSE(by_namespace["objectSelector"].IsDefined());
  EXPECT_EQ(by_pod["objectSelector"]["matchLabels"]["toposched.io/neuron-dra"].as<std::string>(),
            "true");
  // Not sent twice: the pod webhook leaves opted-in namespaces to the other.
  const YAML::Node not_in = by_pod["namespaceSelector"]["matchExpressions"][0];
  EXPECT_EQ(not_in["key"].as<std::string>(), "toposched.io/neuron-dra");
  EXPECT_EQ(not_in["operator"].as<std::string>(), "NotIn");
  EXPECT_THAT(Strings(not_in["values"]), ElementsAre("true"));

  // The generated serving certificate is signed by the CA both webhooks trust, for the Service.
  const YAML::Node secret = r.Get("Secret", name + "-tls");
  ASSERT_TRUE(secret.IsMap());
  EXPECT_EQ(secret["type"].as<std::string>(), "kubernetes.io/tls");
  const std::string ca = secret["data"]["ca.crt"].as<std::string>();
  for (const YAML::Node& hook : hooks) {
    const std::string hook_name = hook["name"].as<std::string>();
    EXPECT_THAT(Strings(hook["rules"][0]["operations"]), ElementsAre("CREATE")) << hook_name;
    EXPECT_THAT(Strings(hook["rules"][0]["apiGroups"]), ElementsAre("")) << hook_name;
    EXPECT_THAT(Strings(hook["rules"][0]["apiVersions"]), ElementsAre("v1")) << hook_name;
    EXPECT_THAT(Strings(hook["rules"][0]["resources"]), ElementsAre("pods")) << hook_name;
    EXPECT_EQ(hook["rules"][0]["scope"].as<std::string>(), "Namespaced") << hook_name;
    const YAML::Node to = hook["clientConfig"]["service"];
    EXPECT_EQ(to["name"].as<std::string>(), name) << hook_name;
    EXPECT_EQ(to["namespace"].as<std::string>(), "kube-system") << hook_name;
    EXPECT_EQ(to["path"].as<std::string>(), "/mutate-pods") << hook_name;
    EXPECT_EQ(to["port"].as<int>(), 443) << hook_name;
    EXPECT_FALSE(ca.empty());
    EXPECT_EQ(hook["clientConfig"]["caBundle"].as<std::string>(), ca) << hook_name;
    EXPECT_THAT(Strings(hook["admissionReviewVersions"]), ElementsAre("v1")) << hook_name;
    EXPECT_EQ(hook["sideEffects"].as<std::string>(), "NoneOnDryRun") << hook_name;
    EXPECT_EQ(hook["failurePolicy"].as<std::string>(), "Fail") << hook_name;
    EXPECT_EQ(hook["timeoutSeconds"].as<int>(), 10) << hook_name;
    EXPECT_EQ(hook["reinvocationPolicy"].as<std::string>(), "Never") << hook_name;
    EXPECT_EQ(hook["matchPolicy"].as<std::string>(), "Equivalent") << hook_name;
    ASSERT_EQ(hook["matchConditions"].size(), 1u) << hook_name;
    EXPECT_EQ(hook["matchConditions"][0]["name"].as<std::string>(), "asks-neuron");
  }
  const toposched::testing::TempDir dir;
  auto write = [&](const std::string& b64, const std::string& file) {
    std::ofstream(dir / (file + ".b64")) << b64;
    const Outcome o = toposched::testing::RunCommand("(base64 -d '" + dir / (file + ".b64") +
                                                     "' > '" + dir / file + "')");
    ASSERT_EQ(o.exit_code, 0) << o.err;
  };
  write(ca, "ca.pem");
  write(secret["data"]["tls.crt"].as<std::string>(), "server.pem");
  const Outcome verify = toposched::testing::RunCommand(
      "(openssl verify -CAfile '" + dir / "ca.pem" + "' '" + dir / "server.pem" +
      "' && openssl x509 -noout -ext subjectAltName -in '" + dir / "server.pem" + "')");
  ASSERT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("DNS:toposched-admission-webhook.kube-system.svc"));

  // The CEL condition (written once, the same in both). Whether it compiles and what it selects
  // is for a real API server (test/e2e/countreq.sh); here its shape: it reads the containers and
  // init containers, the three resource names in limits and in requests, each optional field
  // behind has() (a missing one is an evaluation error, which failurePolicy Fail turns into a
  // refusal of every pod), with balanced brackets and quotes.
  const std::string cel = by_namespace["matchConditions"][0]["expression"].as<std::string>();
  EXPECT_EQ(by_pod["matchConditions"][0]["expression"].as<std::string>(), cel);
  for (const char* part :
       {"object.spec.containers", "has(object.spec.initContainers) ? object.spec.initContainers",
        "has(c.resources) &&", "has(c.resources.limits) && c.resources.limits.exists(",
        "has(c.resources.requests) && c.resources.requests.exists(", "\"aws.amazon.com/neuron\"",
        "\"aws.amazon.com/neurondevice\"", "\"aws.amazon.com/neuroncore\""}) {
    EXPECT_THAT(cel, HasSubstr(part));
  }
  EXPECT_EQ(cel.find('\n'), std::string::npos) << "folded into one line: " << cel;
  int depth = 0;
  bool quoted = false;
  for (const char ch : cel) {
    if (ch == '"') quoted = !quoted;
    if (quoted) continue;
    if (ch == '(' || ch == '[') ++depth;
    if (ch == ')' || ch == ']') --depth;
    ASSERT_GE(depth, 0) << cel;
  }
  EXPECT_EQ(depth, 0) << cel;
  EXPECT_FALSE(quoted) << cel;
}

// What draDriver.countRequests changes, and when the webhook is not rendered at all.
TEST(HelmChart, DraCountRequestsValues) {
  const auto webhook_objects = [](const Rendered& r) {
    std::vector<std::string> out;
    for (const std::string& o : r.KindsAndNames()) {
      if (o.find("admission-webhook") != std::string::npos ||
          o.find("count-requests") != std::string::npos) {
        out.push_back(o);
      }
    }
    return out;
  };
  for (const std::string& values :
       {std::string(kDra) + " --set draDriver.countRequests.enabled=false", std::string(""),
        std::string(kDra) + " --kube-version 1.33.5"}) {  // no resource.k8s.io/v1
    const Rendered r(values);
    ASSERT_EQ(r.outcome().exit_code, 0) << values << r.outcome().err;
    EXPECT_THAT(webhook_objects(r), ElementsAre()) << values;
  }
  // deviceClasses=true renders the DRA objects whatever helm can tell of the cluster.
  const Rendered forced(std::string(kDra) +
                        " --kube-version 1.33.5 --set draDriver.deviceClasses=true");
  ASSERT_EQ(forced.outcome().exit_code, 0) << forced.outcome().err;
  EXPECT_EQ(webhook_objects(forced).size(), 7u);

  const Rendered r(
      std::string(kDra) +
      " --set draDriver.namespaceOverride=neuron"
      " --set draDriver.countRequests.replicas=3 --set draDriver.countRequests.port=8443"
      " --set draDriver.countRequests.failurePolicy=Ignore"
      " --set draDriver.countRequests.timeoutSeconds=5"
      " --set draDriver.countRequests.logLevel=debug"
      " --set draDriver.countRequests.tls.secretName=mine"
      " --set draDriver.countRequests.tls.caBundle=Q0E="
      " --set draDriver.image.repository=reg/t --set draDriver.image.tag=1.2"
      " --set-json draDriver.countRequests.tolerations='[{\"operator\":\"Exists\"}]'");
  ASSERT_EQ(r.outcome().exit_code, 0) << r.outcome().err;
  // Your own certificate: the chart generates none.
  EXPECT_FALSE(r.Get("Secret", "toposched-admission-webhook-tls").IsMap());
  const YAML::Node deployment = r.Get("Deployment", "toposched-admission-webhook");
  EXPECT_EQ(deployment["metadata"]["namespace"].as<std::string>(), "neuron");
  EXPECT_EQ(deployment["spec"]["replicas"].as<int>(), 3);
  const YAML::Node pod = deployment["spec"]["template"]["spec"];
  EXPECT_EQ(pod["volumes"][0]["secret"]["secretName"].as<std::string>(), "mine");
  EXPECT_EQ(pod["tolerations"][0]["operator"].as<std::string>(), "Exists");
  const YAML::Node c = Container(deployment);
  EXPECT_EQ(c["image"].as<std::string>(), "reg/t:1.2");
  EXPECT_THAT(Strings(c["command"]),
              ElementsAre("/usr/local/bin/toposched", "admission-webhook", "--listen",
                          "0.0.0.0:8443", "--tls-cert-file", "/etc/toposched/tls/tls.crt",
                          "--tls-key-file", "/etc/toposched/tls/tls.key", "--log-level", "debug"));
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 8443);
  EXPECT_EQ(r.Get("Service", "toposched-admission-webhook")["spec"]["ports"][0]["port"].as<int>(),
            443);
  EXPECT_EQ(r.Get("ClusterRoleBinding", "toposched-admission-webhook")["subjects"][0]["namespace"]
                .as<std::string>(),
            "neuron");
  for (const YAML::Node& hook :
       r.Get("MutatingWebhookConfiguration", "toposched-neuron-count-requests")["webhooks"]) {
    EXPECT_EQ(hook["clientConfig"]["caBundle"].as<std::string>(), "Q0E=");
    EXPECT_EQ(hook["clientConfig"]["service"]["namespace"].as<std::string>(), "neuron");
    EXPECT_EQ(hook["failurePolicy"].as<std::string>(), "Ignore");
    EXPECT_EQ(hook["timeoutSeconds"].as<int>(), 5);
  }
}

// Off by default; on, the dashboard and the rules are the chart's files as they are (the copies
// in deploy/ are checked by scripts/render-deploy.sh --check).
TEST(HelmChart, GrafanaDashboardAndPrometheusRulesAreOptIn) {
  const Rendered off(kSecondScheduler);
  ASSERT_EQ(off.outcome().exit_code, 0) << off.outcome().err;
  EXPECT_FALSE(off.Get("ConfigMap", "toposched-grafana-dashboard").IsMap());
  EXPECT_FALSE(off.Get("PrometheusRule", "toposched").IsMap());

  const Rendered on(std::string(kSecondScheduler) +
                    " --set grafana.dashboard.enabled=true --set prometheus.rules.enabled=true"
                    " --set grafana.dashboard.namespace=monitoring"
                    " --set prometheus.rules.labels.release=kube-prometheus-stack");
  ASSERT_EQ(on.outcome().exit_code, 0) << on.outcome().err;
  const YAML::Node dashboard = on.Get("ConfigMap", "toposched-grafana-dashboard");
  ASSERT_TRUE(dashboard.IsMap());
  EXPECT_EQ(dashboard["metadata"]["namespace"].as<std::string>(), "monitoring");
  EXPECT_EQ(dashboard["metadata"]["labels"]["grafana_dashboard"].as<std::string>(), "1");
  const std::string files = std::string(kChart) + "/files/";
  const auto trimmed = [](std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  };
  EXPECT_EQ(dashboard["data"]["toposched-dashboard.json"].as<std::string>(),
            trimmed(toposched::testing::ReadWholeFile(files + "grafana/toposched-dashboard.json")));
  const YAML::Node rules = on.Get("PrometheusRule", "toposched");
  ASSERT_TRUE(rules.IsMap());
  EXPECT_EQ(rules["apiVersion"].as<std::string>(), "monitoring.coreos.com/v1");
  EXPECT_EQ(rules["metadata"]["labels"]["release"].as<std::string>(), "kube-prometheus-stack");
  const YAML::Node file =
      YAML::Load(toposched::testing::ReadWholeFile(files + "prometheus/toposched-rules.yaml"));
  EXPECT_EQ(YAML::Dump(rules["spec"]["groups"]), YAML::Dump(file["groups"]));
  EXPECT_GE(rules["spec"]["groups"][0]["rules"].size(), 4u);
}

TEST(HelmChart, RefusesWhatCannotWorkWithTheReason) {
  struct Case {
    const char* values;
    const char* message;
  };
  for (const Case& c : {
           Case{"--set draDriver.enabled=true --set draDriver.deviceClasses=maybe",
                "draDriver.deviceClasses=maybe: expected auto"},
           Case{"--set draDriver.enabled=true --set draDriver.countRequests.failurePolicy=Bogus",
                "draDriver.countRequests.failurePolicy=Bogus: expected Fail"},
           Case{"--set draDriver.enabled=true --set draDriver.countRequests.timeoutSeconds=31",
                "draDriver.countRequests.timeoutSeconds=31: expected 1 to 30"},
           Case{"--set draDriver.enabled=true --set draDriver.countRequests.timeoutSeconds=0",
                "draDriver.countRequests.timeoutSeconds=0: expected 1 to 30"},
           Case{"--set draDriver.enabled=true --set draDriver.countRequests.tls.secretName=mine",
                "draDriver.countRequests.tls.caBundle go together"},
           Case{"--set draDriver.enabled=true --set draDriver.countRequests.tls.caBundle=Q0E=",
                "draDriver.countRequests.tls.caBundle go together"},
           Case{"--set scheduler.enabled=true --set devicePlugin.enabled=false",
                "needs devicePlugin.enabled=true"},
           Case{"--set scheduler.enabled=true --set scheduler.defaultScheduler.enabled=true",
                "mutually exclusive"},
           Case{"--set scheduler.enabled=true --set scheduler.customScheduler.enabled=false",
                "needs one of scheduler.customScheduler.enabled"},
           Case{"--set scheduler.enabled=true --set extender.tls.secretName=mine",
                "needs extender.tls.clientSecretName"},
           Case{"--set scheduler.enabled=true --set extender.tls.clientSecretName=mine",
                "needs extender.tls.secretName"},
           Case{"--set scheduler.enabled=true --set extender.tls.enabled=false",
                "set extender.allowInsecureHttp=true"},
           Case{"--set extender.replicas=0", "/extender/replicas"},
           Case{"--set scheduler.enabled=true --set extender.leaderElection.enabled=false",
                "extender.replicas > 1 needs extender.leaderElection.enabled=true"},
           Case{"--set extender.leaderElection.leaseDuration=15",
                "/extender/leaderElection/leaseDuration"},
           Case{"--set extender.logLevel=loud", "/extender/logLevel"},
           Case{"--set grafana.dashboard.enabled=yes", "/grafana/dashboard/enabled"},
           Case{"--set prometheus.rules.enabled=yes", "/prometheus/rules/enabled"},
           Case{"--set extender.scoringPolicy=random", "/extender/scoringPolicy"},
           Case{"--set extender.httpTimeout=ten", "/extender/httpTimeout"},
           Case{"--set scheduler.enabled=true --set scheduler.customScheduler.image.repository=",
                "scheduler.customScheduler.image.repository is empty"},
           // No patch release to name a kube-scheduler tag after.
           Case{"--set scheduler.enabled=true --kube-version 1.34",
                "has no MAJOR.MINOR.PATCH to take the kube-scheduler tag from"},
       }) {
    const Rendered r(c.values);
    EXPECT_NE(r.outcome().exit_code, 0) << c.values;
    EXPECT_THAT(r.outcome().err, HasSubstr(c.message)) << c.values;
  }
}

}  // namespace
