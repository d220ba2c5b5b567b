// libFuzzer target for UltraServer membership labels (claims::UltraServerPlaceOf): the input is
// up to five lines, the values of ultraserver-mode, -server-id-4, -node-id-4, -server-id-2 and
// -node-id-2 (a line "~" leaves the label out). It never crashes, and what it accepts is in range.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "claims/keys.h"
#include "claims/ultraserver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::claims;  // NOLINT(google-build-using-namespace): a fuzz harness
  const std::string_view keys[] = {kLabelUltraServerMode, kLabelUltraServerServerId4,
                                   kLabelUltraServerNodeId4, kLabelUltraServerServerId2,
                                   kLabelUltraServerNodeId2};
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string, std::less<>> labels;
  for (std::string_view key : keys) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view value = text.substr(0, end);
    if (value != "~") labels[std::string(key)] = std::string(value);
    text.remove_prefix(end == text.size() ? end : end + 1);
  }
  auto place = UltraServerPlaceOf(labels);
  if (!place.ok() || !place->has_value()) return 0;
  const UltraServerPlace& p = **place;
  for (int config : p.node_configs) {
    if (config != 1 && config != 2 && config != 4) std::abort();
  }
  if (p.node_id_4 < -1 || p.node_id_4 > 3 || p.node_id_2 < -1 || p.node_id_2 > 1) std::abort();
  if (p.Supports(4) && (p.GroupId(4).empty() || p.NodeId(4) < 0)) std::abort();
  if (p.Supports(2) && (p.GroupId(2).empty() || p.NodeId(2) < 0)) std::abort();
  return 0;
}
