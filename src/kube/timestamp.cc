#include "kube/timestamp.h"

#include <ctime>

namespace toposched::kube {

std::string FormatRfc3339(int64_t unix_seconds) {
  const auto time = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  gmtime_r(&time, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace toposched::kube
