// libFuzzer target: the extender's decoders of kube-scheduler payloads (filter/prioritize args,
// bind args, preempt args) must reject any bytes with an error, never crash or hang.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>

#include "extender/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the decoder so one corpus covers all three.
  const simdjson::padded_string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto args = toposched::extender::DecodeExtenderArgs(body);
      if (args.ok()) (void)args->CandidateNames();
      break;
    }
    case 1:
      (void)toposched::extender::DecodeBindingArgs(body);
      break;
    default:
      (void)toposched::extender::DecodePreemptionArgs(body);
      break;
  }
  return 0;
}
