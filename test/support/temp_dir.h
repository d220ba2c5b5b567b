// Temp directories for tests: each one fresh, removed with its contents when it goes out of scope.
#ifndef TOPOSCHED_TEST_SUPPORT_TEMP_DIR_H_
#define TOPOSCHED_TEST_SUPPORT_TEMP_DIR_H_

#include <string>
#include <string_view>

namespace toposched::testing {

// A fresh directory under the system temp dir ($TMPDIR, else /tmp).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string operator/(std::string_view name) const;
  // Writes `content` to path()/name (write then rename, as the kubelet does, so a reader never
  // sees half a file) and returns the full path.
  std::string WriteFile(const std::string& name, std::string_view content) const;

 protected:
  // `pattern` ends in XXXXXX, as mkdtemp wants.
  explicit TempDir(std::string pattern);

 private:
  std::string path_;
};

// A fresh directory with a short name directly under /tmp, whatever $TMPDIR says: a unix
// socket's path must fit in 108 bytes.
class ShortTempDir : public TempDir {
 public:
  ShortTempDir();
};

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_TEMP_DIR_H_
