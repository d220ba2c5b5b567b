#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/json_writer.h"
#include "draw/html.h"
#include "draw/line_chart.h"
#include "draw/node_svg.h"

namespace toposched::sim {
namespace {

using draw::HtmlEscape;
using topology::PolicyName;
using topology::RequestLabel;

// One line of the comparison table: a label and a cell per policy.
struct Row {
  std::string label;
  std::vector<std::string> cells;
  bool indent = false;
};

std::string Grouped(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string GroupedFixed(double value, int decimals) {
  if (value < 0) return "-" + GroupedFixed(-value, decimals);
  const double scale = std::pow(10.0, decimals);
  const long long scaled = std::llround(value * scale);
  const long long whole = scaled / static_cast<long long>(scale);
  const long long frac = std::llabs(scaled % static_cast<long long>(scale));
  if (decimals == 0) return Grouped(whole);
  return fmt::format("{}.{:0{}}", Grouped(whole), frac, decimals);
}

std::string Percent(double share) { return fmt::format("{:.1f}%", 100.0 * share); }

int Reason(const PolicyResult& p, RejectReason reason) {
  return p.rejected_by_reason[static_cast<int>(reason)];
}

int Refusals(const PolicyResult& p) {
  return Reason(p, RejectReason::kNoRoom) + Reason(p, RejectReason::kNoLegalSet);
}

template <typename Fn>
Row MakeRow(const SimResult& result, std::string label, Fn&& cell, bool indent = false) {
  Row row{std::move(label), {}, indent};
  for (const auto& p : result.policies) row.cells.push_back(cell(p));
  return row;
}

// The same policy's run without failures (Options::failures).
const PolicyResult& Healthy(const SimResult& r, const PolicyResult& p) {
  for (const auto& h : r.without_failures) {
    if (h.policy == p.policy) return h;
  }
  return p;
}

// With failures on: what they did to each policy's pods, and what they cost it against the same
// policy's run without them (the measure each mode's verdict reads).
void AddFailureRows(const SimResult& r, std::vector<Row>& rows) {
  if (!r.failures.enabled()) return;
  if (r.mode != Mode::kFill) {
    rows.push_back(MakeRow(r, "pods on a device that failed",
                           [](const PolicyResult& p) { return Grouped(p.pods_hit); }));
  }
  if (r.failures.evict && r.mode != Mode::kFill) {
    rows.push_back(MakeRow(
        r, "evicted, started again", [](const PolicyResult& p) { return Grouped(p.evicted); },
        true));
    if (r.mode == Mode::kDynamic) {
      rows.push_back(MakeRow(
          r, "evicted, no node took it",
          [](const PolicyResult& p) { return Grouped(p.dropped_after_eviction); }, true));
    }
    rows.push_back(MakeRow(
        r, "work lost (device-hours)",
        [](const PolicyResult& p) { return GroupedFixed(p.lost_device_hours, 1); }, true));
  }
  if (r.mode == Mode::kQueue) {
    rows.push_back(MakeRow(r, "cost: mean wait added (hours)", [&r](const PolicyResult& p) {
      return GroupedFixed((p.mean_wait_s - Healthy(r, p).mean_wait_s) / 3600, 2);
    }));
    rows.push_back(MakeRow(r, "cost: p95 wait added (hours)", [&r](const PolicyResult& p) {
      return GroupedFixed((p.p95_wait_s - Healthy(r, p).p95_wait_s) / 3600, 2);
    }));
  } else if (r.mode == Mode::kDynamic) {
    rows.push_back(MakeRow(r, "cost: pods rejected added", [&r](const PolicyResult& p) {
      return Grouped(p.rejected - Healthy(r, p).rejected);
    }));
  } else {
    rows.push_back(MakeRow(r, "cost: fewer placed before failing", [&r](const PolicyResult& p) {
      return Grouped(Healthy(r, p).placed_before_first_failure - p.placed_before_first_failure);
    }));
  }
}

// Queue mode: p95 and max wait per request class, so a starved size shows even when the mean
// looks fine. A class whose pods all still wait under a policy shows "-" there.
void AddClassWaitRows(const SimResult& r, std::vector<Row>& rows) {
  std::map<RequestClassKey, topology::Request> classes;
  for (const PolicyResult& p : r.policies) {
    for (const auto& c : p.wait_by_request) classes.emplace(ClassKeyOf(c.request), c.request);
  }
  if (classes.empty()) return;
  rows.push_back(MakeRow(r, "p95 / max wait per request (hours)",
                         [](const PolicyResult&) { return std::string(); }));
  for (const auto& entry : classes) {
    const RequestClassKey key = entry.first;  // a structured binding: clang-14 can't capture
    rows.push_back(MakeRow(
        r, RequestLabel(entry.second),
        [key](const PolicyResult& p) {
          for (const auto& c : p.wait_by_request) {
            if (ClassKeyOf(c.request) == key) {
              return GroupedFixed(c.p95_s / 3600, 2) + " / " + GroupedFixed(c.max_s / 3600, 2);
            }
          }
          return std::string("-");
        },
        true));
  }
}

std::vector<Row> TableRows(const SimResult& r) {
  std::vector<Row> rows;
  rows.push_back(
      MakeRow(r, "pods placed", [](const PolicyResult& p) { return Grouped(p.placed); }));
  if (r.mode == Mode::kQueue) {
    // Nothing is dropped for lack of room: pods wait. Only never-legal counts are refused.
    rows.push_back(
        MakeRow(r, "pods that waited", [](const PolicyResult& p) { return Grouped(p.waited); }));
    rows.push_back(MakeRow(r, "still waiting at the end",
                           [](const PolicyResult& p) { return Grouped(p.still_waiting); }));
    rows.push_back(MakeRow(r, "mean wait (hours)", [](const PolicyResult& p) {
      return GroupedFixed(p.mean_wait_s / 3600, 2);
    }));
    rows.push_back(MakeRow(r, "p95 wait (hours)", [](const PolicyResult& p) {
      return GroupedFixed(p.p95_wait_s / 3600, 2);
    }));
    rows.push_back(MakeRow(r, "max wait (hours)", [](const PolicyResult& p) {
      return GroupedFixed(p.max_wait_s / 3600, 2);
    }));
    rows.push_back(MakeRow(r, "device-weighted mean wait (hours)", [](const PolicyResult& p) {
      return GroupedFixed(p.device_weighted_mean_wait_s / 3600, 2);
    }));
    AddClassWaitRows(r, rows);
    rows.push_back(MakeRow(r, "waiting while units were free",
                           [](const PolicyResult& p) { return Percent(p.fragmented_wait_share); }));
    rows.push_back(MakeRow(r, "device-hours allocated",
                           [](const PolicyResult& p) { return GroupedFixed(p.device_hours, 1); }));
    rows.push_back(MakeRow(r, "allocated share, time-weighted",
                           [](const PolicyResult& p) { return Percent(p.avg_allocated_share); }));
    rows.push_back(MakeRow(r, "makespan (days)", [](const PolicyResult& p) {
      return GroupedFixed(p.makespan_s / 86400, 2);
    }));
    rows.push_back(MakeRow(r, "count never legal (refused)", [](const PolicyResult& p) {
      return Grouped(Reason(p, RejectReason::kNeverLegal));
    }));
    AddFailureRows(r, rows);
    return rows;
  }
  rows.push_back(
      MakeRow(r, "pods rejected", [](const PolicyResult& p) { return Grouped(p.rejected); }));
  for (RejectReason reason :
       {RejectReason::kNoRoom, RejectReason::kNoLegalSet, RejectReason::kNeverLegal}) {
    rows.push_back(MakeRow(
        r, std::string(RejectReasonLabel(reason)),
        [reason](const PolicyResult& p) { return Grouped(Reason(p, reason)); }, true));
  }
  if (r.mode == Mode::kDynamic) {
    rows.push_back(MakeRow(r, "device-hours allocated",
                           [](const PolicyResult& p) { return GroupedFixed(p.device_hours, 1); }));
    rows.push_back(MakeRow(r, "unallocated share, time-weighted",
                           [](const PolicyResult& p) { return Percent(p.avg_unallocated_share); }));
    rows.push_back(MakeRow(r, "unallocated share when refusing", [](const PolicyResult& p) {
      return Refusals(p) == 0 ? std::string("-") : Percent(p.unallocated_when_refused);
    }));
    rows.push_back(MakeRow(r, "fragmentation, time-weighted",
                           [](const PolicyResult& p) { return Percent(p.avg_fragmentation); }));
    rows.push_back(MakeRow(r, "peak allocated share",
                           [](const PolicyResult& p) { return Percent(p.peak_allocated_share); }));
  } else {
    rows.push_back(MakeRow(r, "placed before the first failure", [](const PolicyResult& p) {
      return p.failed ? Grouped(p.placed_before_first_failure) : std::string("none failed");
    }));
    rows.push_back(MakeRow(r, "the first pod to fail asked for", [](const PolicyResult& p) {
      return p.failed ? p.first_failure_request : std::string("-");
    }));
    rows.push_back(MakeRow(r, "unallocated share at first failure", [](const PolicyResult& p) {
      return p.failed ? Percent(p.unallocated_share_at_first_failure) : std::string("-");
    }));
    rows.push_back(MakeRow(r, "devices allocated at first failure", [](const PolicyResult& p) {
      return p.failed ? GroupedFixed(p.devices_allocated_at_first_failure, 2) : std::string("-");
    }));
    rows.push_back(MakeRow(r, "fragmentation at first failure", [](const PolicyResult& p) {
      return p.failed ? Percent(p.fragmentation_at_first_failure) : std::string("-");
    }));
    rows.push_back(MakeRow(r, "devices allocated at end (count)", [](const PolicyResult& p) {
      return GroupedFixed(p.devices_allocated_at_end, 2);
    }));
    rows.push_back(MakeRow(r, "unallocated share at end", [](const PolicyResult& p) {
      return Percent(p.unallocated_share_at_end);
    }));
  }
  AddFailureRows(r, rows);
  return rows;
}

std::vector<std::string> HeaderLines(const SimResult& r, std::string_view trace_name) {
  std::vector<std::string> lines;
  lines.push_back(
      fmt::format("toposched simulate: {} mode, trace {}", ModeName(r.mode), trace_name));
  lines.push_back(fmt::format(
      "  trace: {} rows: {} GPU tasks replayed ({} ask for devices, {} for "
      "cores),",
      Grouped(r.rows), Grouped(r.gpu_tasks), Grouped(r.device_requests), Grouped(r.core_requests)));
  lines.push_back(fmt::format("         {} CPU-only tasks skipped, {} bad rows skipped",
                              Grouped(r.cpu_only_skipped), Grouped(r.bad_rows)));
  lines.push_back(fmt::format("  fleet: {} nodes, {} devices: {}", r.nodes, r.total_devices,
                              FormatFleet(r.fleet)));
  const std::string order =
      r.seed == 0 ? "trace order"
                  : (r.mode == Mode::kFill ? "tasks shuffled" : "same-second arrivals shuffled");
  if (r.mode != Mode::kFill) {
    lines.push_back(fmt::format("  time:  {:.1f} days of virtual time; seed {} ({})",
                                r.span_s / 86400.0, r.seed, order));
  } else {
    lines.push_back(fmt::format("  order: seed {} ({}); no pod leaves", r.seed, order));
  }
  if (r.failures.enabled()) {
    const FailureOptions& f = r.failures;
    if (r.mode == Mode::kFill) {
      lines.push_back(fmt::format(
          "  failures: {} of {} devices out of service throughout ({:.2f} per device per day, "
          "{:g} h to repair: {:.2f}% out in the long run)",
          r.device_failures, r.total_devices, f.per_device_day, f.repair_hours,
          100 * SteadyOutShare(f)));
    } else {
      lines.push_back(fmt::format(
          "  failures: {:.3g} per device per day, {:g} h to repair on average: {} failures, "
          "{} device-hours out of service;",
          f.per_device_day, f.repair_hours, r.device_failures,
          GroupedFixed(r.device_hours_out, 1)));
      lines.push_back(fmt::format(
          "            a pod on a failed device {}",
          f.evict ? "is evicted and starts again (evict)" : "keeps it until it ends (event)"));
    }
    lines.push_back("            cost: against the same policy without failures (same seed)");
  }
  return lines;
}

// The few lines under the table that say how to read it. (Each text starts with a newline so
// that its lines line up in the source; it is dropped.)
constexpr std::string_view kNotesCommon = R"(
How to read it: each column is the same pods on the same fleet; only the policy differs.
scarcity is ours (the set and node that take least from the requests still expected, by how
few homes each has left); first-fit is AWS's (lowest ids, first node), spread and binpack are
kube-scheduler's LeastAllocated and MostAllocated node scoring with AWS's lowest-index sets,
fgd is FGD (ATC'23): the node whose expected fragmentation grows least, with the same sets.
count-only ignores topology (any free units will do), so it never refuses a pod for topology:
its gap to the others is what the topology rules cost. It bounds each decision, not the run:
accepting a big pod that topology refuses can crowd out several small ones later, so compare
allocated devices as well as pods. 'no legal set free': a node that could take the pod had
enough free devices or cores, but not as a set the Neuron runtime accepts (consecutive ids on
inf, aligned rows on trn): that is fragmentation. 'no room on eligible nodes': too few free
units on every node whose type could take it. 'count never legal': no type in the fleet can.
)";
constexpr std::string_view kNotesDynamic = R"(
A rejected pod is dropped, not queued. Shares are of all devices, a core counting as its part
of a device; time-weighted ones cover the whole replay, quiet stretches included.
)";
constexpr std::string_view kNotesQueue = R"(
A pod that does not fit waits, as kube-scheduler keeps it Pending, and is tried again in arrival
order each time a pod leaves; a big pod that does not fit never blocks smaller ones. It runs for
its trace lifetime from when it starts. 'waiting while units were free': of all the pod-time
spent waiting, the share during which a node that could take the pod had enough free units, but
not as a legal set: what fragmentation costs in time.
)";
constexpr std::string_view kNotesFill = R"(
First failure: the first pod refused for lack of room; the share of devices still unallocated
then is FGD's (ATC'23) waste measure, lower is better. No time passes: devices are counted.
)";
constexpr std::string_view kNotesFragmentation = R"(
Fragmentation: 1 - (sum over nodes of the largest legal device set still free) / (free devices);
0% = no waste. Definitions, the GPU-to-Neuron mapping and the fleet: docs/simulator.md.
)";

// The policies ours is compared with (count-only ignores topology: a reference, not a rival).
bool IsBaseline(topology::Policy policy) {
  return policy == topology::Policy::kFirstFit || policy == topology::Policy::kSpread ||
         policy == topology::Policy::kBinpack || policy == topology::Policy::kFgd ||
         policy == topology::Policy::kFgdScarcitySets;
}

// One line comparing ours with the strongest baseline that ran (never the kindest): fill mode by
// the unallocated share at the first failure, dynamic mode by pods placed.
std::string Verdict(const SimResult& r) {
  const PolicyResult* ours = nullptr;
  const PolicyResult* rival = nullptr;
  const bool fill = r.mode == Mode::kFill;
  const bool queue = r.mode == Mode::kQueue;
  auto better = [&](const PolicyResult& a, const PolicyResult& b) {
    if (queue) return a.mean_wait_s < b.mean_wait_s;
    return fill ? a.unallocated_share_at_first_failure < b.unallocated_share_at_first_failure
                : a.placed > b.placed;
  };
  for (const auto& p : r.policies) {
    if (p.policy == topology::Policy::kScarcity) ours = &p;
    if (IsBaseline(p.policy) && (rival == nullptr || better(p, *rival))) rival = &p;
  }
  if (ours == nullptr || rival == nullptr) return {};
  if (fill) {
    return fmt::format(
        "scarcity left {:.1f}% of the devices unallocated at its first failure; the best "
        "baseline here, {}, left {:.1f}% ({:+.1f} points).\n",
        100 * ours->unallocated_share_at_first_failure, PolicyName(rival->policy),
        100 * rival->unallocated_share_at_first_failure,
        100 *
            (ours->unallocated_share_at_first_failure - rival->unallocated_share_at_first_failure));
  }
  if (queue) {
    return fmt::format(
        "scarcity: mean wait {:.2f} h (device-weighted {:.2f} h), {:.1f} device-hours; the best "
        "baseline here by wait, {}: {:.2f} h ({:.2f} h), {:.1f} device-hours.\n",
        ours->mean_wait_s / 3600, ours->device_weighted_mean_wait_s / 3600, ours->device_hours,
        PolicyName(rival->policy), rival->mean_wait_s / 3600,
        rival->device_weighted_mean_wait_s / 3600, rival->device_hours);
  }
  return fmt::format("scarcity placed {} pods; the best baseline here, {}, placed {} ({:+d}).\n",
                     ours->placed, PolicyName(rival->policy), rival->placed,
                     ours->placed - rival->placed);
}

// The rows on which baselines beat ours, each with its reason and the baselines ahead on it.
class Leads {
 public:
  void Add(std::string row, std::string who, std::string why) {
    for (Lead& l : leads_) {
      if (l.row == row && l.why == why) {
        l.who.push_back(std::move(who));
        return;
      }
    }
    leads_.push_back({std::move(row), std::move(why), {std::move(who)}});
  }
  std::string Text() const {
    if (leads_.empty()) return {};
    std::string out = "Where a baseline is ahead of ours, and why:\n";
    for (const Lead& l : leads_) {
      out += fmt::format("  {}: {} — {}.\n", l.row, fmt::join(l.who, ", "), l.why);
    }
    return out;
  }

 private:
  struct Lead {
    std::string row;  // the table's row, and ours on it
    std::string why;
    std::vector<std::string> who;  // "spread 600"
  };
  std::vector<Lead> leads_;
};

constexpr std::string_view kLoss = "a loss of ours";

void DynamicLeads(Leads& leads, const PolicyResult& ours, const PolicyResult& b,
                  const std::string& name) {
  if (b.placed > ours.placed) {
    leads.Add(
        fmt::format("pods placed (ours {}, {:.0f} device-hours)", ours.placed, ours.device_hours),
        fmt::format("{} {} ({:.0f} device-hours)", name, b.placed, b.device_hours),
        b.device_hours < ours.device_hours
            ? "fewer device-hours: when a pod that does not fit is dropped, refusing big "
              "pods wins pods; --mode queue is the measure that does not reward it"
            : std::string(kLoss));
  }
}

void FillLeads(Leads& leads, const PolicyResult& ours, const PolicyResult& b,
               const std::string& name) {
  const std::string ours_devices_end = fmt::format("{:.1f}", ours.devices_allocated_at_end);
  if (b.unallocated_share_at_first_failure + 1e-9 < ours.unallocated_share_at_first_failure) {
    leads.Add("unallocated share at first failure",
              fmt::format("{} {:.1f}%", name, 100 * b.unallocated_share_at_first_failure),
              std::string(kLoss));
  } else if (b.placed_before_first_failure > ours.placed_before_first_failure) {
    leads.Add(
        fmt::format("placed before the first failure (ours {})", ours.placed_before_first_failure),
        fmt::format("{} {}", name, b.placed_before_first_failure),
        "smaller pods: it had not allocated more devices when it failed");
  }
  if (b.placed > ours.placed) {
    const bool same = std::abs(b.devices_allocated_at_end - ours.devices_allocated_at_end) < 0.05;
    leads.Add(fmt::format("pods placed, and so rejected (ours {} placed in {} devices)",
                          ours.placed, ours_devices_end),
              fmt::format("{} {} in {:.1f}", name, b.placed, b.devices_allocated_at_end),
              same || b.devices_allocated_at_end < ours.devices_allocated_at_end
                  ? "after the first failure the run goes on and small pods fill what is left, "
                    "so this count rewards ending on small pods; the packing measure is the "
                    "first failure"
                  : std::string(kLoss));
  }
  if (b.unallocated_share_at_first_failure > ours.unallocated_share_at_first_failure &&
      b.fragmentation_at_first_failure < ours.fragmentation_at_first_failure) {
    leads.Add(fmt::format("fragmentation at first failure (ours {:.1f}%)",
                          100 * ours.fragmentation_at_first_failure),
              fmt::format("{} {:.1f}%", name, 100 * b.fragmentation_at_first_failure),
              "each policy is measured at its own first failure, and these failed with more "
              "devices free");
  }
}

// Wait is the measure; the other rows are read against it.
void QueueLeads(Leads& leads, const PolicyResult& ours, const PolicyResult& b,
                const std::string& name) {
  constexpr double kSameSeconds = 18;  // 0.005 h: the table's rounding
  const bool waits_less = b.mean_wait_s < ours.mean_wait_s - kSameSeconds;
  if (waits_less) {
    leads.Add(fmt::format("mean wait (ours {:.2f} h)", ours.mean_wait_s / 3600),
              fmt::format("{} {:.2f} h", name, b.mean_wait_s / 3600), std::string(kLoss));
  }
  if (b.device_weighted_mean_wait_s < ours.device_weighted_mean_wait_s - kSameSeconds) {
    leads.Add(fmt::format("device-weighted mean wait (ours {:.2f} h)",
                          ours.device_weighted_mean_wait_s / 3600),
              fmt::format("{} {:.2f} h", name, b.device_weighted_mean_wait_s / 3600),
              "a loss of ours: its bigger pods waited longer (the scorer protects the mix of "
              "requests it expects, not the pods waiting now)");
  }
  for (const auto& c : ours.wait_by_request) {
    for (const auto& bc : b.wait_by_request) {
      // Starved: past 1.5x the baseline's p95 for the same size, with 0.1 h of slack.
      if (ClassKeyOf(bc.request) != ClassKeyOf(c.request) || c.p95_s <= 1.5 * bc.p95_s + 360) {
        continue;
      }
      leads.Add(
          fmt::format("p95 wait of {} (ours {:.2f} h)", RequestLabel(c.request), c.p95_s / 3600),
          fmt::format("{} {:.2f} h", name, bc.p95_s / 3600),
          "a loss of ours: more than 1.5x the baseline's wait for that size");
    }
  }
  if (!waits_less && b.waited < ours.waited) {
    leads.Add(fmt::format("pods that waited (ours {})", ours.waited),
              fmt::format("{} {}", name, b.waited),
              "fewer pods waited, but longer: the mean wait is not below ours");
  }
  if (!waits_less && b.p95_wait_s < ours.p95_wait_s) {
    leads.Add(fmt::format("p95 wait (ours {:.2f} h)", ours.p95_wait_s / 3600),
              fmt::format("{} {:.2f} h", name, b.p95_wait_s / 3600),
              "not the lower mean wait: the waits above the 95th percentile weigh more");
  }
  if (!waits_less && b.fragmented_wait_share < ours.fragmented_wait_share) {
    leads.Add(fmt::format("waiting while units were free (ours {:.1f}%)",
                          100 * ours.fragmented_wait_share),
              fmt::format("{} {:.1f}%", name, 100 * b.fragmented_wait_share),
              "a share of each policy's own total wait, which is not below ours");
  }
  if (b.still_waiting < ours.still_waiting) {
    leads.Add(fmt::format("still waiting at the end (ours {})", ours.still_waiting),
              fmt::format("{} {}", name, b.still_waiting), std::string(kLoss));
  }
  if (b.device_hours > ours.device_hours + 0.05) {
    leads.Add(fmt::format("device-hours and allocated share (ours {:.0f})", ours.device_hours),
              fmt::format("{} {:.0f}", name, b.device_hours),
              ours.still_waiting == 0 && b.still_waiting == 0
                  ? "every pod ran its whole lifetime under each policy, so the difference is "
                    "only where core pods ran (a core is half a device on inf2 and trn1, a "
                    "quarter on trn2 at LNC 2): ours did the same work in less capacity"
                  : std::string(kLoss));
  }
  if (b.makespan_s < ours.makespan_s - 1) {
    leads.Add(fmt::format("makespan (ours {:.1f} days)", ours.makespan_s / 86400),
              fmt::format("{} {:.1f}", name, b.makespan_s / 86400), std::string(kLoss));
  }
}

// Every row of the table on which a baseline beats ours, one line per row and reason, so that a
// newcomer never reads a baseline's win without its reason (docs/simulator.md, "How to read the
// comparison"). A row with no known reason is called a loss, plainly.
std::string BaselineLeads(const SimResult& r) {
  const PolicyResult* ours = nullptr;
  for (const auto& p : r.policies) {
    if (p.policy == topology::Policy::kScarcity) ours = &p;
  }
  if (ours == nullptr) return {};
  Leads leads;
  for (const auto& b : r.policies) {
    if (!IsBaseline(b.policy)) continue;
    const std::string name(PolicyName(b.policy));
    switch (r.mode) {
      case Mode::kDynamic:
        DynamicLeads(leads, *ours, b, name);
        break;
      case Mode::kFill:
        FillLeads(leads, *ours, b, name);
        break;
      case Mode::kQueue:
        QueueLeads(leads, *ours, b, name);
        break;
    }
  }
  return leads.Text();
}

std::string ReadingNotes(const SimResult& r) {
  std::string notes(kNotesCommon.substr(1));
  notes += (r.mode == Mode::kDynamic ? kNotesDynamic
            : r.mode == Mode::kQueue ? kNotesQueue
                                     : kNotesFill)
               .substr(1);
  notes += kNotesFragmentation.substr(1);
  return notes;
}

JsonTree Hours(double seconds, int decimals) { return JsonRounded(seconds / 3600.0, decimals); }

std::string_view PolicyColour(topology::Policy policy) {
  switch (policy) {
    case topology::Policy::kScarcity:
      return "#1b9e77";
    case topology::Policy::kBestFit:
      return "#66a61e";
    case topology::Policy::kFirstFit:
      return "#d95f02";
    case topology::Policy::kSpread:
      return "#e7298a";
    case topology::Policy::kBinpack:
      return "#a6761d";
    case topology::Policy::kCountOnly:
      return "#7570b3";
    case topology::Policy::kFgd:
      return "#1f78b4";
    case topology::Policy::kFgdScarcitySets:
      return "#a6cee3";
  }
  return "#444";
}

// Where the charts end: the whole replay in dynamic mode. In fill mode the fleet stays full once
// it is full, so the charts stop a little after the last change in allocation and keep the
// filling readable.
double ChartEnd(const SimResult& r) {
  double end = 0;
  double last_change = 0;
  for (const auto& p : r.policies) {
    if (p.timeline.empty()) continue;
    end = std::max(end, p.timeline.back().x);
    for (size_t i = 1; i < p.timeline.size(); ++i) {
      if (p.timeline[i].allocated_share != p.timeline[i - 1].allocated_share) {
        last_change = std::max(last_change, p.timeline[i].x);
      }
    }
  }
  if (r.mode == Mode::kFill) end = std::min(end, std::ceil(last_change * 1.25) + 10);
  return end > 0 ? end : 1;
}

// One line per policy over time (or tasks tried), of `value` (a share when `percent`).
std::string PolicyChart(const SimResult& r, bool percent,
                        double (*value)(const UtilizationPoint&)) {
  const bool dynamic = r.mode != Mode::kFill;
  const double unit = dynamic ? 86400.0 : 1.0;  // days, or tasks
  std::vector<draw::Series> series;
  for (const auto& p : r.policies) {
    draw::Series line{std::string(PolicyName(p.policy)), std::string(PolicyColour(p.policy)), {}};
    line.points.reserve(p.timeline.size());
    for (const auto& point : p.timeline) line.points.emplace_back(point.x / unit, value(point));
    series.push_back(std::move(line));
  }
  draw::ChartAxes axes;
  axes.percent = percent;
  axes.x_label = dynamic ? "days of virtual time" : "tasks tried (in order)";
  axes.x_max = ChartEnd(r) / unit;
  return draw::LineChart(series, axes);
}

std::string Legend(const SimResult& r) {
  std::string out = "<p class=\"legend\">";
  for (const auto& p : r.policies) {
    out += fmt::format("<span><i style=\"background:{}\"></i>{}</span> ", PolicyColour(p.policy),
                       PolicyName(p.policy));
  }
  return out + "</p>\n";
}

// Each node as its topology (draw::NodeSvg), a pod's colour by its index in the trace.
std::string DeviceMapSvgs(const std::vector<DeviceMap>& maps,
                          const std::vector<std::string>& task_names) {
  std::string out;
  for (const DeviceMap& m : maps) {
    std::vector<draw::Owner> owners;
    std::map<int, int> index;  // task -> owner
    draw::NodePicture node{m.node, m.instance_type, m.type, m.devices, m.cores_per_device, {}, {}};
    node.core_owner.reserve(m.core_owner.size());
    for (int task : m.core_owner) {
      if (task < 0) {
        node.core_owner.push_back(-1);
        continue;
      }
      auto [it, added] = index.emplace(task, static_cast<int>(owners.size()));
      if (added) {
        const auto t = static_cast<size_t>(task);
        std::string name = t < task_names.size() ? task_names[t] : std::to_string(task);
        owners.push_back({name, name, draw::OwnerColour(task), ""});
      }
      node.core_owner.push_back(it->second);
    }
    out += draw::NodeSvg(node, owners) + "\n";
  }
  return out;
}

}  // namespace

std::string FormatTable(const SimResult& result, std::string_view trace_name) {
  std::string out;
  for (const auto& line : HeaderLines(result, trace_name)) out += line + "\n";
  for (const auto& warning : result.warnings) out += "  warning: " + warning + "\n";
  if (result.bad_rows > static_cast<int>(result.warnings.size())) {
    out += fmt::format("  ({} more bad rows not shown)\n",
                       result.bad_rows - static_cast<int>(result.warnings.size()));
  }
  out += "\n";
  const std::vector<Row> rows = TableRows(result);
  size_t label_width = 0;
  for (const auto& row : rows) label_width = std::max(label_width, row.label.size() + 2);
  size_t cell_width = 10;
  for (const auto& p : result.policies)
    cell_width = std::max(cell_width, PolicyName(p.policy).size());
  for (const auto& row : rows) {
    for (const auto& cell : row.cells) cell_width = std::max(cell_width, cell.size());
  }
  out += fmt::format("{:<{}}", "", label_width);
  for (const auto& p : result.policies)
    out += fmt::format("  {:>{}}", PolicyName(p.policy), cell_width);
  out += "\n";
  for (const auto& row : rows) {
    out += fmt::format("{:<{}}", (row.indent ? "  " : "") + row.label, label_width);
    for (const auto& cell : row.cells) out += fmt::format("  {:>{}}", cell, cell_width);
    out += "\n";
  }
  if (const std::string verdict = Verdict(result); !verdict.empty()) out += "\n" + verdict;
  out += BaselineLeads(result);
  out += "\n" + ReadingNotes(result);
  return out;
}

namespace {

// One policy's queue-mode figures: wait, work done, and wait per request class.
void AddQueueJson(JsonTree& out, const PolicyResult& p) {
  out["device_hours"] = JsonRounded(p.device_hours, 3);
  out["unallocated_share"] = JsonRounded(p.avg_unallocated_share, 6);
  out["waited"] = p.waited;
  out["still_waiting"] = p.still_waiting;
  out["mean_wait_hours"] = Hours(p.mean_wait_s, 4);
  out["p95_wait_hours"] = Hours(p.p95_wait_s, 4);
  out["fragmented_wait_share"] = JsonRounded(p.fragmented_wait_share, 6);
  out["makespan_hours"] = Hours(p.makespan_s, 3);
  out["peak_allocated_share"] = JsonRounded(p.peak_allocated_share, 6);
  out["max_wait_hours"] = Hours(p.max_wait_s, 4);
  out["device_weighted_mean_wait_hours"] = Hours(p.device_weighted_mean_wait_s, 4);
  JsonTree by_request = JsonTree::object();
  for (const auto& c : p.wait_by_request) {
    by_request[topology::RequestLabel(c.request)] = {{"pods", c.pods},
                                                     {"mean_wait_hours", Hours(c.mean_s, 4)},
                                                     {"p95_wait_hours", Hours(c.p95_s, 4)},
                                                     {"max_wait_hours", Hours(c.max_s, 4)}};
  }
  out["wait_by_request"] = std::move(by_request);
}

// One policy's dynamic-mode figures.
void AddDynamicJson(JsonTree& out, const PolicyResult& p) {
  out["device_hours"] = JsonRounded(p.device_hours, 3);
  out["unallocated_share"] = JsonRounded(p.avg_unallocated_share, 6);
  out["unallocated_share_when_refused"] =
      Refusals(p) == 0 ? JsonTree(nullptr) : JsonRounded(p.unallocated_when_refused, 6);
  out["fragmentation"] = JsonRounded(p.avg_fragmentation, 6);
  out["peak_allocated_share"] = JsonRounded(p.peak_allocated_share, 6);
  out["peak_at_hours"] = Hours(p.peak_at_s, 3);
}

// One policy's fill-mode figures: the fleet at the first refusal and at the end.
void AddFillJson(JsonTree& out, const SimResult& r, const PolicyResult& p) {
  const bool named =
      p.first_failure_task >= 0 && static_cast<size_t>(p.first_failure_task) < r.task_names.size();
  out["device_hours"] = nullptr;
  out["unallocated_share"] = JsonRounded(p.unallocated_share_at_first_failure, 6);
  out["fragmentation"] = JsonRounded(p.fragmentation_at_first_failure, 6);
  out["failed"] = p.failed;
  out["first_failure_task"] =
      named ? JsonTree(r.task_names[static_cast<size_t>(p.first_failure_task)]) : JsonTree(nullptr);
  out["first_failure_request"] = p.failed ? JsonTree(p.first_failure_request) : JsonTree(nullptr);
  out["placed_before_first_failure"] = p.placed_before_first_failure;
  out["devices_allocated_at_first_failure"] = JsonRounded(p.devices_allocated_at_first_failure, 3);
  out["devices_allocated"] = JsonRounded(p.devices_allocated_at_end, 3);
  out["unallocated_share_at_end"] = JsonRounded(p.unallocated_share_at_end, 6);
  out["fragmentation_at_end"] = JsonRounded(p.fragmentation_at_end, 6);
}

// What failures cost one policy, beside its run without them.
JsonTree FailureJson(const SimResult& r, const PolicyResult& p) {
  const PolicyResult& h = Healthy(r, p);
  return {{"pods_hit", p.pods_hit},
          {"evicted", p.evicted},
          {"dropped_after_eviction", p.dropped_after_eviction},
          {"lost_device_hours", JsonRounded(p.lost_device_hours, 3)},
          {"without_failures",
           {{"placed", h.placed},
            {"rejected", h.rejected},
            {"device_hours", JsonRounded(h.device_hours, 3)},
            {"mean_wait_hours", Hours(h.mean_wait_s, 4)},
            {"p95_wait_hours", Hours(h.p95_wait_s, 4)},
            {"placed_before_first_failure", h.placed_before_first_failure},
            {"unallocated_share_at_first_failure",
             JsonRounded(h.unallocated_share_at_first_failure, 6)}}}};
}

// One policy's object of the "policies" array.
JsonTree PolicyJson(const SimResult& r, const PolicyResult& p) {
  JsonTree by_reason = JsonTree::object();
  for (int k = 0; k < kRejectReasons; ++k) {
    by_reason[std::string(RejectReasonKey(static_cast<RejectReason>(k)))] = p.rejected_by_reason[k];
  }
  JsonTree by_request = JsonTree::object();
  for (const auto& [label, count] : p.rejected_by_request) by_request[label] = count;
  JsonTree out = {{"name", PolicyName(p.policy)},
                  {"placed", p.placed},
                  {"rejected", p.rejected},
                  {"rejected_by_reason", std::move(by_reason)},
                  {"rejected_by_request", std::move(by_request)}};
  if (r.mode == Mode::kQueue) {
    AddQueueJson(out, p);
  } else if (r.mode == Mode::kDynamic) {
    AddDynamicJson(out, p);
  } else {
    AddFillJson(out, r, p);
  }
  if (r.failures.enabled()) out["failures"] = FailureJson(r, p);
  return out;
}

JsonTree FleetJson(const SimResult& r) {
  JsonTree fleet = JsonTree::array();
  for (const auto& group : r.fleet) {
    JsonTree entry = {{"instance_type", group.instance_type}, {"count", group.count}};
    if (group.heads > 0) entry["heads"] = group.heads;
    fleet.push_back(std::move(entry));
  }
  return fleet;
}

}  // namespace

std::string FormatJson(const SimResult& r, std::string_view trace_name) {
  const bool timed = r.mode == Mode::kDynamic || r.mode == Mode::kQueue;
  JsonTree out = {{"mode", ModeName(r.mode)},
                  {"trace", trace_name},
                  {"seed", r.seed},
                  {"fleet", FleetJson(r)},
                  {"nodes", r.nodes},
                  {"total_devices", r.total_devices},
                  {"rows", r.rows},
                  {"gpu_tasks", r.gpu_tasks},
                  {"device_requests", r.device_requests},
                  {"core_requests", r.core_requests},
                  {"cpu_only_skipped", r.cpu_only_skipped},
                  {"bad_rows", r.bad_rows},
                  {"warnings", r.warnings}};
  if (timed) out["span_hours"] = Hours(r.span_s, 3);
  out["unallocated_share_meaning"] = timed ? "time-weighted average over the replay"
                                           : "share of devices unallocated when the first pod "
                                             "failed for lack of room (at the end if none failed)";
  JsonTree policies = JsonTree::array();
  for (const PolicyResult& p : r.policies) policies.push_back(PolicyJson(r, p));
  out["policies"] = std::move(policies);
  if (r.failures.enabled()) {
    out["failures"] = {{"per_device_day", JsonRounded(r.failures.per_device_day, 6)},
                       {"repair_hours", JsonRounded(r.failures.repair_hours, 3)},
                       {"on_failure", r.failures.evict ? "evict" : "event"},
                       {"device_failures", r.device_failures},
                       {"device_hours_out", JsonRounded(r.device_hours_out, 3)}};
  }
  return WriteJson(out) + "\n";
}

std::string FormatHtml(const SimResult& r, std::string_view trace_name) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>toposched simulate</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
      "table{border-collapse:collapse;margin:12px 0}\n"
      "td,th{padding:3px 12px;border-bottom:1px solid #ddd;text-align:right}\n"
      "td:first-child,th:first-child{text-align:left}\n"
      "td.indent{padding-left:28px}\n"
      ".legend span{margin-right:18px}\n"
      ".legend i{display:inline-block;width:14px;height:4px;margin:0 6px 3px 0}\n"
      ".scroll{overflow-x:auto}\npre{white-space:pre-wrap}\n"
      ".nodes{display:flex;flex-wrap:wrap;gap:8px}\n"
      "</style></head><body>\n<h1>toposched simulate</h1>\n<pre>";
  for (const auto& line : HeaderLines(r, trace_name)) out += HtmlEscape(line) + "\n";
  for (const auto& warning : r.warnings) out += "  warning: " + HtmlEscape(warning) + "\n";
  out += "</pre>\n<table><tr><th></th>";
  for (const auto& p : r.policies) out += fmt::format("<th>{}</th>", PolicyName(p.policy));
  out += "</tr>\n";
  for (const auto& row : TableRows(r)) {
    out += fmt::format("<tr><td{}>{}</td>", row.indent ? " class=\"indent\"" : "",
                       HtmlEscape(row.label));
    for (const auto& cell : row.cells) out += "<td>" + HtmlEscape(cell) + "</td>";
    out += "</tr>\n";
  }
  out += "</table>\n<p>" + HtmlEscape(ReadingNotes(r)) + "</p>\n";

  out += fmt::format("<h2>Allocated share of the fleet's devices, {}</h2>\n",
                     r.mode != Mode::kFill ? "over virtual time" : "as tasks are added");
  out += Legend(r);
  out += "<div class=\"scroll\">" +
         PolicyChart(r, true, [](const UtilizationPoint& p) { return p.allocated_share; }) +
         "</div>\n";
  out +=
      "<p>Each line keeps the highest value within each pixel column, so short peaks show; "
      "where lines overlap, the last policy drawn is on top.";
  if (r.mode == Mode::kFill) {
    out +=
        " The charts stop a little after the fleet's allocation last changed: from there on it "
        "stays full and only the rejections grow.";
  }
  out += "</p>\n";
  if (r.mode == Mode::kQueue) {
    out += "<h2>Pods waiting</h2>\n" + Legend(r);
    out += "<div class=\"scroll\">" +
           PolicyChart(r, false,
                       [](const UtilizationPoint& p) { return static_cast<double>(p.waiting); }) +
           "</div>\n";
  } else {
    out += "<h2>Pods rejected so far</h2>\n" + Legend(r);
    out += "<div class=\"scroll\">" +
           PolicyChart(r, false,
                       [](const UtilizationPoint& p) { return static_cast<double>(p.rejected); }) +
           "</div>\n";
  }

  out +=
      "<h2>Device maps</h2>\n<p>Each node drawn as its topology (a ring, a chain, a torus's rows), "
      "a "
      "box per device split into its cores; each pod has its own colour (hover for its name), "
      "grey is free. Up to two nodes of each type.</p>\n";
  for (const auto& p : r.policies) {
    out += fmt::format("<h3 style=\"color:{}\">{}, {}</h3>\n", PolicyColour(p.policy),
                       PolicyName(p.policy), HtmlEscape(p.device_maps_moment));
    if (p.device_maps.empty()) {
      out += "<p>(no device map recorded)</p>\n";
      continue;
    }
    out += "<div class=\"nodes\">" + DeviceMapSvgs(p.device_maps, r.task_names) + "</div>\n";
  }
  out += "</body></html>\n";
  return out;
}

}  // namespace toposched::sim
