// Renders a simulation result: the text table the terminal shows, the --json object, and the
// self-contained HTML report (inline SVG, no scripts or external files). Pure string building.
#ifndef TOPOSCHED_SIM_REPORT_H_
#define TOPOSCHED_SIM_REPORT_H_

#include <string>
#include <string_view>

#include "sim/simulator.h"

namespace toposched::sim {

// `trace_name` is how the trace is named in the output (its path).
std::string FormatTable(const SimResult& result, std::string_view trace_name);
// One JSON object, one line, ending in a newline. Same result, same bytes.
std::string FormatJson(const SimResult& result, std::string_view trace_name);
// Needs a result simulated with Options::record_report_data for its charts.
std::string FormatHtml(const SimResult& result, std::string_view trace_name);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_REPORT_H_
