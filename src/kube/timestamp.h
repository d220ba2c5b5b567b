// Timestamps as the API server writes them (metav1.Time: RFC 3339 in UTC, to the second, e.g.
// "2026-11-29T12:00:00Z"): the one home of their format, for conditions, Events and taints.
#ifndef TOPOSCHED_KUBE_TIMESTAMP_H_
#define TOPOSCHED_KUBE_TIMESTAMP_H_

#include <cstdint>
#include <string>

namespace toposched::kube {

// "YYYY-MM-DDTHH:MM:SSZ" for Unix time `unix_seconds`.
std::string FormatRfc3339(int64_t unix_seconds);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_TIMESTAMP_H_
