#include "support/run_command.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include "support/build_paths.h"

namespace toposched::testing {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Outcome RunCommand(const std::string& command) {
  static std::atomic<int> counter{0};
  const std::string base =
      (std::filesystem::temp_directory_path() /
       ("toposched_run_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
          .string();
  const std::string line = command + " >'" + base + ".out' 2>'" + base + ".err'";
  const int status = std::system(line.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = ReadWholeFile(base + ".out");
  o.err = ReadWholeFile(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return o;
}

Outcome RunToposched(const std::string& args) {
  return RunCommand("'" + ToposchedBinary() + "' " + args);
}

}  // namespace toposched::testing
