// libFuzzer target for the allocation record annotation (claims/allocation_record.h): parsing never
// crashes, and whatever parses survives a write-and-parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "claims/allocation_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::claims;  // NOLINT(google-build-using-namespace): a fuzz harness
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto time = ParseAllocTime(text); time.ok() && *time < 0) std::abort();

  auto record = ParseAllocationRecord(text);
  if (!record.ok()) return 0;
  for (const ContainerIds& container : record->containers) {
    for (int id : container.ids) {
      if (id < 0) std::abort();
    }
  }
  auto again = ParseAllocationRecord(AllocationRecordJson(*record));
  if (!again.ok() || !(*again == *record)) std::abort();
  return 0;
}
