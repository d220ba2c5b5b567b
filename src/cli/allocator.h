#pragma once

#include <string>

namespace toposched::cli {

// "jemalloc 5.3.0-..." when built with TOPOSCHED_JEMALLOC (the default outside sanitizer builds),
// else "the C library's malloc".
std::string AllocatorName();

}  // namespace toposched::cli
