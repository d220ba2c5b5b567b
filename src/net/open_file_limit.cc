#include "net/open_file_limit.h"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <sys/resource.h>

namespace toposched::net {
namespace {

constexpr rlim_t kDescriptorsKept = 256;  // for everything but the server's connections

}  // namespace

HttpServerOptions FitOpenFileLimit(HttpServerOptions o) {
  o.max_connections = std::max(1, o.max_connections);
  o.max_waiting_connections = std::max(1, o.max_waiting_connections);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return o;
  const rlim_t wanted = static_cast<rlim_t>(o.max_connections) +
                        static_cast<rlim_t>(o.max_waiting_connections) + kDescriptorsKept;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    const rlim_t was = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = was;
    if (limit.rlim_cur != was) {
      spdlog::info(
          "raised the open-file limit from {} to {} for {} connection slots and a "
          "waiting room of {}",
          was, limit.rlim_cur, o.max_connections, o.max_waiting_connections);
    }
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    const rlim_t spare = limit.rlim_cur > static_cast<rlim_t>(o.max_connections) + kDescriptorsKept
                             ? limit.rlim_cur - o.max_connections - kDescriptorsKept
                             : 1;
    spdlog::warn(
        "the open-file limit is {} (hard limit {}): the waiting room for connections "
        "that have not spoken shrinks from {} to {} (raise the limit, e.g. the "
        "container runtime's nofile, to keep it)",
        limit.rlim_cur, limit.rlim_max, o.max_waiting_connections, spare);
    o.max_waiting_connections = static_cast<int>(spare);
  }
  return o;
}

}  // namespace toposched::net
