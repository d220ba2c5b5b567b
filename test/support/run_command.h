// Runs a shell command line in a test and captures what it printed, through temp files (the
// child's output can be large, and a pipe read after exit could fill and block it).
#ifndef TOPOSCHED_TEST_SUPPORT_RUN_COMMAND_H_
#define TOPOSCHED_TEST_SUPPORT_RUN_COMMAND_H_

#include <string>

namespace toposched::testing {

struct Outcome {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string out;
  std::string err;
};

// `command` is a shell command line, already quoted where needed; stdout and stderr are kept
// apart. The temp files are removed afterwards.
Outcome RunCommand(const std::string& command);

// Runs the `toposched` binary of this build with `args` (quoted where needed). A test calling it
// is registered with RUNS_BINARY in test/CMakeLists.txt, so the binary is built first.
Outcome RunToposched(const std::string& args);

std::string ReadWholeFile(const std::string& path);

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_RUN_COMMAND_H_
