// Durations written as Kubernetes components take them on the command line (Go's
// time.ParseDuration): "15s", "1m30s", "500ms", "1.5h". Used for kube-scheduler's flag names and
// values, e.g. --leader-elect-lease-duration 15s.
#ifndef TOPOSCHED_KUBE_DURATION_H_
#define TOPOSCHED_KUBE_DURATION_H_

#include <chrono>
#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched::kube {

// Units ns, us (or µs), ms, s, m, h; each number may have a fraction; "0" alone is zero. A sign,
// an empty text, a missing unit or an overflow is an error naming the text. Sub-nanosecond
// fractions are dropped.
Result<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// The shortest Go-style text of a duration ("15s", "1m30s", "250ms"), for messages.
std::string FormatDuration(std::chrono::nanoseconds duration);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_DURATION_H_
