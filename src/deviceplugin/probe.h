// The device plugin's probe endpoint (plain HTTP, for kubelet's probes and Prometheus):
// GET /healthz 200 while the process runs; GET /readyz 200 once Readiness says ready, else 503,
// with the reason as the body either way; GET /metrics the plugin's metrics.
#ifndef TOPOSCHED_DEVICEPLUGIN_PROBE_H_
#define TOPOSCHED_DEVICEPLUGIN_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "deviceplugin/readiness.h"
#include "net/http_server.h"

namespace toposched::deviceplugin {

// `readiness` must outlive the server. Port 0 picks a free one (tests).
Result<std::unique_ptr<net::HttpServer>> StartProbeServer(const std::string& address, uint16_t port,
                                                          const Readiness& readiness);

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_PROBE_H_
