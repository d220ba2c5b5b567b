// Which allocator this binary runs on, for --version and the startup logs: the extender's speed at
// 100,000 nodes depends on it (docs/benchmarks.md), so an operator can see it.
#include "cli/allocator.h"

#ifdef TOPOSCHED_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

namespace toposched::cli {

std::string AllocatorName() {
#ifdef TOPOSCHED_WITH_JEMALLOC
  const char* version = nullptr;
  size_t size = sizeof(version);
  // Also what keeps the library linked: a linker told --as-needed drops one nothing calls.
  if (mallctl("version", static_cast<void*>(&version), &size, nullptr, 0) == 0 &&
      version != nullptr) {
    return std::string("jemalloc ") + version;
  }
  return "jemalloc";
#else
  return "the C library's malloc";
#endif
}

}  // namespace toposched::cli
