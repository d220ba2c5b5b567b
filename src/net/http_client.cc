#include "net/http_client.h"

#include <algorithm>
#include <string>
#include <utility>

#include <curl/curl.h>

namespace toposched::net {
namespace {

// A non-2xx answer to a streamed request is kept only for its message; the rest is dropped.
constexpr size_t kMaxErrorBody = 64 * 1024;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// State shared with curl's write callback during one transfer.
struct Transfer {
  CURL* easy = nullptr;
  const HttpClientRequest* request = nullptr;
  size_t max_bytes = 0;
  HttpClientResponse response;
  bool status_checked = false;
  bool consumer_done = false;  // on_body returned false
  bool too_large = false;
};

// Failures that happen before a request is written to the connection: whatever it asked for was
// not done. Every other failure (a timeout, a reset, a TLS error mid-transfer) may come after the
// server got the request.
bool FailedBeforeSending(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
      return true;
    default:
      return false;
  }
}

size_t WriteCallback(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const std::string_view chunk(data, bytes);
  if (transfer->request->on_body) {
    if (!transfer->status_checked) {
      long status = 0;  // NOLINT(google-runtime-int)
      curl_easy_getinfo(transfer->easy, CURLINFO_RESPONSE_CODE, &status);
      transfer->response.streamed = status >= 200 && status < 300;
      transfer->status_checked = true;
    }
    if (transfer->response.streamed) {
      if (transfer->request->on_body(chunk)) return bytes;
      transfer->consumer_done = true;
      return 0;
    }
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, transfer->response.body.size());
    transfer->response.body.append(chunk.substr(0, room));
    return bytes;
  }
  if (transfer->response.body.size() + bytes > transfer->max_bytes) {
    transfer->too_large = true;
    return 0;
  }
  transfer->response.body.append(chunk);
  return bytes;
}

struct CurlHeaders {
  curl_slist* list = nullptr;
  ~CurlHeaders() { curl_slist_free_all(list); }
  void Add(const std::string& header) {
    if (curl_slist* grown = curl_slist_append(list, header.c_str())) list = grown;
  }
};

void ApplyTls(CURL* easy, const TlsOptions& tls) {
  if (tls.insecure_skip_verify) {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  // A configured CA replaces the system bundle rather than adding to it, as in kubectl. curl
  // copies each blob struct; the PEM text lives in the options, which outlive the transfer.
  if (!tls.ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(tls.ca_pem.data()), tls.ca_pem.size(), CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_CAINFO, nullptr);
    curl_easy_setopt(easy, CURLOPT_CAPATH, nullptr);
  } else if (!tls.ca_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_CAINFO, tls.ca_file.c_str());
    curl_easy_setopt(easy, CURLOPT_CAPATH, nullptr);
  }
  if (!tls.client_cert_pem.empty()) {
    curl_blob blob{const_cast<char*>(tls.client_cert_pem.data()), tls.client_cert_pem.size(),
                   CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  } else if (!tls.client_cert_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT, tls.client_cert_file.c_str());
  }
  if (!tls.client_key_pem.empty()) {
    curl_blob blob{const_cast<char*>(tls.client_key_pem.data()), tls.client_key_pem.size(),
                   CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
  } else if (!tls.client_key_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLKEY, tls.client_key_file.c_str());
  }
}

}  // namespace

struct HttpClient::Connection {
  CURLM* multi = nullptr;  // owns the connection cache, so keep-alive survives between requests
  CURL* easy = nullptr;

  Connection() : multi(curl_multi_init()), easy(curl_easy_init()) {}
  ~Connection() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
};

HttpClient::HttpClient(HttpClientOptions options) : options_(std::move(options)) {
  GlobalInitOnce();
}

HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Connection> HttpClient::Acquire() {
  {
    MutexLock lock(pool_mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> connection = std::move(idle_.back());
      idle_.pop_back();
      return connection;
    }
  }
  auto connection = std::make_unique<Connection>();
  if (connection->multi == nullptr || connection->easy == nullptr) return nullptr;
  return connection;
}

void HttpClient::Release(std::unique_ptr<Connection> connection) {
  MutexLock lock(pool_mutex_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(connection));
}

namespace {

// The request's method, and its body for anything but GET.
void SetMethod(CURL* easy, const HttpClientRequest& request) {
  const std::string_view method(request.method);
  if (method == "GET") {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    return;
  }
  if (method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
  } else {
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, request.method);
  }
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
}

// Runs the transfer to its end (`result`) or until `stop` is set (`stopped`), through the multi
// interface so `stop` is noticed between short polls instead of only when curl's progress
// callback happens to run (about once a second). Returns the multi interface's own failure.
CURLMcode DriveTransfer(CURLM* multi, CURL* easy, const std::atomic<bool>* stop, CURLcode& result,
                        bool& stopped) {
  CURLMcode code = curl_multi_add_handle(multi, easy);
  if (code != CURLM_OK) return code;
  for (;;) {
    int running = 0;
    code = curl_multi_perform(multi, &running);
    if (code != CURLM_OK) break;
    bool done = false;
    int queued = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
      if (message->msg == CURLMSG_DONE && message->easy_handle == easy) {
        result = message->data.result;
        done = true;
      }
    }
    if (done) break;
    if (stop != nullptr && stop->load()) {
      stopped = true;
      break;
    }
    code = curl_multi_poll(multi, nullptr, 0, stop != nullptr ? 50 : 1000, nullptr);
    if (code != CURLM_OK) break;
  }
  curl_multi_remove_handle(multi, easy);
  return code;
}

}  // namespace

Result<HttpClientResponse> HttpClient::Send(const HttpClientRequest& request) {
  if (request.unsent != nullptr) *request.unsent = false;
  std::unique_ptr<Connection> connection = Acquire();
  if (connection == nullptr) {
    if (request.unsent != nullptr) *request.unsent = true;
    return Error{"cannot create a curl handle"};
  }
  CURL* easy = connection->easy;
  curl_easy_reset(easy);  // keeps the connection cache and TLS session

  Transfer transfer;
  transfer.easy = easy;
  transfer.request = &request;
  transfer.max_bytes = options_.max_response_bytes;
  char error_buffer[CURL_ERROR_SIZE] = {};

  CurlHeaders headers;
  for (const std::string& header : request.headers) headers.Add(header);

  curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &WriteCallback);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));

  curl_slist* connect_to = nullptr;
  if (!options_.connect_to.empty()) {
    connect_to = curl_slist_append(nullptr, options_.connect_to.c_str());
    curl_easy_setopt(easy, CURLOPT_CONNECT_TO, connect_to);
  }
  ApplyTls(easy, options_.tls);

  SetMethod(easy, request);

  CURLcode result = CURLE_OK;
  bool stopped = false;
  std::string multi_error;
  const CURLMcode multi_code =
      DriveTransfer(connection->multi, easy, request.stop, result, stopped);
  if (multi_code != CURLM_OK) multi_error = curl_multi_strerror(multi_code);
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &transfer.response.status);
  long request_bytes = 0;  // NOLINT(google-runtime-int): libcurl's type
  curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_bytes);
  // The handle goes back to the pool: drop its pointers to this call's buffers and lists.
  curl_easy_reset(easy);
  curl_slist_free_all(connect_to);
  Release(std::move(connection));

  if (!multi_error.empty()) return Error{multi_error};
  if (transfer.too_large) {
    return Error{"response larger than " + std::to_string(transfer.max_bytes) + " bytes"};
  }
  // A stream ends normally when the consumer or `stop` ends it, or when the timeout (its
  // longest duration) passes after it started.
  if (stopped) {
    transfer.response.end = TransferEnd::kStopped;
    return std::move(transfer.response);
  }
  if (result == CURLE_WRITE_ERROR && transfer.consumer_done) {
    transfer.response.end = TransferEnd::kConsumerDone;
    return std::move(transfer.response);
  }
  if (result == CURLE_OPERATION_TIMEDOUT && transfer.response.streamed) {
    transfer.response.end = TransferEnd::kTimedOut;
    return std::move(transfer.response);
  }
  if (result != CURLE_OK) {
    if (request.unsent != nullptr) {
      *request.unsent = request_bytes == 0 && FailedBeforeSending(result);
    }
    return Error{error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(result)};
  }
  return std::move(transfer.response);
}

Result<UrlParts> SplitUrl(const std::string& text) {
  GlobalInitOnce();
  CURLU* url = curl_url();
  if (url == nullptr) return Error{"out of memory"};
  UrlParts parts;
  const CURLUcode set = curl_url_set(url, CURLUPART_URL, text.c_str(), 0);
  auto get = [&](CURLUPart part, std::string& out, unsigned flags) {
    char* value = nullptr;
    if (curl_url_get(url, part, &value, flags) != CURLUE_OK) return false;
    out = value;
    curl_free(value);
    return true;
  };
  const bool ok = set == CURLUE_OK && get(CURLUPART_SCHEME, parts.scheme, 0) &&
                  get(CURLUPART_HOST, parts.host, 0) &&
                  get(CURLUPART_PORT, parts.port, CURLU_DEFAULT_PORT) &&
                  get(CURLUPART_PATH, parts.path, 0);
  curl_url_cleanup(url);
  if (!ok) return Error{"invalid URL \"" + text + "\""};
  while (!parts.path.empty() && parts.path.back() == '/') parts.path.pop_back();
  return parts;
}

}  // namespace toposched::net
