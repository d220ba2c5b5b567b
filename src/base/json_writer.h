// The one writer of JSON that is not a measured hot path: a tree of nlohmann's ordered_json
// (members keep the order they are added in, so the text reads as the code builds it), written
// compact or indented. The hot paths (the extender's filter, prioritize, bind and preempt answers,
// the fleet view's nodes) append by hand with base/json_escape.h, each with a benchmark beside it.
#ifndef TOPOSCHED_BASE_JSON_WRITER_H_
#define TOPOSCHED_BASE_JSON_WRITER_H_

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

namespace toposched {

using JsonTree = nlohmann::ordered_json;

// `tree` as compact JSON text (indent < 0) or indented by `indent` spaces. Never throws: a string
// that is not UTF-8 (a name from the API server, a reason built from one) is written with
// replacement characters instead.
inline std::string WriteJson(const JsonTree& tree, int indent = -1) {
  return tree.dump(indent, ' ', false, JsonTree::error_handler_t::replace);
}

// A figure rounded to the decimals it is worth, so the text is the shortest that reads it back
// (0.5, not 0.500000); null when it is not a number (fmt would write "nan", which is not JSON).
inline JsonTree JsonRounded(double value, int decimals) {
  if (!std::isfinite(value)) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

}  // namespace toposched

#endif  // TOPOSCHED_BASE_JSON_WRITER_H_
