// `toposched kubectl-neuron` and the same binary run as `kubectl-neuron` (a symlink on PATH makes
// `kubectl neuron ...` work: kubectl runs any kubectl-NAME it finds there). Its own CLI11 app, so
// the plugin's help names it as kubectl shows it.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "kubectl/plugin.h"

namespace toposched::cli {
namespace {

constexpr const char* kDescription =
    "kubectl neuron: see the Neuron fleet that toposched schedules.\n"
    "  nodes          each Neuron node's devices drawn by topology (inf2 ring, inf1 chain, trn\n"
    "                 4x4 torus), a letter per pod holding units, the key below it, and the\n"
    "                 legal sets still free per request class\n"
    "  pods           who holds what: pod, node, request, device or core ids, phase\n"
    "  why POD        per node, why a pending pod does not fit\n"
    "From the API server alone (kubeconfig as kubectl finds it), the extender's views are worked\n"
    "out here from the pods' allocation records; with --extender URL they come from the running\n"
    "extender, which also knows binds in flight and gang seats. Install as a kubectl plugin:\n"
    "  ln -s \"$(command -v toposched)\" /usr/local/bin/kubectl-neuron";

void AddFlags(CLI::App& app, kubectl::PluginOptions& o, std::string& output, int& timeout_s,
              bool& verbose) {
  app.add_option("--kubeconfig", o.kubeconfig,
                 "Kubeconfig file(s), colon-separated; default $KUBECONFIG, then "
                 "~/.kube/config (in a pod: its service account)");
  app.add_option("-n,--namespace", o.ns,
                 "Namespace of `pods` and of a bare pod name in `why`; default the kubeconfig "
                 "context's, else default");
  app.add_flag("-A,--all-namespaces", o.all_namespaces, "`pods`: every namespace");
  app.add_option("--extender", o.extender.url,
                 "The extender's URL, e.g. http://127.0.0.1:12345 after `kubectl -n kube-system "
                 "port-forward svc/toposched-extender 12345`, or https://HOST:PORT; nodes and why "
                 "then come from its /v1/fleet and /v1/why");
  app.add_option("--extender-ca-file", o.extender.ca_file,
                 "PEM CA that signed the extender's serving certificate (https)")
      ->check(CLI::ExistingFile);
  app.add_option("--extender-cert-file", o.extender.cert_file,
                 "PEM client certificate for an extender run with --tls-client-ca-file")
      ->check(CLI::ExistingFile);
  app.add_option("--extender-key-file", o.extender.key_file, "PEM key of --extender-cert-file")
      ->check(CLI::ExistingFile);
  app.add_option("-o,--output", output,
                 "table (fits 80 columns) or json (apiVersion toposched.io/v1; kinds "
                 "NeuronNodeList, NeuronPodList, NeuronPodWhy)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--request-timeout", timeout_s,
                 "Seconds to wait for the API server or the extender")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbose, "Log what the extender code logs while working it out");
}

}  // namespace

int RunKubectlNeuron(int argc, char** argv, const std::string& catalog_path) {
  CLI::App app{kDescription, "kubectl-neuron"};
  app.require_subcommand(1);
  kubectl::PluginOptions o;
  std::string output = "table";
  int timeout_s = 30;
  bool verbose = false;
  AddFlags(app, o, output, timeout_s, verbose);
  app.add_subcommand("nodes", "Each Neuron node's units drawn by topology, with a key")
      ->fallthrough();
  app.add_subcommand("pods", "Pods asking for Neuron devices or cores, and the ids they hold")
      ->fallthrough();
  CLI::App* why = app.add_subcommand("why", "Per node, why a pending pod does not fit");
  why->fallthrough();
  why->add_option("pod", o.pod, "NAME (with -n) or NAMESPACE/NAME")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  // Logs go to stderr: stdout is the answer (and may be JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("kubectl-neuron"));
  spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::off);
  o.command = app.get_subcommands().front()->get_name();
  o.json = output == "json";
  o.request_timeout = std::chrono::seconds(timeout_s);
  o.extender.timeout = o.request_timeout;
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) {
    fmt::print(stderr, "kubectl-neuron: {}\n", catalog.error());
    return kExitUsage;
  }
  o.catalog = *catalog;
  auto answer = kubectl::RunPlugin(o);
  if (!answer.ok()) {
    fmt::print(stderr, "kubectl-neuron: {}\n", answer.error());
    return kExitRefused;
  }
  std::fwrite(answer->data(), 1, answer->size(), stdout);
  return kExitOk;
}

}  // namespace toposched::cli
