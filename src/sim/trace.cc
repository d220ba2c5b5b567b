#include "sim/trace.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "base/text.h"

namespace toposched::sim {
namespace {

// Beyond this a time in seconds would overflow int64 nanoseconds (and no trace spans centuries).
constexpr double kMaxSeconds = 9.0e9;
// Larger counts are surely typos; refusing them keeps the arithmetic in int.
constexpr int kMaxGpusPerTask = 1'000'000;

// Splits one CSV line. Double-quoted fields may hold commas, and "" stands for one quote.
// Returns false on an unterminated quote or text after a closing quote.
bool SplitCsvLine(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  size_t i = 0;
  while (true) {
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return false;
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',') return false;
    } else {
      const size_t end = std::min(line.find(',', i), line.size());
      field.assign(line.substr(i, end - i));
      i = end;
    }
    fields.push_back(std::move(field));
    if (i >= line.size()) return true;
    ++i;  // the comma
  }
}

std::optional<int> ParseInt(std::string_view s) {
  s = TrimSpace(s);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

// Seconds, integer or decimal, to nanoseconds.
std::optional<int64_t> ParseSeconds(std::string_view s) {
  s = TrimSpace(s);
  double seconds = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), seconds);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxSeconds) return std::nullopt;
  return std::llround(seconds * 1e9);
}

struct Columns {
  int name = -1;
  int num_gpu = -1;
  int gpu_milli = -1;
  int creation = -1;
  int deletion = -1;
  size_t count = 0;
};

// Returns the reason the row is bad, or empty when `task` was filled in.
std::string ReadRow(const Columns& cols, const std::vector<std::string>& fields, Task& task) {
  if (fields.size() != cols.count) {
    return fmt::format("{} fields where the header has {}", fields.size(), cols.count);
  }
  if (cols.name >= 0) task.name = std::string(TrimSpace(fields[static_cast<size_t>(cols.name)]));
  if (task.name.empty()) task.name = fmt::format("line {}", task.line);

  const std::string_view gpu_text = fields[static_cast<size_t>(cols.num_gpu)];
  const std::optional<int> num_gpu = ParseInt(gpu_text);
  if (!num_gpu || *num_gpu < 0 || *num_gpu > kMaxGpusPerTask) {
    return fmt::format("num_gpu '{}' is not a count from 0 to {}", TrimSpace(gpu_text),
                       kMaxGpusPerTask);
  }
  task.num_gpu = *num_gpu;
  const std::string_view milli_text = fields[static_cast<size_t>(cols.gpu_milli)];
  if (TrimSpace(milli_text).empty() && task.num_gpu == 0) {
    task.gpu_milli = 0;  // CPU-only rows may leave the share empty
  } else {
    const std::optional<int> milli = ParseInt(milli_text);
    if (!milli || *milli < 0 || *milli > 1000) {
      return fmt::format("gpu_milli '{}' is not a share from 0 to 1000", TrimSpace(milli_text));
    }
    task.gpu_milli = *milli;
  }

  if (cols.creation >= 0 && cols.deletion >= 0) {
    const std::string_view created = fields[static_cast<size_t>(cols.creation)];
    const std::string_view deleted = fields[static_cast<size_t>(cols.deletion)];
    const std::optional<int64_t> c = ParseSeconds(created);
    const std::optional<int64_t> d = ParseSeconds(deleted);
    // A bad time spoils only a time-driven replay, so it is recorded rather than refused here.
    if (!c) {
      task.time_problem =
          fmt::format("creation_time '{}' is not a time in seconds", TrimSpace(created));
    } else if (!d) {
      task.time_problem =
          fmt::format("deletion_time '{}' is not a time in seconds", TrimSpace(deleted));
    } else if (*d < *c) {
      task.time_problem = fmt::format("deletion_time {} is before creation_time {}",
                                      TrimSpace(deleted), TrimSpace(created));
    } else {
      task.has_times = true;
      task.creation_ns = *c;
      task.deletion_ns = *d;
    }
  }
  return {};
}

}  // namespace

std::string DefaultTracePath() {
  const std::filesystem::path relative{std::string(kDefaultTraceRelativePath)};
  std::error_code ec;
  if (std::filesystem::exists(relative, ec)) return relative.string();
  const std::filesystem::path built_from = std::filesystem::path(TOPOSCHED_SOURCE_DIR) / relative;
  if (std::filesystem::exists(built_from, ec)) return built_from.string();
  return relative.string();  // missing everywhere: the error then names the usual path
}

Result<Trace> ParseTrace(std::string_view text, std::string_view source_name) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte-order mark
  Trace trace;
  trace.source_name = std::string(source_name);
  Columns cols;
  bool have_header = false;
  std::vector<std::string> fields;
  int line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (TrimSpace(line).empty()) continue;

    if (!have_header) {
      if (!SplitCsvLine(line, fields)) {
        return Error{
            fmt::format("{}:{}: the header line is not valid CSV", source_name, line_number)};
      }
      cols.count = fields.size();
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string_view column = TrimSpace(fields[i]);
        const int index = static_cast<int>(i);
        if (column == "name") cols.name = index;
        if (column == "num_gpu") cols.num_gpu = index;
        if (column == "gpu_milli") cols.gpu_milli = index;
        if (column == "creation_time") cols.creation = index;
        if (column == "deletion_time") cols.deletion = index;
      }
      if (cols.num_gpu < 0 || cols.gpu_milli < 0) {
        return Error{
            fmt::format("{}:{}: the header needs columns num_gpu and gpu_milli (found: {})",
                        source_name, line_number, line)};
      }
      trace.has_time_columns = cols.creation >= 0 && cols.deletion >= 0;
      have_header = true;
      continue;
    }

    Task task;
    task.line = line_number;
    std::string problem =
        SplitCsvLine(line, fields) ? ReadRow(cols, fields, task) : std::string("unbalanced quotes");
    if (!problem.empty()) {
      ++trace.bad_rows;
      if (static_cast<int>(trace.warnings.size()) < kMaxWarnings) {
        trace.warnings.push_back(
            fmt::format("{}:{}: skipped: {}", source_name, line_number, problem));
      }
      continue;
    }
    trace.tasks.push_back(std::move(task));
  }
  if (!have_header) return Error{fmt::format("{}: the trace is empty", source_name)};
  return trace;
}

std::optional<topology::Request> NeuronRequest(const Task& task) {
  if (task.num_gpu == 0) return std::nullopt;
  if (task.num_gpu > 1 || task.gpu_milli >= 1000) {
    return topology::Request{topology::Unit::kDevice, task.num_gpu};
  }
  // A GPU share: half a GPU or less is one core, more is two (an inf2/trn1 device has two).
  return topology::Request{topology::Unit::kCore, task.gpu_milli <= 500 ? 1 : 2};
}

}  // namespace toposched::sim
