// Where this build's inputs and outputs are: the checkout it was configured from and its
// toposched binary. Only build_paths.cc is compiled with those absolute paths, so every other
// file's ccache entry is the same in another clone of the repository.
#ifndef TOPOSCHED_TEST_SUPPORT_BUILD_PATHS_H_
#define TOPOSCHED_TEST_SUPPORT_BUILD_PATHS_H_

#include <string>
#include <string_view>

namespace toposched::testing {

// `relative` (e.g. "catalog/instance-types.yaml") inside the checkout.
std::string SourcePath(std::string_view relative);

// The `toposched` binary of this build. A test that runs it is registered with RUNS_BINARY in
// test/CMakeLists.txt, so the binary is built first.
std::string ToposchedBinary();

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_BUILD_PATHS_H_
