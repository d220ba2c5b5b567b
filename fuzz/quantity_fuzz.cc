// libFuzzer target for ParseQuantity (kube/quantity.h): never crashes, never returns a negative
// count, and agrees with plain integer parsing on plain digits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto value = toposched::kube::ParseQuantity(text);
  if (value.ok() && *value < 0) std::abort();

  // Up to 18 plain digits always fit: the result must be exactly their value.
  if (size > 0 && size <= 18) {
    int64_t plain = 0;
    bool digits_only = true;
    for (char c : text) {
      if (c < '0' || c > '9') {
        digits_only = false;
        break;
      }
      plain = plain * 10 + (c - '0');
    }
    if (digits_only && (!value.ok() || *value != plain)) std::abort();
  }
  return 0;
}
