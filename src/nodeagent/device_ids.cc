#include "nodeagent/device_ids.h"

#include <algorithm>

#include <fmt/format.h>

namespace toposched::nodeagent {

std::string UnitId(topology::Unit unit, int index) {
  return fmt::format("{}{}", unit == topology::Unit::kDevice ? kDeviceIdPrefix : kCoreIdPrefix,
                     index);
}

Result<int> ParseUnitId(topology::Unit unit, std::string_view id, int limit) {
  const std::string_view prefix = unit == topology::Unit::kDevice ? kDeviceIdPrefix : kCoreIdPrefix;
  const std::string_view what = unit == topology::Unit::kDevice ? "device" : "core";
  if (id.size() <= prefix.size() || id.substr(0, prefix.size()) != prefix) {
    return Error{
        fmt::format("'{}' is not a {} id of this plugin (expected {}N)", id, what, prefix)};
  }
  const std::string_view digits = id.substr(prefix.size());
  if (digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) {
    return Error{fmt::format("'{}' is not a {} id of this plugin", id, what)};
  }
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      return Error{
          fmt::format("'{}' is not a {} id of this plugin (expected {}N)", id, what, prefix)};
    }
    value = value * 10 + (c - '0');
  }
  if (value >= limit) {
    return Error{
        fmt::format("{} id '{}' is out of range: this node has {} {}s", what, id, limit, what)};
  }
  return value;
}

Result<std::vector<int>> ParseUnitIds(topology::Unit unit, const std::vector<std::string>& ids,
                                      int limit) {
  std::vector<int> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto parsed, ParseUnitId(unit, id, limit));
    out.push_back(parsed);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    return Error{"the same id is listed twice"};
  }
  return out;
}

std::vector<std::string> UnitIds(topology::Unit unit, const std::vector<int>& indexes) {
  std::vector<std::string> out;
  out.reserve(indexes.size());
  for (int index : indexes) out.push_back(UnitId(unit, index));
  return out;
}

}  // namespace toposched::nodeagent
