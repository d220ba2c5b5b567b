// The one HTTP client (libcurl) in toposched: the Kubernetes API client (kube/client.*) and the
// partition service client (provision/http_service.cc) both send through it. It owns libcurl's
// global setup, a small pool of keep-alive connections, TLS settings and timeouts, and streaming
// of a response body (watches). What a request means — paths, tokens, retries, the JSON — stays
// with the caller.
#ifndef TOPOSCHED_NET_HTTP_CLIENT_H_
#define TOPOSCHED_NET_HTTP_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"

namespace toposched::net {

// Whom to trust and who we are. With no CA given the system's CA bundle is used; a configured CA
// replaces the bundle rather than adding to it, as in kubectl. PEM text wins over a file.
struct TlsOptions {
  std::string ca_file;
  std::string ca_pem;
  bool insecure_skip_verify = false;
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
};

struct HttpClientOptions {
  TlsOptions tls;
  // A CURLOPT_CONNECT_TO entry ("host:port:address:port"): dial `address` for a URL naming `host`,
  // so TLS verifies and sends `host` as SNI. Empty: dial the URL's host.
  std::string connect_to;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  size_t max_response_bytes = size_t{1} << 30;  // a larger buffered body is an error
  size_t max_idle_connections = 4;              // kept for keep-alive between requests
  std::string user_agent = "toposched";
};

struct HttpClientRequest {
  const char* method = "GET";  // any other than GET sends `body`
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string_view body;
  std::chrono::milliseconds timeout{0};  // the whole transfer; 0 is none
  // Streaming: the body of a 2xx answer goes to on_body chunk by chunk instead of into the
  // response; on_body returning false ends the transfer (not an error). The body of any other
  // status is kept, up to 64 KiB, for its message. Null: the body is buffered.
  std::function<bool(std::string_view chunk)> on_body;
  // When set, polled every ~50 ms; once true the transfer ends (not an error).
  const std::atomic<bool>* stop = nullptr;
  // When set and Send fails: true when no byte of the request reached the server (the name did
  // not resolve, the connection or the TLS handshake failed), so a write cannot have been
  // applied; false when it may have been (a timeout or a reset after sending).
  bool* unsent = nullptr;
};

// How a transfer that is not an error ended.
enum class TransferEnd {
  kComplete,      // the server sent the whole answer
  kStopped,       // `stop` became true
  kConsumerDone,  // on_body returned false
  kTimedOut,      // `timeout` passed while a 2xx body was streaming
};

struct HttpClientResponse {
  long status = 0;  // NOLINT(google-runtime-int): libcurl's type for the status
  std::string body;
  bool streamed = false;  // the body went to on_body
  TransferEnd end = TransferEnd::kComplete;
};

// Thread-safe: any number of threads may call Send at once; each call borrows a connection from
// the pool. A non-2xx answer is not an error: the caller gets the status and decides. Errors are
// transport failures (connect, TLS, timeout, an over-long body), carrying curl's message without
// the method or URL (callers say which request failed).
class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Result<HttpClientResponse> Send(const HttpClientRequest& request);

  const HttpClientOptions& options() const { return options_; }

 private:
  struct Connection;
  std::unique_ptr<Connection> Acquire();
  void Release(std::unique_ptr<Connection> connection);

  const HttpClientOptions options_;
  Mutex pool_mutex_;
  std::vector<std::unique_ptr<Connection>> idle_ TS_GUARDED_BY(pool_mutex_);
};

// A URL split into its parts (libcurl's parser); the port is filled in from the scheme when the
// URL has none, and the path loses its trailing '/'s.
struct UrlParts {
  std::string scheme;
  std::string host;
  std::string port;
  std::string path;
};
Result<UrlParts> SplitUrl(const std::string& url);

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_HTTP_CLIENT_H_
