// libFuzzer target for the gang record annotation (claims::DecodeGangRecord): decoding never
// crashes, what it accepts keeps the record's invariants, and it survives an encode-and-decode
// round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "claims/gang.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::claims;  // NOLINT(google-build-using-namespace): a fuzz harness
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto record = DecodeGangRecord(text);
  if (!record.ok()) return 0;
  const GangRecord& r = *record;
  if (r.size < 1 || r.rank < 0 || r.rank >= r.size) std::abort();
  if (r.group_nodes != 1 && r.group_nodes != 2 && r.group_nodes != 4) std::abort();
  if (r.size % r.group_nodes != 0 || r.nodes.size() != static_cast<size_t>(r.size)) std::abort();
  if (r.group_nodes > 1 && (r.server_id.empty() || r.node_id < 0 || r.node_id >= r.group_nodes)) {
    std::abort();
  }
  if (UltraServerModeFor(r.group_nodes) == 0) std::abort();
  const auto env = GangEnv(r);
  if (env.count("NEURON_GLOBAL_TOPOID") != 1) std::abort();
  auto again = DecodeGangRecord(EncodeGangRecord(r));
  if (!again.ok() || !(*again == r)) std::abort();
  return 0;
}
