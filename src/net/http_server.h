// The one HTTP/1.1 server (Boost.Beast) in toposched: it serves a handler, and knows nothing of
// what the handler does (the extender's routes live in extender/router.*, the fake partition
// service's in provision/fake_service.*). Tuned for kube-scheduler's extender calls: the header
// is read with Beast, then the body in one read of Content-Length bytes into a buffer padded for
// simdjson; each response goes out in one write with TCP_NODELAY. Optional TLS, optionally
// requiring client certificates signed by a given CA.
#ifndef TOPOSCHED_NET_HTTP_SERVER_H_
#define TOPOSCHED_NET_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/result.h"

namespace toposched::net {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query
  // The body; its capacity extends at least simdjson::SIMDJSON_PADDING bytes past size().
  std::string body;
  std::string authorization;  // the Authorization header, if any
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// Called on a server thread; may answer later from any thread through `respond` (once).
using Responder = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest&&, Responder)>;

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 12345;  // 0 picks a free port (tests)
  int threads = 1;
  size_t body_limit = 256 << 20;  // bytes; larger bodies get 413
  std::string tls_cert_file;      // PEM; TLS is on when both cert and key are set
  std::string tls_key_file;
  std::string tls_client_ca_file;  // when set, clients must present a cert signed by it
};

class HttpServer {
 public:
  // Binds, listens and starts the threads. Errors name the address and the reason.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  // Stops accepting, closes connections and joins the threads.
  virtual void Stop() = 0;
};

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_HTTP_SERVER_H_
