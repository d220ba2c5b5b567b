// A task trace for the simulator, parsed from CSV text (the Alibaba GPU trace's layout: a header
// naming the columns, then one task per row), and the mapping of a GPU task onto a Neuron request.
// Parsing is pure: the caller reads the file. A row that cannot be read is skipped and counted,
// never fatal; only a text with no usable header is an error.
#ifndef TOPOSCHED_SIM_TRACE_H_
#define TOPOSCHED_SIM_TRACE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::sim {

// The trace `toposched simulate` replays when given none, relative to the current directory.
inline constexpr std::string_view kDefaultTraceRelativePath =
    "data/alibaba-gpu-v2023/openb_pod_list_default.csv";

// kDefaultTraceRelativePath if it exists under the current directory, else the same path under
// the source tree this binary was built from (so an installed binary still finds the data).
std::string DefaultTracePath();

struct Task {
  std::string name;  // the `name` column, or "line N" when the trace has none
  int line = 0;      // 1-based line in the text, for messages
  int num_gpu = 0;
  int gpu_milli = 0;  // share of one GPU when num_gpu is 1; 1000 = the whole GPU
  // Virtual times in seconds. `has_times` is false when the trace has no time columns or this
  // row's times are unusable; `time_problem` then says why (empty when there are no columns).
  bool has_times = false;
  int64_t creation_ns = 0;
  int64_t deletion_ns = 0;
  std::string time_problem;
};

struct Trace {
  std::string source_name;  // as given to ParseTrace; prefixes messages about rows
  std::vector<Task> tasks;
  bool has_time_columns = false;  // both creation_time and deletion_time are present
  int bad_rows = 0;
  std::vector<std::string> warnings;  // the first few bad rows, each with its line number
};

// How many bad-row messages are kept; the rest are only counted.
inline constexpr int kMaxWarnings = 5;

// Parses CSV text. Required columns: num_gpu, gpu_milli. Optional: name, creation_time,
// deletion_time (seconds, integer or decimal). Errors only when the header is unusable.
Result<Trace> ParseTrace(std::string_view text, std::string_view source_name);

// The Neuron request a GPU task maps to (docs/simulator.md):
//   num_gpu > 1, or num_gpu 1 at gpu_milli 1000  -> num_gpu whole devices (aws.amazon.com/neuron)
//   num_gpu 1 below 1000 milli                   -> 1 core up to 500 milli, else 2 cores
//                                                   (aws.amazon.com/neuroncore)
//   num_gpu 0                                    -> nullopt: a CPU-only task, not placed
std::optional<topology::Request> NeuronRequest(const Task& task);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_TRACE_H_
