// `toposched simulate`: replays a task trace onto a fleet through the production tracker and
// allocator, once per policy, and prints them side by side. The file reading, the terminal and
// the report file are here; the simulation itself (src/sim) is pure.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "cli/commands.h"
#include "sim/dra.h"
#include "sim/gangs.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/synthetic.h"
#include "sim/trace.h"

namespace toposched::cli {

struct SimulateOptions {
  std::string trace;
  std::string fleet;  // empty: the mode's default fleet
  std::string mode = "fill";
  std::string policies = "scarcity,fgd,first-fit,spread,binpack,count-only";
  uint64_t seed = 0;
  std::string synthetic;
  int synthetic_tasks = 5000;
  bool json = false;
  std::string report;
  // --gangs: all-or-nothing against pod-by-pod on a fleet of UltraServers.
  bool gangs = false;
  sim::GangSimOptions gang;
  // --dra: a DRA cluster, where the driver's publish order is the only lever (sim/dra.h).
  bool dra = false;
  sim::FailureOptions failures;
  std::string on_failure = "event";
  double hold_back_hours = 0;
};

namespace {

constexpr char kSimulateHelp[] =
    "Replay a GPU cluster trace onto a fleet of Neuron nodes through the same tracker and\n"
    "allocator the scheduler uses, once per policy, and compare them side by side: pods\n"
    "placed and rejected (by reason), device-hours, the share of devices left unallocated,\n"
    "and fragmentation.\n"
    "\n"
    "Each GPU task becomes one pod:\n"
    "  num_gpu > 1, or 1 at gpu_milli 1000  ->  num_gpu devices (aws.amazon.com/neuron)\n"
    "  num_gpu 1 below 1000 milli          ->  1 core up to 500 milli, else 2 cores\n"
    "                                          (aws.amazon.com/neuroncore)\n"
    "  num_gpu 0                           ->  CPU-only: skipped and counted\n"
    "(2 devices is never legal on trn nodes, only 1, 4, 8 or 16: such pods fit only on inf.)\n"
    "\n"
    "Policies (the node for each pod, and the set on it):\n"
    "  scarcity    ours: the node and set that take least from the requests still expected,\n"
    "              weighted by how few homes each kind of request has left in the fleet\n"
    "              (learned from the pods seen); node order and names do not matter\n"
    "  best-fit    the previous default: the tightest node, the set keeping big blocks whole\n"
    "  first-fit   AWS's: lowest-index sets on the first node in fleet order that fits\n"
    "  spread      kube-scheduler's LeastAllocated: the emptiest node, lowest-index sets\n"
    "  binpack     MostAllocated / HAMi binpack: the fullest node that fits, lowest-index sets\n"
    "  fgd         FGD (ATC'23): the node whose expected fragmentation over the request mix\n"
    "              seen so far grows least, lowest-index sets (fgd-scarcity-sets: with our "
    "sets)\n"
    "  count-only  blind to topology, so never refused for it (always run, as a reference)\n"
    "Ties among baselines go to the first node in fleet order.\n"
    "Unreadable trace rows are skipped and counted. Exit 0 on success, 2 on bad flags or\n"
    "input. Definitions: docs/simulator.md.";

// What is replayed, onto which fleet, how and by whom; returns --trace (others exclude it).
CLI::Option* AddWorkloadFlags(CLI::App* cmd, SimulateOptions& opts) {
  auto* trace = cmd->add_option("--trace", opts.trace,
                                "Trace CSV with columns num_gpu, gpu_milli and, for dynamic mode, "
                                "creation_time and deletion_time (seconds)")
                    ->capture_default_str();
  cmd->add_option("--synthetic", opts.synthetic,
                  fmt::format("Instead of a trace file, generate Neuron-native requests: a named "
                              "mix ({}) or SIZE=WEIGHT pairs with Nd for N devices and 1c/2c for "
                              "cores, e.g. 1d=40,3d=5,6d=5,12d=2,16d=2,1c=10; Poisson arrivals, "
                              "exponential lifetimes, fixed by --seed (docs/simulator.md)",
                              sim::SyntheticMixNames()))
      ->excludes(trace);
  cmd->add_option("--synthetic-tasks", opts.synthetic_tasks, "How many pods --synthetic generates")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000'000));
  cmd->add_option("--fleet", opts.fleet,
                  fmt::format("Nodes as TYPE=COUNT pairs in fleet order, e.g. "
                              "trn1.32xlarge=40,inf2.48xlarge=20 (types from the catalog); "
                              "ipu-pod16=2/4 is 2 shared IPU-PODs reached by 4 head nodes each. "
                              "Default: {} in dynamic and queue mode, {} in fill mode",
                              sim::kDefaultDynamicFleet, sim::kDefaultFillFleet));
  cmd->add_option("--mode", opts.mode,
                  "fill: add tasks in order, none leaving, until the fleet refuses one "
                  "(report the unallocated share then), and go on to the end. queue, the replay "
                  "in time to read: arrivals at the trace's times; a pod that does not fit "
                  "waits, as kube-scheduler keeps it Pending, and is tried again whenever a pod "
                  "leaves; it runs for its trace lifetime from when it starts (wait, "
                  "utilisation, makespan). dynamic: the same times, but a pod that does not fit "
                  "is dropped (the older measure, kept to compare with earlier numbers: it "
                  "rewards a policy for refusing big pods)")
      ->check(CLI::IsMember({"dynamic", "fill", "queue"}))
      ->capture_default_str();
  cmd->add_option("--policy", opts.policies,
                  "Comma-separated policies to compare: scarcity, best-fit, first-fit, spread, "
                  "fgd, fgd-scarcity-sets, "
                  "binpack, count-only (count-only is added when missing: the others are read "
                  "against it)")
      ->capture_default_str();
  cmd->add_option(
         "--seed", opts.seed,
         "0 keeps trace order. Otherwise fill mode shuffles the tasks, and dynamic mode "
         "the order of pods arriving in the same second; with --gangs it picks the generated "
         "stream. The same seed, the same result")
      ->capture_default_str();
  return trace;
}

// What is written besides the table; returns --report (others exclude it).
CLI::Option* AddOutputFlags(CLI::App* cmd, SimulateOptions& opts) {
  cmd->add_flag("--json", opts.json,
                "Print one JSON object on stdout with a 'policies' array (name, placed, rejected, "
                "device_hours, unallocated_share, fragmentation, ...)");
  return cmd->add_option(
      "--report", opts.report,
      "Also write a self-contained HTML page (inline SVG charts: allocation over time "
      "per policy, device maps of a few nodes) to this file");
}

// --gangs and what shapes its stream; returns --gangs.
CLI::Option* AddGangFlags(CLI::App* cmd, SimulateOptions& opts) {
  auto* gangs = cmd->add_flag(
      "--gangs", opts.gangs,
      "Instead of a trace: multi-node jobs on a fleet of Trn2 UltraServers (4 trn2u.48xlarge "
      "nodes each), a generated stream of 4-node gangs (a whole UltraServer), 2-node gangs (a "
      "half) and single pods of 1-16 devices, placed two ways: all-or-nothing (the tracker "
      "reserves every member's node at once, or none) and pod-by-pod (kube-scheduler with "
      "AWS's affinity rules, one member at a time). Compares deadlocked gangs, nodes stranded "
      "by partial gangs, gang wait and single pods. --seed picks the stream");
  cmd->add_option("--ultraservers", opts.gang.ultraservers,
                  "--gangs: UltraServers in the fleet (nodes us<k>-n0..n3)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000))
      ->needs(gangs);
  cmd->add_option("--plain-nodes", opts.gang.plain_nodes,
                  "--gangs: trn2.48xlarge nodes outside any UltraServer (single pods only)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100'000))
      ->needs(gangs);
  cmd->add_option("--gang-jobs", opts.gang.jobs,
                  "--gangs: jobs in the stream (gangs and single pods; 10% 4-node gangs, 15% "
                  "2-node gangs, 75% single pods)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000))
      ->needs(gangs);
  cmd->add_option("--gang-load", opts.gang.load,
                  "--gangs: offered load, the stream's mean device demand as a share of the "
                  "fleet's devices (sets the mean gap between arrivals)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 10.0))
      ->needs(gangs);
  cmd->add_option("--gang-timeout", opts.gang.timeout_s,
                  "--gangs: seconds a gang may sit partly placed, with a member waiting for a "
                  "node, before it counts as deadlocked")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{31}, int64_t{7 * 86400}))
      ->needs(gangs);
  return gangs;
}

// Devices failing and recovering, and what becomes of their pods; returns --device-failure-rate.
CLI::Option* AddFailureFlags(CLI::App* cmd, SimulateOptions& opts) {
  auto* rate =
      cmd->add_option(
             "--device-failure-rate", opts.failures.per_device_day,
             "Devices fail: mean failures per device per day, each device on its own (a Poisson "
             "process drawn from --seed, the same for every policy); 0 = none. Each policy is then "
             "also run without failures and the table adds what failures cost it. In fill mode "
             "(no time) the long-run share of devices is out of service from the start. E.g. "
             "0.01: one failure per device every 100 days")
          ->capture_default_str()
          ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--device-repair-hours", opts.failures.repair_hours,
                  "With --device-failure-rate: mean hours a failed device stays out of service "
                  "(exponential) before it is back")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 8760.0))
      ->needs(rate);
  cmd->add_option("--on-device-failure", opts.on_failure,
                  "With --device-failure-rate, what becomes of a pod holding a device that fails, "
                  "as the extender's flag of the same name: event = it keeps its devices until it "
                  "ends; evict = it is removed and starts again from the beginning (queue mode: it "
                  "waits again; dynamic mode: placed again at once or dropped)")
      ->capture_default_str()
      ->check(CLI::IsMember({"event", "evict"}))
      ->needs(rate);
  return rate;
}

}  // namespace

std::shared_ptr<SimulateOptions> AddSimulateCommand(CLI::App& app) {
  auto opts = std::make_shared<SimulateOptions>();
  opts->trace = sim::DefaultTracePath();
  CLI::App* cmd = app.add_subcommand("simulate", kSimulateHelp);
  CLI::Option* trace = AddWorkloadFlags(cmd, *opts);
  CLI::Option* report = AddOutputFlags(cmd, *opts);
  auto* dra = cmd->add_flag(
      "--dra", opts->dra,
      "Instead of the policies: the trace replayed (fill or dynamic mode) into a DRA cluster, "
      "where "
      "kube-scheduler's DRA allocator takes the first free published device and the driver's "
      "publish order is the only lever: a naive driver's index order against toposched "
      "dra-plugin's scarcity order, each with fleet-order and least-allocated node choice. "
      "See docs/dra.md");
  dra->excludes(report);
  CLI::Option* gangs = AddGangFlags(cmd, *opts);
  gangs->excludes(trace)->excludes(report)->excludes(dra);
  CLI::Option* rate = AddFailureFlags(cmd, *opts);
  cmd->add_option(
         "--hold-back-hours", opts->hold_back_hours,
         "Queue mode: ours (scarcity) lets smaller waiting pods go first, the rule the "
         "extender applies with its own --hold-back-hours. A pod that has waited less than this "
         "many hours does "
         "not start while the smaller pods waiting, of classes that fit now, need more devices "
         "than its start would leave free; past it, queue order. 0 = off (ours as the "
         "extender places). The matrix favoured 24 (docs/simulator.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 8760.0));
  for (const char* name : {"--synthetic", "--synthetic-tasks", "--fleet", "--mode", "--policy",
                           "--device-failure-rate", "--hold-back-hours"}) {
    gangs->excludes(cmd->get_option(name));
  }
  dra->excludes(rate);
  return opts;
}

namespace {

int Fail(const SimulateOptions& opts, const std::string& message) {
  if (opts.json) {
    fmt::print("{}\n", WriteJson({{"error", message}}));
  } else {
    fmt::print(stderr, "error: {}\n", message);
  }
  return kExitUsage;
}

Result<std::vector<topology::Policy>> ParsePolicies(std::string_view text) {
  std::vector<topology::Policy> policies;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view name = text.substr(pos, comma - pos);
    pos = comma + 1;
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name.empty()) continue;
    auto policy = topology::ParsePolicy(name);
    if (!policy.ok()) return Error{"--policy: " + policy.error()};
    if (std::find(policies.begin(), policies.end(), *policy) == policies.end()) {
      policies.push_back(*policy);
    }
  }
  // The topology-blind reference is what the other columns are read against.
  if (std::find(policies.begin(), policies.end(), topology::Policy::kCountOnly) == policies.end()) {
    policies.push_back(topology::Policy::kCountOnly);
  }
  return policies;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("cannot read trace file {}", path)};
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{fmt::format("error reading trace file {}", path)};
  return text.str();
}

// A one-line bar on stderr, redrawn when the percentage changes.
class ProgressBar {
 public:
  void Update(std::string_view policy, int64_t done, int64_t total) {
    const int percent = total == 0 ? 100 : static_cast<int>(100 * done / total);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    fmt::print(stderr, "\r[{:#<{}}{:<{}}] {:3}% {:<10}", "", filled, "", kWidth - filled, percent,
               policy);
    std::fflush(stderr);
  }
  void Clear() {
    if (last_percent_ >= 0) fmt::print(stderr, "\r\033[K");
  }

 private:
  int last_percent_ = -1;
};

Result<sim::Trace> LoadTrace(const SimulateOptions& opts) {
  if (!opts.synthetic.empty()) {
    auto trace = sim::SyntheticTrace(opts.synthetic, opts.synthetic_tasks, opts.seed);
    if (!trace.ok()) return Error{"--synthetic: " + trace.error()};
    return trace;
  }
  TOPOSCHED_ASSIGN_OR_RETURN(std::string text, ReadFile(opts.trace));
  return sim::ParseTrace(text, opts.trace);
}

int RunDra(const SimulateOptions& opts, const topology::Catalog& catalog,
           const std::vector<sim::FleetGroup>& fleet) {
  auto trace = LoadTrace(opts);
  if (!trace.ok()) return Fail(opts, trace.error());
  if (opts.mode == "queue") return Fail(opts, "--dra: fill or dynamic mode (--mode)");
  const sim::Mode mode = opts.mode == "fill" ? sim::Mode::kFill : sim::Mode::kDynamic;
  auto results = mode == sim::Mode::kFill
                     ? sim::SimulateDraFill(catalog, trace.value(), fleet, opts.seed)
                     : sim::SimulateDraDynamic(catalog, trace.value(), fleet);
  if (!results.ok()) return Fail(opts, results.error());
  fmt::print("{}", opts.json ? sim::FormatDraJson(results.value())
                             : sim::FormatDraTable(results.value(), trace->source_name,
                                                   sim::FormatFleet(fleet), mode));
  return kExitOk;
}

}  // namespace

int RunSimulate(const SimulateOptions& opts, const std::string& catalog_path) {
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) return Fail(opts, catalog.error());
  if (opts.gangs) {
    sim::GangSimOptions gang = opts.gang;
    gang.seed = opts.seed;
    auto result = sim::SimulateGangs(*catalog.value(), gang);
    if (!result.ok()) return Fail(opts, result.error());
    fmt::print("{}", opts.json ? sim::FormatGangJson(result.value())
                               : sim::FormatGangTable(result.value()));
    return kExitOk;
  }
  const sim::Mode mode = opts.mode == "fill"    ? sim::Mode::kFill
                         : opts.mode == "queue" ? sim::Mode::kQueue
                                                : sim::Mode::kDynamic;
  const std::string fleet_spec =
      opts.fleet.empty() ? std::string(sim::DefaultFleet(mode)) : opts.fleet;
  auto fleet = sim::ParseFleet(fleet_spec, *catalog.value());
  if (!fleet.ok()) return Fail(opts, "--fleet: " + fleet.error());
  if (opts.dra) return RunDra(opts, *catalog.value(), fleet.value());
  auto policies = ParsePolicies(opts.policies);
  if (!policies.ok()) return Fail(opts, policies.error());

  Result<sim::Trace> trace = LoadTrace(opts);
  if (!trace.ok()) return Fail(opts, trace.error());
  const std::string& trace_name = trace->source_name;

  sim::Options options;
  options.mode = mode;
  options.fleet = fleet.value();
  options.policies = policies.value();
  options.seed = opts.seed;
  options.record_report_data = !opts.report.empty();
  options.failures = opts.failures;
  options.failures.evict = opts.on_failure == "evict";
  if (opts.hold_back_hours > 0 && mode != sim::Mode::kQueue) {
    return Fail(opts, "--hold-back-hours is for --mode queue (the other modes have no queue)");
  }
  options.hold_back_age_ns = static_cast<int64_t>(opts.hold_back_hours * 3600e9);
  ProgressBar bar;
  // Only a person at a terminal wants the bar; pipes and JSON consumers get clean output.
  if (!opts.json && isatty(STDERR_FILENO) == 1) {
    options.progress = [&bar](std::string_view policy, int64_t done, int64_t total) {
      bar.Update(policy, done, total);
    };
  }
  auto result = sim::Simulate(*catalog.value(), trace.value(), options);
  bar.Clear();
  if (!result.ok()) {
    return Fail(opts, fmt::format("{} ({})", result.error(), trace_name));
  }

  if (opts.json) {
    // stdout carries only the JSON; the skipped rows are said on stderr as well.
    for (const auto& warning : result->warnings) fmt::print(stderr, "warning: {}\n", warning);
    if (result->bad_rows > 0) {
      fmt::print(stderr, "warning: {} bad rows skipped in all\n", result->bad_rows);
    }
    fmt::print("{}", sim::FormatJson(result.value(), trace_name));
  } else {
    fmt::print("{}", sim::FormatTable(result.value(), trace_name));
  }

  if (!opts.report.empty()) {
    std::ofstream out(opts.report, std::ios::binary | std::ios::trunc);
    out << sim::FormatHtml(result.value(), trace_name);
    out.close();
    if (!out) {
      fmt::print(stderr, "error: cannot write report {}\n", opts.report);
      return kExitUsage;
    }
    fmt::print(stderr, "report written to {}\n", opts.report);
  }
  return kExitOk;
}

}  // namespace toposched::cli
