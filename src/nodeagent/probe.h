// The device plugin's probe endpoint (plain HTTP, for kubelet's probes and Prometheus):
// GET /healthz 200 while the process runs; GET /readyz 200 once Readiness says ready, else 503,
// with the reason as the body either way; GET /metrics the plugin's metrics.
#ifndef TOPOSCHED_NODEAGENT_PROBE_H_
#define TOPOSCHED_NODEAGENT_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "net/http_server.h"
#include "nodeagent/readiness.h"

namespace toposched::nodeagent {

// `readiness` must outlive the server. Port 0 picks a free one (tests).
Result<std::unique_ptr<net::HttpServer>> StartProbeServer(const std::string& address, uint16_t port,
                                                          const Readiness& readiness);

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_PROBE_H_
