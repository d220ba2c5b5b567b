// libFuzzer target for ParseRfc3339 (kube/timestamp.h; a pod's creationTimestamp): never crashes,
// and what it accepts in the API server's own form ("...Z", whole seconds) formats back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/timestamp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto value = toposched::kube::ParseRfc3339(text);
  if (!value.ok() || size != 20 || text[10] != 'T' || text[19] != 'Z') return 0;
  // Sub-second and lower-case forms are not written back as given; a leap second rolls over.
  if (text.substr(17, 2) == "60") return 0;
  if (toposched::kube::FormatRfc3339(*value) != text) std::abort();
  return 0;
}
