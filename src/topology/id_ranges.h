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

// Splits `text`, every container's ids one after another, into consecutive groups of counts[i]
// ids, in the order written (not sorted): an init container that reuses its pod's ids lists them
// again, so an id may stand in several groups, never twice in one. The parser behind
// claims::SplitAwsIds, which owns the AWS_NEURON_IDS annotation and its order.
// Errors quote the part: not an id or a range, outside [0, limit), twice in one group, or a total
// other than the counts' sum.
Result<std::vector<std::vector<int>>> SplitIdGroups(std::string_view text,
                                                    const std::vector<int>& counts, int limit);

// Formats ascending or unordered ids as ranges: {0,1,2,3,8} -> "0-3,8"; {} -> "none".
std::string FormatIdRanges(std::vector<int> ids);

// Formats as a plain comma list, as the AWS annotations carry them: {0,1,2} -> "0,1,2".
std::string FormatIdList(const std::vector<int>& ids);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_ID_RANGES_H_
