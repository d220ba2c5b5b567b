// The one HTTP/1.1 server (Boost.Beast) in toposched: it serves a handler, and knows nothing of
// what the handler does (the extender's routes live in extender/router.*, the fake partition
// service's in provision/fake_service.*). Tuned for kube-scheduler's extender calls: the header
// is read with Beast, then the body into a buffer padded for simdjson that grows as bytes arrive
// (never reserved from the declared Content-Length, so a client that declares 256 MiB and trickles
// costs what it sent); each response goes out in one write with TCP_NODELAY. Optional TLS,
// optionally requiring client certificates signed by a given CA.
//
// Bounded: at most max_connections connections that have spoken and max_waiting_connections
// that have not (the oldest of those is closed to make room for a new one), at most
// max_bodies_in_flight requests with a body being read or handled and body_memory_limit bytes of
// bodies held at once (more get 503), a body over body_limit gets 413, a header must arrive within
// header_timeout and a body within body_timeout.
//
// The slots go to the callers that need them (issue 29; net/connection_slots.h): a new connection
// waits in a waiting room that costs no TLS session until it sends its first byte, so accepting
// never stalls behind idle connections. A connection that has not shown who it is (TLS handshake
// under way, or no client certificate and no request being answered) must finish its handshake
// within handshake_timeout of being accepted, and gives its slot up to a newer one that spoke
// when all are taken; only when every slot is held (by authenticated clients or requests being
// answered) is a speaking connection closed at once. A client without a certificate waits at
// most handshake_timeout for each next request on a kept-alive connection.
//
// With tls_client_ca_file, a client certificate signed by that CA is required for every request
// but GETs of anonymous_paths (health probes, metrics): without one the answer is 403; a
// certificate that does not verify fails the handshake.
// accept() failing for want of file descriptors (EMFILE, ENFILE) pauses accepting, doubling from
// accept_backoff to 1 s, or until a connection closes; logged once per burst and counted.
//
// Lifetime: a Responder keeps what it needs alive by itself, so it may be called (or dropped)
// from any thread at any time, even after Stop() or the server's destruction: then the answer is
// dropped. Shutdown without losing answers: StopAccepting(), Drain(deadline), then Stop().
#ifndef TOPOSCHED_NET_HTTP_SERVER_H_
#define TOPOSCHED_NET_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  std::string tls_client_ca_file;            // when set, clients must present a cert signed by it
  std::vector<std::string> anonymous_paths;  // GET paths served without a client certificate
  size_t body_memory_limit = size_t{512} << 20;  // bytes of bodies held at once, all connections
  int max_connections = 256;                     // connections that spoke; see the file comment
  // Connections accepted that have not sent a byte yet; the oldest is closed for a new one.
  int max_waiting_connections = 1024;
  int max_bodies_in_flight = 16;  // requests with a body being read or handled; more get 503
  std::chrono::milliseconds header_timeout{30000};  // idle keep-alive, header
  // From accept to the end of the TLS handshake (the first byte included); a connection without
  // a client certificate gets as long again for its one request's header.
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds body_timeout{30000};  // the whole body, from the end of the header
  std::chrono::milliseconds accept_backoff{100};  // first pause after EMFILE/ENFILE
};

// What the server refused or cut, and what it holds now.
struct HttpServerStats {
  uint64_t connections_refused = 0;  // over max_connections, every slot held
  uint64_t connections_evicted = 0;  // silent or unauthenticated, closed to make room
  uint64_t bodies_refused = 0;       // 503: over max_bodies_in_flight or body_memory_limit
  uint64_t uncertified_refused = 0;  // 403: no client certificate
  uint64_t bodies_too_large = 0;     // 413: over body_limit
  uint64_t read_timeouts = 0;        // a header or body not received in time
  uint64_t accept_fd_exhausted = 0;  // accept() failed with EMFILE or ENFILE
  uint64_t accept_pauses = 0;        // pauses of accepting after such a failure
  int64_t connections = 0;           // open now
  int64_t bodies_in_flight = 0;      // now
  int64_t body_bytes = 0;            // bytes of body buffers held now
  int64_t requests_in_flight = 0;    // handed to the handler, answer not yet written
};

class HttpServer {
 public:
  // Binds, listens and starts the threads. Errors name the address and the reason.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  virtual HttpServerStats stats() const = 0;
  // Closes the listening socket: no new connection is accepted; open ones are still served, so
  // answers to requests already handed to the handler are written. Idempotent.
  virtual void StopAccepting() = 0;
  // Waits until no request is waiting for its answer to be written (each Responder called or
  // dropped, and its write done or failed), or until `deadline`. True when none is left.
  virtual bool Drain(std::chrono::steady_clock::time_point deadline) = 0;
  // Stops accepting, stops serving and joins the threads. A Responder called afterwards drops its
  // answer (its memory stays valid). Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_HTTP_SERVER_H_
