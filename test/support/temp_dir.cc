#include "support/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

namespace toposched::testing {

TempDir::TempDir()
    : TempDir((std::filesystem::temp_directory_path() / "toposched-test-XXXXXX").string()) {}

TempDir::TempDir(std::string pattern) {
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = std::move(pattern);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::operator/(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

std::string TempDir::WriteFile(const std::string& name, std::string_view content) const {
  const std::string full = path_ + "/" + name;
  const std::string staging = full + ".tmp";
  {
    std::ofstream out(staging, std::ios::binary | std::ios::trunc);
    out << content;
  }
  std::filesystem::rename(staging, full);
  return full;
}

ShortTempDir::ShortTempDir() : TempDir("/tmp/tsdp.XXXXXX") {}

}  // namespace toposched::testing
