#include "nodeagent/probe.h"

#include <string_view>
#include <utility>

namespace toposched::nodeagent {

Result<std::unique_ptr<net::HttpServer>> StartProbeServer(const std::string& address, uint16_t port,
                                                          const Readiness& readiness) {
  net::HttpServerOptions options;
  options.address = address;
  options.port = port;
  options.body_limit = 4096;  // probes and scrapes send no body
  options.max_connections = 16;
  auto handler = [&readiness](net::HttpRequest&& request, const net::Responder& respond) {
    net::HttpResponse response;
    response.content_type = "text/plain; charset=utf-8";
    const std::string_view path =
        std::string_view(request.target).substr(0, request.target.find('?'));
    if (request.method != "GET") {
      response.status = 405;
      response.body = "GET only\n";
    } else if (path == "/healthz") {
      response.body = "ok\n";
    } else if (path == "/readyz") {
      auto [ready, reason] = readiness.State();
      response.status = ready ? 200 : 503;
      response.body = std::move(reason) + "\n";
    } else if (path == "/metrics") {
      response.content_type = "text/plain; version=0.0.4";
      response.body = readiness.Metrics();
    } else {
      response.status = 404;
      response.body = "not found: GET /healthz, /readyz or /metrics\n";
    }
    respond(std::move(response));
  };
  return net::HttpServer::Start(options, handler);
}

}  // namespace toposched::nodeagent
