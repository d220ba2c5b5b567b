#include "topology/id_ranges.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace toposched::topology {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseNumber(std::string_view s, int& out) {
  if (s.empty() || s.size() > 9) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

Result<std::vector<int>> ParseIdRanges(std::string_view text, int limit) {
  std::vector<int> ids;
  text = Trim(text);
  if (text.empty()) return ids;
  std::vector<bool> seen(static_cast<size_t>(limit), false);
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view part = Trim(text.substr(0, comma));
    const size_t dash = part.find('-');
    int lo = 0;
    int hi = 0;
    bool ok = false;
    if (dash == std::string_view::npos) {
      ok = ParseNumber(part, lo);
      hi = lo;
    } else {
      ok = ParseNumber(Trim(part.substr(0, dash)), lo) && ParseNumber(Trim(part.substr(dash + 1)), hi);
    }
    if (!ok) {
      return Error{fmt::format("'{}' is not an id or a range like 0-3", part)};
    }
    if (lo > hi) return Error{fmt::format("range '{}' runs backwards", part)};
    if (hi >= limit) {
      return Error{fmt::format("id {} is out of range: ids go from 0 to {}", hi, limit - 1)};
    }
    for (int id = lo; id <= hi; ++id) {
      if (seen[static_cast<size_t>(id)]) return Error{fmt::format("id {} is listed twice", id)};
      seen[static_cast<size_t>(id)] = true;
      ids.push_back(id);
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string FormatIdRanges(std::vector<int> ids) {
  if (ids.empty()) return "none";
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[j]);
    i = j + 1;
  }
  return out;
}

std::string FormatIdList(const std::vector<int>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

}  // namespace toposched::topology
