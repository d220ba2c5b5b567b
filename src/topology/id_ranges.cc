#include "topology/id_ranges.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/text.h"

namespace toposched::topology {
namespace {

bool ParseNumber(std::string_view s, int& out) {
  const std::optional<int64_t> value = ParseDecimal(s, 0, 999'999'999);
  if (!value) return false;
  out = static_cast<int>(*value);
  return true;
}

// The ids in the order written, ranges expanded; repeats are the callers' to judge. More than
// `max_ids` is an error (a short text of ranges must not expand without bound).
Result<std::vector<int>> ParseInOrder(std::string_view text, int limit, size_t max_ids) {
  std::vector<int> ids;
  text = TrimSpace(text);
  if (text.empty()) return ids;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view part = TrimSpace(text.substr(0, comma));
    const size_t dash = part.find('-');
    int lo = 0;
    int hi = 0;
    bool ok = false;
    if (dash == std::string_view::npos) {
      ok = ParseNumber(part, lo);
      hi = lo;
    } else {
      ok = ParseNumber(TrimSpace(part.substr(0, dash)), lo) &&
           ParseNumber(TrimSpace(part.substr(dash + 1)), hi);
    }
    if (!ok) {
      return Error{fmt::format("'{}' is not an id or a range like 0-3", part)};
    }
    if (lo > hi) return Error{fmt::format("range '{}' runs backwards", part)};
    if (hi >= limit) {
      return Error{fmt::format("id {} is out of range: ids go from 0 to {}", hi, limit - 1)};
    }
    if (ids.size() + static_cast<size_t>(hi - lo + 1) > max_ids) {
      return Error{fmt::format("lists more than {} ids", max_ids)};
    }
    for (int id = lo; id <= hi; ++id) ids.push_back(id);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return ids;
}

// The first id that stands twice in [begin, end), or -1.
int FirstRepeat(std::vector<int>::const_iterator begin, std::vector<int>::const_iterator end,
                int limit) {
  std::vector<bool> seen(static_cast<size_t>(limit), false);
  for (auto it = begin; it != end; ++it) {
    if (seen[static_cast<size_t>(*it)]) return *it;
    seen[static_cast<size_t>(*it)] = true;
  }
  return -1;
}

}  // namespace

Result<std::vector<int>> ParseIdRanges(std::string_view text, int limit) {
  // One more than the ids there are, so that a repeat is reported as one.
  auto ids = ParseInOrder(text, limit, static_cast<size_t>(std::max(limit, 0)) + 1);
  if (!ids.ok()) return ids;
  if (const int twice = FirstRepeat(ids->begin(), ids->end(), limit); twice >= 0) {
    return Error{fmt::format("id {} is listed twice", twice)};
  }
  std::sort(ids->begin(), ids->end());
  return ids;
}

Result<std::vector<std::vector<int>>> SplitIdGroups(std::string_view text,
                                                    const std::vector<int>& counts, int limit) {
  size_t wanted = 0;
  for (int count : counts) wanted += static_cast<size_t>(std::max(count, 0));
  TOPOSCHED_ASSIGN_OR_RETURN(auto ids, ParseInOrder(text, limit, wanted + 1));
  if (ids.size() != wanted) {
    return Error{fmt::format("lists {} ids but the containers ask for {}", ids.size(), wanted)};
  }
  std::vector<std::vector<int>> groups;
  groups.reserve(counts.size());
  auto next = ids.cbegin();
  for (int count : counts) {
    const auto end = next + std::max(count, 0);
    if (const int twice = FirstRepeat(next, end, limit); twice >= 0) {
      return Error{fmt::format("id {} is listed twice for container {} of the list", twice,
                               groups.size() + 1)};
    }
    groups.emplace_back(next, end);
    next = end;
  }
  return groups;
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

std::string FormatIdList(const std::vector<int>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

}  // namespace toposched::topology
