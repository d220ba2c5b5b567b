// libFuzzer target for AWS_NEURON_IDS splitting (claims::SplitAwsIds): the first bytes choose
// the containers' counts, the rest is the annotation. It never crashes, what it accepts has the
// asked sizes, ids in range and no repeat within a container, and writing the groups back out
// with claims::FormatAwsIds splits to the same groups. The same text is also read as a node's
// failed devices (topology::ParseIdRanges, as the extender reads toposched.io/unhealthy-devices):
// what it accepts is in range, without repeats, and formats back to the same ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "topology/catalog.h"
#include "topology/id_ranges.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched;  // NOLINT(google-build-using-namespace): a fuzz harness
  constexpr int kLimit = topology::kMaxCores;
  if (size < 1) return 0;
  const size_t containers = data[0] % 6;
  if (size < 1 + containers) return 0;
  std::vector<int> counts;
  for (size_t i = 0; i < containers; ++i) counts.push_back(data[1 + i] % 20);
  const std::string_view text(reinterpret_cast<const char*>(data + 1 + containers),
                              size - 1 - containers);
  if (auto failed = topology::ParseIdRanges(text, 64); failed.ok()) {
    std::vector<bool> seen(64, false);
    for (int id : *failed) {
      if (id < 0 || id >= 64 || seen[static_cast<size_t>(id)]) std::abort();
      seen[static_cast<size_t>(id)] = true;
    }
    auto again = topology::ParseIdRanges(topology::FormatIdList(*failed), 64);
    if (!again.ok() || *again != *failed) std::abort();
  }
  auto groups = claims::SplitAwsIds(text, counts);
  if (!groups.ok()) return 0;
  if (groups->size() != counts.size()) std::abort();
  claims::AllocationRecord record;
  for (size_t i = 0; i < groups->size(); ++i) {
    const std::vector<int>& group = (*groups)[i];
    if (static_cast<int>(group.size()) != counts[i]) std::abort();
    std::vector<bool> seen(kLimit, false);
    for (int id : group) {
      if (id < 0 || id >= kLimit || seen[static_cast<size_t>(id)]) std::abort();
      seen[static_cast<size_t>(id)] = true;
    }
    record.containers.push_back({"c" + std::to_string(i), "r", group});
  }
  auto back = claims::SplitAwsIds(claims::FormatAwsIds(record), counts);
  if (!back.ok() || *back != *groups) std::abort();
  return 0;
}
