// libFuzzer target for the partition service's answers (provision/partition.h) and the pools
// file (topology/pools.h): both parsers of untrusted input must never crash, and what they
// accept must be sane. The first byte picks: 0 one partition, 1 a list, 2 an error body,
// 3 the fake service's request handler, 4 a pools file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "provision/fake_service.h"
#include "provision/partition.h"
#include "topology/pools.h"

namespace {

void CheckPartition(const toposched::provision::Partition& p) {
  if (!toposched::provision::ValidPartitionName(p.name)) std::abort();
  for (int id : p.ipus) {
    if (id < 0 || id >= 4096) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace toposched;
  switch (data[0] % 5) {
    case 0:
      if (auto p = provision::ParsePartition(text); p.ok()) {
        CheckPartition(*p);
        // What we accept, we can write and read back.
        auto again = provision::ParsePartition(provision::EncodePartition(*p));
        if (!again.ok() || again->name != p->name || again->ipus != p->ipus) std::abort();
      }
      break;
    case 1:
      if (auto list = provision::ParsePartitionList(text); list.ok()) {
        for (const auto& p : *list) CheckPartition(p);
      }
      break;
    case 2:
      (void)provision::ErrorText(text);
      break;
    case 3: {
      static provision::FakePartitionService fake({}, [] { return int64_t{0}; });
      const auto slash = text.find('\n');
      const std::string target = slash == std::string::npos ? text : text.substr(0, slash);
      const std::string body = slash == std::string::npos ? "" : text.substr(slash + 1);
      for (const char* method : {"GET", "POST", "DELETE"}) {
        auto answer = fake.Handle(method, "/partitions" + target, body, "");
        if (answer.status < 200 || answer.status > 599) std::abort();
      }
      break;
    }
    default: {
      auto pools = topology::PoolSet::Parse(text, "fuzz", topology::Catalog::Embedded());
      if (pools.ok()) {
        for (const auto& [name, def] : pools->pools()) {
          if (def.size <= 0 || def.size > topology::kMaxDevices || (def.size & (def.size - 1))) {
            std::abort();
          }
        }
      }
      break;
    }
  }
  return 0;
}
