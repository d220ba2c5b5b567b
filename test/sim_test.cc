// The simulator: trace parsing and the GPU-to-Neuron mapping, exact placements on hand-made
// traces, rejection reasons, fill mode's first failure, determinism, and the CLI's contract.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "topology/catalog.h"

namespace toposched::sim {
namespace {

using topology::Policy;
using topology::Unit;

const topology::Catalog& TestCatalog() { return topology::Catalog::Embedded(); }

using testing::ReadWholeFile;

Trace MustParse(std::string_view text) {
  auto trace = ParseTrace(text, "test.csv");
  EXPECT_TRUE(trace.ok()) << (trace.ok() ? "" : trace.error());
  return trace.ok() ? trace.value() : Trace{};
}

Options MakeOptions(Mode mode, std::string_view fleet) {
  Options options;
  options.mode = mode;
  auto parsed = ParseFleet(fleet, TestCatalog());
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error());
  if (parsed.ok()) options.fleet = parsed.value();
  options.policies = {Policy::kBestFit, Policy::kFirstFit, Policy::kCountOnly};
  return options;
}

SimResult MustSimulate(const Trace& trace, const Options& options) {
  auto result = Simulate(TestCatalog(), trace, options);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error());
  return result.ok() ? result.value() : SimResult{};
}

const PolicyResult& For(const SimResult& result, Policy policy) {
  for (const auto& p : result.policies) {
    if (p.policy == policy) return p;
  }
  ADD_FAILURE() << "no result for " << topology::PolicyName(policy);
  static const PolicyResult kNone;
  return kNone;
}

int Reason(const PolicyResult& p, RejectReason reason) {
  return p.rejected_by_reason[static_cast<int>(reason)];
}

// The devices of `map` whose every core is held by `task` (an index in the trace).
std::vector<int> DevicesHeldBy(const DeviceMap& map, int task) {
  std::vector<int> devices;
  for (int d = 0; d < map.devices; ++d) {
    bool all = true;
    for (int k = 0; k < map.cores_per_device; ++k) {
      all = all && map.core_owner[static_cast<size_t>(d * map.cores_per_device + k)] == task;
    }
    if (all) devices.push_back(d);
  }
  return devices;
}

TEST(SimTrace, MapsGpuTasksOntoNeuronRequests) {
  auto request = [](int num_gpu, int gpu_milli) {
    Task task;
    task.num_gpu = num_gpu;
    task.gpu_milli = gpu_milli;
    return NeuronRequest(task);
  };
  EXPECT_FALSE(request(0, 0).has_value());  // CPU-only
  ASSERT_TRUE(request(1, 1000).has_value());
  EXPECT_EQ(request(1, 1000)->unit, Unit::kDevice);
  EXPECT_EQ(request(1, 1000)->count, 1);
  EXPECT_EQ(request(8, 1000)->count, 8);
  EXPECT_EQ(request(2, 500)->unit, Unit::kDevice);  // several GPUs are whole devices
  EXPECT_EQ(request(1, 500)->unit, Unit::kCore);
  EXPECT_EQ(request(1, 500)->count, 1);
  EXPECT_EQ(request(1, 501)->count, 2);
  EXPECT_EQ(request(1, 810)->count, 2);
  EXPECT_EQ(request(1, 50)->count, 1);
}

TEST(SimTrace, SkipsAndCountsBadRowsWithoutFailing) {
  const std::string text =
      "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "ok-1,1,1000,0,10\n"
      "bad-count,lots,1000,0,10\n"
      "bad-fields,1,1000,0\n"
      "bad-share,1,2000,0,10\n"
      "\"bad-quote,1,1000,0,10\n"
      "bad-negative,-1,1000,0,10\n"
      "\n"
      "\"ok, quoted\",2,1000,5,6\r\n"
      "late,1,1000,9,3\n";  // readable, but unusable for a replay in time
  const Trace trace = MustParse(text);
  EXPECT_EQ(trace.bad_rows, 5);
  ASSERT_EQ(trace.tasks.size(), 3u);
  EXPECT_EQ(trace.tasks[1].name, "ok, quoted");
  EXPECT_EQ(trace.tasks[1].num_gpu, 2);
  EXPECT_EQ(trace.tasks[1].creation_ns, 5'000'000'000);
  EXPECT_FALSE(trace.tasks[2].has_times);
  ASSERT_EQ(trace.warnings.size(), static_cast<size_t>(kMaxWarnings));
  EXPECT_NE(trace.warnings[0].find("test.csv:3"), std::string::npos) << trace.warnings[0];
  EXPECT_NE(trace.warnings[0].find("num_gpu 'lots'"), std::string::npos) << trace.warnings[0];

  // Dynamic mode also skips (and counts) the row whose times cannot be replayed.
  const SimResult result = MustSimulate(trace, MakeOptions(Mode::kDynamic, "inf2.24xlarge=1"));
  EXPECT_EQ(result.bad_rows, 6);
  EXPECT_EQ(result.gpu_tasks, 2);
  EXPECT_EQ(For(result, Policy::kBestFit).placed, 2);
  // Fill mode ignores times, so that row is a task there.
  const SimResult fill = MustSimulate(trace, MakeOptions(Mode::kFill, "inf2.24xlarge=1"));
  EXPECT_EQ(fill.bad_rows, 5);
  EXPECT_EQ(fill.gpu_tasks, 3);
}

TEST(SimTrace, RefusesATextWithoutTheNeededColumns) {
  EXPECT_FALSE(ParseTrace("", "empty.csv").ok());
  auto no_gpu = ParseTrace("name,cpu_milli\na,1000\n", "cpu.csv");
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_NE(no_gpu.error().find("num_gpu"), std::string::npos);
}

TEST(SimTrace, DefaultTraceIsFound) {
  EXPECT_TRUE(std::filesystem::exists(DefaultTracePath())) << DefaultTracePath();
}

TEST(SimFleet, ParsesAndNamesUnknownTypes) {
  auto fleet = ParseFleet("trn1.32xlarge=40, inf2.48xlarge=20", TestCatalog());
  ASSERT_TRUE(fleet.ok()) << fleet.error();
  ASSERT_EQ(fleet->size(), 2u);
  EXPECT_EQ((*fleet)[1].instance_type, "inf2.48xlarge");
  EXPECT_EQ((*fleet)[1].count, 20);
  EXPECT_EQ(FormatFleet(*fleet), "trn1.32xlarge=40,inf2.48xlarge=20");

  auto unknown = ParseFleet("trn9.mega=2", TestCatalog());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("trn9.mega"), std::string::npos) << unknown.error();
  EXPECT_FALSE(ParseFleet("trn1.32xlarge", TestCatalog()).ok());
  EXPECT_FALSE(ParseFleet("trn1.32xlarge=0", TestCatalog()).ok());
  EXPECT_FALSE(ParseFleet("trn1.32xlarge=x", TestCatalog()).ok());
  EXPECT_FALSE(ParseFleet("", TestCatalog()).ok());
  EXPECT_TRUE(ParseFleet(kDefaultDynamicFleet, TestCatalog()).ok());
  EXPECT_TRUE(ParseFleet(kDefaultFillFleet, TestCatalog()).ok());
}

// One trn1.32xlarge (4x4 torus: 1, 4, 8 or 16 aligned devices). Four pods on row 0-3 and one
// on device 4 arrive; the four leave. Then F (1 device), G (4) and H (8) arrive. First-fit puts
// F on device 0, which breaks row 0-3, so G takes 8-11 and H finds no aligned half. Best-fit
// puts F in the already broken row 4-7, G in 0-3, and H gets 8-15.
constexpr std::string_view kTorusTrace =
    "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
    "A,1,1000,0,10\n"
    "B,1,1000,0,10\n"
    "C,1,1000,0,10\n"
    "D,1,1000,0,10\n"
    "E,1,1000,1,100\n"
    "F,1,1000,20,100\n"
    "G,4,1000,30,100\n"
    "H,8,1000,40,100\n";
constexpr int kTaskE = 4, kTaskF = 5, kTaskG = 6, kTaskH = 7;

TEST(SimDynamic, HandMadeTraceGivesTheExactPlacements) {
  const testing::TempDir dir;  // through a file, as the CLI reads it
  const Trace trace = MustParse(ReadWholeFile(dir.WriteFile("torus.csv", kTorusTrace)));
  Options options = MakeOptions(Mode::kDynamic, "trn1.32xlarge=1");
  options.record_report_data = true;
  const SimResult result = MustSimulate(trace, options);
  EXPECT_EQ(result.gpu_tasks, 8);
  EXPECT_DOUBLE_EQ(result.span_s, 100);

  const PolicyResult& best = For(result, Policy::kBestFit);
  EXPECT_EQ(best.placed, 8);
  EXPECT_EQ(best.rejected, 0);
  ASSERT_EQ(best.device_maps.size(), 1u);  // at the peak: E, F, G and H all there
  const DeviceMap& best_map = best.device_maps[0];
  EXPECT_EQ(best_map.node, "trn1.32xlarge-0");
  EXPECT_EQ(DevicesHeldBy(best_map, kTaskE), std::vector<int>({4}));
  EXPECT_EQ(DevicesHeldBy(best_map, kTaskF), std::vector<int>({5}));
  EXPECT_EQ(DevicesHeldBy(best_map, kTaskG), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(DevicesHeldBy(best_map, kTaskH), std::vector<int>({8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_DOUBLE_EQ(best.peak_allocated_share, 14.0 / 16);

  const PolicyResult& first = For(result, Policy::kFirstFit);
  EXPECT_EQ(first.placed, 7);
  EXPECT_EQ(first.rejected, 1);
  EXPECT_EQ(Reason(first, RejectReason::kNoLegalSet), 1);  // 10 devices free, no aligned 8
  EXPECT_EQ(first.rejected_by_request.at("8 devices"), 1);
  ASSERT_EQ(first.device_maps.size(), 1u);
  const DeviceMap& first_map = first.device_maps[0];
  EXPECT_EQ(DevicesHeldBy(first_map, kTaskF), std::vector<int>({0}));
  EXPECT_EQ(DevicesHeldBy(first_map, kTaskG), std::vector<int>({8, 9, 10, 11}));
  EXPECT_TRUE(DevicesHeldBy(first_map, kTaskH).empty());
  EXPECT_DOUBLE_EQ(first.unallocated_when_refused, 10.0 / 16);

  const PolicyResult& count_only = For(result, Policy::kCountOnly);
  EXPECT_EQ(count_only.placed, 8);
  EXPECT_DOUBLE_EQ(count_only.avg_fragmentation, 0.0);  // any free device serves by definition

  // Device-hours: 4 devices for 10 s, E for 99 s, F 80 s, G 4x70 s, H 8x60 s (best-fit).
  EXPECT_NEAR(best.device_hours, (40.0 + 99 + 80 + 280 + 480) / 3600, 1e-9);
  EXPECT_NEAR(first.device_hours, (40.0 + 99 + 80 + 280) / 3600, 1e-9);
  // Everything has left by the end of the replay.
  EXPECT_DOUBLE_EQ(best.devices_allocated_at_end, 0.0);
}

TEST(SimDynamic, CountsNeverLegalAndNoRoomSeparately) {
  // Two devices can never be legal on the torus; the third 8-device pod finds no room at all.
  const Trace trace = MustParse(
      "name,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "pair,2,1000,0,50\n"
      "half-1,8,1000,1,50\n"
      "half-2,8,1000,2,50\n"
      "half-3,8,1000,3,50\n");
  const SimResult result = MustSimulate(trace, MakeOptions(Mode::kDynamic, "trn1.32xlarge=1"));
  const PolicyResult& best = For(result, Policy::kBestFit);
  EXPECT_EQ(best.placed, 2);
  EXPECT_EQ(Reason(best, RejectReason::kNeverLegal), 1);
  EXPECT_EQ(Reason(best, RejectReason::kNoRoom), 1);
  const PolicyResult& count_only = For(result, Policy::kCountOnly);
  EXPECT_EQ(count_only.placed, 2);  // the pair fits, and then half-2 does not
  EXPECT_EQ(Reason(count_only, RejectReason::kNeverLegal), 0);
  EXPECT_EQ(Reason(count_only, RejectReason::kNoRoom), 2);
}

TEST(SimDynamic, CountOnlyPlacesAtLeastAsManyOnASyntheticTrace) {
  // A mix of sizes, arriving and leaving, on a ring node and a torus node.
  std::string text = "name,num_gpu,gpu_milli,creation_time,deletion_time\n";
  const int sizes[] = {1, 2, 4, 1, 8, 1, 2, 1, 4, 1, 1, 2};
  const int milli[] = {1000, 1000, 1000, 300, 1000, 700, 1000, 1000, 1000, 450, 1000, 1000};
  for (int i = 0; i < 60; ++i) {
    const int k = i % 12;
    text += fmt::format("t{},{},{},{},{}\n", i, sizes[k], milli[k], i * 10, i * 10 + 35 + k * 7);
  }
  const SimResult result =
      MustSimulate(MustParse(text), MakeOptions(Mode::kDynamic, "inf2.24xlarge=1,trn1.32xlarge=1"));
  const int bound = For(result, Policy::kCountOnly).placed;
  EXPECT_GE(bound, For(result, Policy::kBestFit).placed);
  EXPECT_GE(bound, For(result, Policy::kFirstFit).placed);
  EXPECT_GT(For(result, Policy::kBestFit).rejected, 0);  // the fleet does saturate
}

TEST(SimFill, ReportsTheShareUnallocatedAtTheFirstFailure) {
  // inf2.24xlarge: 6 devices in a chain. Three singles, then 4 devices (3 free: no room), then
  // a single that still fits.
  const Trace trace = MustParse(
      "name,num_gpu,gpu_milli\n"
      "a,1,1000\n"
      "b,1,1000\n"
      "c,1,1000\n"
      "big,4,1000\n"
      "d,1,1000\n"
      "cpu,0,0\n");
  const SimResult result = MustSimulate(trace, MakeOptions(Mode::kFill, "inf2.24xlarge=1"));
  EXPECT_EQ(result.cpu_only_skipped, 1);
  for (const auto& p : result.policies) {
    SCOPED_TRACE(std::string(topology::PolicyName(p.policy)));
    EXPECT_TRUE(p.failed);
    EXPECT_EQ(p.placed, 4);
    EXPECT_EQ(p.rejected, 1);
    EXPECT_EQ(p.placed_before_first_failure, 3);
    EXPECT_EQ(p.first_failure_task, 3);
    EXPECT_EQ(p.first_failure_request, "4 devices");
    EXPECT_DOUBLE_EQ(p.unallocated_share_at_first_failure, 0.5);
    EXPECT_DOUBLE_EQ(p.devices_allocated_at_first_failure, 3.0);
    EXPECT_DOUBLE_EQ(p.devices_allocated_at_end, 4.0);
  }
  const std::string json = FormatJson(result, "t.csv");
  EXPECT_NE(json.find("\"unallocated_share\":0.5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"first_failure_task\":\"big\""), std::string::npos) << json;
}

TEST(SimFill, CoresCountAsTheirShareOfADevice) {
  // trn2.48xlarge has 4 cores per device at the default LNC; inf2.xlarge has 2.
  const Trace trace = MustParse("num_gpu,gpu_milli\n1,300\n1,800\n");
  const SimResult trn2 = MustSimulate(trace, MakeOptions(Mode::kFill, "trn2.48xlarge=1"));
  EXPECT_DOUBLE_EQ(For(trn2, Policy::kBestFit).devices_allocated_at_end, 0.75);
  const SimResult inf2 = MustSimulate(trace, MakeOptions(Mode::kFill, "inf2.xlarge=1"));
  EXPECT_DOUBLE_EQ(For(inf2, Policy::kBestFit).devices_allocated_at_end, 0.5);
  EXPECT_EQ(For(inf2, Policy::kBestFit).rejected, 1);  // 2 cores after 1: only 1 is left
}

TEST(SimDynamic, RefusesATraceWithoutTimes) {
  const Trace trace = MustParse("name,num_gpu,gpu_milli\na,1,1000\n");
  auto result = Simulate(TestCatalog(), trace, MakeOptions(Mode::kDynamic, "trn1.32xlarge=1"));
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().find("--mode fill"), std::string::npos) << result.error();
}

// The bundled trace, read once for the tests below.
const Trace& DefaultTrace() {
  static const Trace trace = MustParse(ReadWholeFile(std::string(kDefaultTraceRelativePath)));
  return trace;
}

// Its first rows: enough to fill the small fleet many times over, few enough for a fast test
// under the sanitizers (fill mode tries every node for every task once the fleet is full).
Trace DefaultTracePrefix() {
  Trace prefix = DefaultTrace();
  prefix.tasks.resize(std::min<size_t>(prefix.tasks.size(), 1500));
  return prefix;
}

Options DefaultDynamicOptions() {
  Options options = MakeOptions(Mode::kDynamic, kDefaultDynamicFleet);
  options.seed = 7;
  return options;
}

// The default dynamic replay (seed 7), run once and shared.
const SimResult& DefaultDynamicResult() {
  static const SimResult result = MustSimulate(DefaultTrace(), DefaultDynamicOptions());
  return result;
}

TEST(SimDefaultTrace, IsDeterministicForASeed) {
  const std::string once = FormatJson(DefaultDynamicResult(), "default");
  const std::string again =
      FormatJson(MustSimulate(DefaultTrace(), DefaultDynamicOptions()), "default");
  EXPECT_EQ(once, again);

  Options fill = MakeOptions(Mode::kFill, kDefaultDynamicFleet);
  fill.seed = 7;
  const std::string fill_once = FormatJson(MustSimulate(DefaultTracePrefix(), fill), "prefix");
  EXPECT_EQ(fill_once, FormatJson(MustSimulate(DefaultTracePrefix(), fill), "prefix"));
  fill.seed = 8;  // another seed, another order: the first failure moves
  EXPECT_NE(fill_once, FormatJson(MustSimulate(DefaultTracePrefix(), fill), "prefix"));
}

TEST(SimDefaultTrace, DynamicReplaySaturatesTheDefaultFleet) {
  const SimResult& result = DefaultDynamicResult();
  EXPECT_EQ(result.rows, 8152);
  EXPECT_EQ(result.cpu_only_skipped, 1088);
  EXPECT_EQ(result.gpu_tasks, 7064);
  EXPECT_EQ(result.bad_rows, 0);
  const PolicyResult& best = For(result, Policy::kBestFit);
  const PolicyResult& first = For(result, Policy::kFirstFit);
  const PolicyResult& count_only = For(result, Policy::kCountOnly);
  EXPECT_GT(best.rejected, 0);  // the default fleet is sized to saturate at peaks
  EXPECT_GE(best.peak_allocated_share, 0.95);
  // Topology never refuses a count-only pod, and it allocates the most device-hours.
  EXPECT_EQ(Reason(count_only, RejectReason::kNoLegalSet), 0);
  EXPECT_GE(count_only.device_hours, best.device_hours);
  EXPECT_GE(count_only.device_hours, first.device_hours);
  for (const auto& p : result.policies) {
    EXPECT_EQ(p.placed + p.rejected, result.gpu_tasks);
    EXPECT_GT(p.avg_unallocated_share, 0.0);
    EXPECT_LT(p.avg_unallocated_share, 1.0);
  }
}

TEST(SimDefaultTrace, FillModeReportsItsFirstFailure) {
  int64_t last_done = 0;
  int64_t last_total = -1;
  Options options = MakeOptions(Mode::kFill, kDefaultDynamicFleet);
  options.progress = [&](std::string_view, int64_t done, int64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  const SimResult result = MustSimulate(DefaultTracePrefix(), options);
  EXPECT_EQ(last_done, last_total);  // the last report is the whole run
  for (const auto& p : result.policies) {
    EXPECT_TRUE(p.failed);
    EXPECT_GT(p.placed_before_first_failure, 0);
    EXPECT_GE(p.unallocated_share_at_first_failure, 0.0);
    EXPECT_LE(p.unallocated_share_at_first_failure, 1.0);
    EXPECT_EQ(p.placed + p.rejected, result.gpu_tasks);
  }
  const std::string json = FormatJson(result, "prefix");
  EXPECT_NE(json.find("\"unallocated_share\":"), std::string::npos);
  EXPECT_NE(json.find("\"placed_before_first_failure\":"), std::string::npos);
}

TEST(SimReport, HtmlIsSelfContained) {
  const Trace trace = MustParse(kTorusTrace);
  Options options = MakeOptions(Mode::kDynamic, "trn1.32xlarge=1,inf2.24xlarge=1");
  options.record_report_data = true;
  const std::string html = FormatHtml(MustSimulate(trace, options), "<torus>");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  EXPECT_NE(html.find("&lt;torus&gt;"), std::string::npos);  // names are escaped
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no fetches
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

// Runs the built binary; returns its exit code and stdout.
std::pair<int, std::string> RunCli(const std::string& args) {
  testing::Outcome o = testing::RunToposched(args);
  return {o.exit_code, std::move(o.out)};
}

TEST(SimCli, PrintsJsonAndRefusesBadInputWithExitTwo) {
  const testing::TempDir dir;
  const std::string trace = dir.WriteFile("cli.csv", kTorusTrace);
  const std::string no_times = dir.WriteFile("cli_fill.csv", "name,num_gpu,gpu_milli\na,1,1000\n");
  const auto [code, out] =
      RunCli("simulate --json --fleet trn1.32xlarge=1 --policy first-fit --trace " + trace);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.front(), '{');
  // count-only is added to what the user asked for.
  EXPECT_NE(out.find("\"policies\":[{\"name\":\"first-fit\""), std::string::npos) << out;
  EXPECT_NE(out.find("{\"name\":\"count-only\""), std::string::npos) << out;
  EXPECT_EQ(out.find("\"name\":\"best-fit\""), std::string::npos) << out;

  const auto [unknown_code, unknown_out] =
      RunCli("simulate --json --fleet trn9.mega=1 --trace " + trace);
  EXPECT_EQ(unknown_code, 2);
  EXPECT_NE(unknown_out.find("trn9.mega"), std::string::npos) << unknown_out;

  const auto [dynamic_code, dynamic_out] =
      RunCli("simulate --json --mode dynamic --trace " + no_times);
  EXPECT_EQ(dynamic_code, 2);
  EXPECT_NE(dynamic_out.find("--mode fill"), std::string::npos) << dynamic_out;

  const auto [fill_code, fill_out] =
      RunCli("simulate --mode fill --fleet inf2.xlarge=1 --trace " + no_times);
  EXPECT_EQ(fill_code, 0);
  EXPECT_NE(fill_out.find("pods placed"), std::string::npos) << fill_out;

  const auto [missing_code, missing_out] = RunCli("simulate --trace /nonexistent/trace.csv");
  EXPECT_EQ(missing_code, 2);
}

}  // namespace
}  // namespace toposched::sim
