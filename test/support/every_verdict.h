// Extender options for tests that read every node's verdict in filter's answer.
#pragma once

#include "extender/service.h"

namespace toposched::testing {

// --filter-answer feasible: every node that fits passes and the others carry their reasons. The
// default answer (the policy's node alone) has its own tests in extender_service_test.cc.
inline extender::ExtenderOptions EveryVerdict() {
  extender::ExtenderOptions options;
  options.filter_best_only = false;
  return options;
}

}  // namespace toposched::testing
