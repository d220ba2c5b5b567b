// libFuzzer target for ParseTarget (net/url_query.h), which reads the target of every GET the
// extender's views answer: never crashes, never yields a NUL or control byte, never more than
// kMaxQueryParams parameters.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/url_query.h"

namespace {
bool Clean(std::string_view s) {
  for (char c : s) {
    if (c == '\0') return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  auto query = toposched::net::ParseTarget(target);
  if (!query.ok()) return 0;
  if (query->params.size() > toposched::net::kMaxQueryParams) std::abort();
  if (!Clean(query->path)) std::abort();
  for (const auto& [k, v] : query->params) {
    if (!Clean(k) || !Clean(v)) std::abort();
  }
  return 0;
}
