#include "support/build_paths.h"

namespace toposched::testing {

std::string SourcePath(std::string_view relative) {
  std::string path = TOPOSCHED_SOURCE_DIR;
  path += '/';
  path += relative;
  return path;
}

std::string ToposchedBinary() { return TOPOSCHED_BINARY; }

}  // namespace toposched::testing
