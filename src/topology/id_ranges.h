// Id lists in the compact form people and annotations use: "0-3,8,10-11".
#ifndef TOPOSCHED_TOPOLOGY_ID_RANGES_H_
#define TOPOSCHED_TOPOLOGY_ID_RANGES_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::topology {

// Parses "0-3,8" into {0,1,2,3,8}. Ids must lie in [0, limit); duplicates, reversed ranges and
// stray characters are errors that quote the offending part. An empty string is an empty list.
Result<std::vector<int>> ParseIdRanges(std::string_view text, int limit);

// Formats ascending or unordered ids as ranges: {0,1,2,3,8} -> "0-3,8"; {} -> "none".
std::string FormatIdRanges(std::vector<int> ids);

// Formats as a plain comma list, as the AWS annotations carry them: {0,1,2} -> "0,1,2".
std::string FormatIdList(const std::vector<int>& ids);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_ID_RANGES_H_
