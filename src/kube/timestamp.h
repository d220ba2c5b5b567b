// Timestamps as the API server writes them (metav1.Time: RFC 3339 in UTC, to the second, e.g.
// "2026-11-29T12:00:00Z"): the one home of their format, for conditions, Events and taints, and
// of reading them back (a pod's creationTimestamp: how long it has waited).
#ifndef TOPOSCHED_KUBE_TIMESTAMP_H_
#define TOPOSCHED_KUBE_TIMESTAMP_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched::kube {

// "YYYY-MM-DDTHH:MM:SSZ" for Unix time `unix_seconds`.
std::string FormatRfc3339(int64_t unix_seconds);

// The Unix time (whole seconds, fractions dropped) of an RFC 3339 date-time: what the API server
// writes ("2026-11-29T12:00:00Z") and what other clients may send (fractional seconds, a
// "+01:00" offset, lower-case 't' and 'z'). Years 0000-9999; a leap second (":60") counts as the
// next second. Errors say what is wrong.
Result<int64_t> ParseRfc3339(std::string_view text);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_TIMESTAMP_H_
