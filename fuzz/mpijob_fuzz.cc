// libFuzzer target for an MPIJob read from the API server (kube::DecodeMpiJobWorkers): the gang
// size of its workers. It never crashes, and what it accepts is a worker count in 1..4096.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/mpijob.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto workers = toposched::kube::DecodeMpiJobWorkers(text);
  if (workers.ok() && (*workers < 1 || *workers > 4096)) std::abort();
  return 0;
}
