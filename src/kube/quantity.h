// Kubernetes resource quantities ("4", "1k", "2000m", "1Ki", "1e3") as whole counts. Extended
// resources such as aws.amazon.com/neuron must be integers, so anything with a fractional value
// is rejected instead of rounded.
#ifndef TOPOSCHED_KUBE_QUANTITY_H_
#define TOPOSCHED_KUBE_QUANTITY_H_

#include <cstdint>
#include <string_view>

#include "base/result.h"

namespace toposched::kube {

// Parses a quantity in the API's grammar (sign, digits with an optional fraction, then one of the
// decimal SI suffixes n u m k M G T P E, a binary suffix Ki Mi Gi Ti Pi Ei, or an exponent e/E)
// and returns its value when it is a whole number that fits in int64. Negative values, empty or
// malformed text, fractional values ("500m", "1.5") and overflow are errors.
Result<int64_t> ParseQuantity(std::string_view text);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_QUANTITY_H_
