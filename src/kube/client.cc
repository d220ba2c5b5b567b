#include "kube/client.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include <curl/curl.h>
#include <spdlog/spdlog.h>

namespace toposched::kube {
namespace {

// A non-2xx watch answer is kept only for its message; anything beyond this is dropped.
constexpr size_t kMaxErrorBody = 64 * 1024;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool IsTokenSafe(std::string_view token) {
  for (char c : token) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string TrimWhitespace(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read token file " + path};
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = TrimWhitespace(text.str());
  if (token.empty()) return Error{"token file " + path + " is empty"};
  if (!IsTokenSafe(token)) return Error{"token file " + path + " holds control characters"};
  return token;
}

// Splits the configured server URL so that tls_server_name can replace the host in the URL while
// CURLOPT_CONNECT_TO still dials the real address.
struct ServerUrl {
  std::string scheme;
  std::string host;
  std::string port;
  std::string path;  // without a trailing '/'
};

Result<ServerUrl> ParseServerUrl(const std::string& server) {
  CURLU* url = curl_url();
  if (url == nullptr) return Error{"out of memory"};
  ServerUrl parts;
  const CURLUcode set = curl_url_set(url, CURLUPART_URL, server.c_str(), 0);
  auto get = [&](CURLUPart part, std::string& out, unsigned flags) {
    char* text = nullptr;
    if (curl_url_get(url, part, &text, flags) != CURLUE_OK) return false;
    out = text;
    curl_free(text);
    return true;
  };
  const bool ok = set == CURLUE_OK && get(CURLUPART_SCHEME, parts.scheme, 0) &&
                  get(CURLUPART_HOST, parts.host, 0) &&
                  get(CURLUPART_PORT, parts.port, CURLU_DEFAULT_PORT) &&
                  get(CURLUPART_PATH, parts.path, 0);
  curl_url_cleanup(url);
  if (!ok) return Error{"invalid server URL \"" + server + "\""};
  if (parts.scheme != "https" && parts.scheme != "http") {
    return Error{"server URL \"" + server + "\" must be http or https"};
  }
  while (!parts.path.empty() && parts.path.back() == '/') parts.path.pop_back();
  return parts;
}

}  // namespace

struct ApiClient::Connection {
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

struct ApiClient::Request {
  const char* method = "GET";
  std::string_view path;
  std::string_view body;
  std::string_view content_type;
  std::chrono::milliseconds timeout{0};
  // Streaming (Watch) only.
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::atomic<bool>* stop = nullptr;
};

namespace {

// State shared with curl's write callback during one transfer.
struct Transfer {
  CURL* easy = nullptr;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  size_t max_bytes = 0;
  HttpResponse response;
  std::string partial_line;  // a line split across chunks
  bool status_checked = false;
  bool streaming = false;      // a 2xx watch: body goes to on_line
  bool consumer_done = false;  // on_line returned false
  bool too_large = false;

  // Delivers one line; false when the consumer wants no more.
  bool Deliver(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return true;
    if (!(*on_line)(line)) {
      consumer_done = true;
      return false;
    }
    return true;
  }

  // Returns false to make curl abort the transfer.
  bool Stream(std::string_view chunk) {
    while (!chunk.empty()) {
      const size_t newline = chunk.find('\n');
      if (newline == std::string_view::npos) {
        if (partial_line.size() + chunk.size() > max_bytes) {
          too_large = true;
          return false;
        }
        partial_line.append(chunk);
        return true;
      }
      bool more;
      if (partial_line.empty()) {
        more = Deliver(chunk.substr(0, newline));
      } else {
        partial_line.append(chunk.substr(0, newline));
        more = Deliver(partial_line);
        partial_line.clear();
      }
      chunk.remove_prefix(newline + 1);
      if (!more) return false;
    }
    return true;
  }
};

size_t WriteCallback(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const std::string_view chunk(data, bytes);
  if (transfer->on_line != nullptr) {
    if (!transfer->status_checked) {
      long status = 0;  // NOLINT(google-runtime-int)
      curl_easy_getinfo(transfer->easy, CURLINFO_RESPONSE_CODE, &status);
      transfer->streaming = status >= 200 && status < 300;
      transfer->status_checked = true;
    }
    if (transfer->streaming) return transfer->Stream(chunk) ? bytes : 0;
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

}  // namespace

ApiClient::ApiClient(ClientConfig config) : config_(std::move(config)) {}

ApiClient::~ApiClient() = default;

Result<std::unique_ptr<ApiClient>> ApiClient::Create(ClientConfig config) {
  GlobalInitOnce();
  Result<ServerUrl> url = ParseServerUrl(config.server);
  if (!url.ok()) return Error{url.error()};
  if (!IsTokenSafe(config.token)) return Error{"the bearer token holds control characters"};
  std::unique_ptr<ApiClient> client(new ApiClient(std::move(config)));
  const ClientConfig& settings = client->config_;
  if (settings.tls_server_name.empty()) {
    client->url_base_ = url->scheme + "://" + url->host + ":" + url->port + url->path;
  } else {
    client->url_base_ =
        url->scheme + "://" + settings.tls_server_name + ":" + url->port + url->path;
    client->connect_to_ =
        settings.tls_server_name + ":" + url->port + ":" + url->host + ":" + url->port;
  }
  if (!settings.token_file.empty()) {
    Result<std::string> token = ReadTokenFile(settings.token_file);
    if (!token.ok()) return Error{token.error()};
    client->token_ = std::move(*token);
    client->token_read_at_ = std::chrono::steady_clock::now();
  }
  return client;
}

Result<std::unique_ptr<ApiClient>> ApiClient::FromKubeconfig(const std::string& path) {
  Result<ClientConfig> config = LoadKubeconfig(path);
  if (!config.ok()) return Error{config.error()};
  return Create(std::move(*config));
}

Result<std::unique_ptr<ApiClient>> ApiClient::InCluster(const InClusterOptions& options) {
  Result<ClientConfig> config = InClusterConfig(options);
  if (!config.ok()) return Error{config.error()};
  return Create(std::move(*config));
}

Result<std::unique_ptr<ApiClient>> ApiClient::FromEnvironment(const std::string& kubeconfig_flag) {
  Result<ClientConfig> config = ConfigFromEnvironment(kubeconfig_flag);
  if (!config.ok()) return Error{config.error()};
  return Create(std::move(*config));
}

std::string ApiClient::Token(bool force_reload) {
  std::lock_guard<std::mutex> lock(token_mutex_);
  if (config_.token_file.empty()) return config_.token;
  const auto now = std::chrono::steady_clock::now();
  if (force_reload || now - token_read_at_ >= config_.token_reload_period) {
    token_read_at_ = now;
    Result<std::string> token = ReadTokenFile(config_.token_file);
    if (token.ok()) {
      token_ = std::move(*token);
    } else {
      // Keep the last good token: the kubelet rewrites the file atomically, so a failed read is
      // most likely transient.
      spdlog::warn("kube client: {}; keeping the previous token", token.error());
    }
  }
  return token_;
}

std::unique_ptr<ApiClient::Connection> ApiClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
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

void ApiClient::Release(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  if (idle_.size() < config_.max_idle_connections) idle_.push_back(std::move(connection));
}

Result<HttpResponse> ApiClient::Send(const Request& request) {
  const std::string token = Token(false);
  Result<HttpResponse> response = SendOnce(request, token);
  // A rotated token shows up as a 401: re-read the file and try once more if it changed.
  if (response.ok() && response->status == 401 && !config_.token_file.empty()) {
    const std::string fresh = Token(true);
    if (fresh != token) return SendOnce(request, fresh);
  }
  return response;
}

Result<HttpResponse> ApiClient::SendOnce(const Request& request, const std::string& token) {
  std::unique_ptr<Connection> connection = Acquire();
  if (connection == nullptr) return Error{"cannot create a curl handle"};
  CURL* easy = connection->easy;
  curl_easy_reset(easy);  // keeps the connection cache and TLS session

  const std::string url = url_base_ + std::string(request.path);
  Transfer transfer;
  transfer.easy = easy;
  transfer.on_line = request.on_line;
  transfer.max_bytes = config_.max_response_bytes;
  char error_buffer[CURL_ERROR_SIZE] = {};

  CurlHeaders headers;
  headers.Add("Accept: application/json");
  headers.Add("Expect:");  // no 100-continue round trip before large bodies
  if (!token.empty()) headers.Add("Authorization: Bearer " + token);
  if (!request.content_type.empty()) {
    headers.Add("Content-Type: " + std::string(request.content_type));
  }

  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, config_.user_agent.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &WriteCallback);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(config_.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));

  curl_slist* connect_to = nullptr;
  if (!connect_to_.empty()) {
    connect_to = curl_slist_append(nullptr, connect_to_.c_str());
    curl_easy_setopt(easy, CURLOPT_CONNECT_TO, connect_to);
  }
  if (config_.insecure_skip_tls_verify) {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  // A configured CA replaces the system bundle rather than adding to it, as in kubectl.
  if (!config_.ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(),
                   CURL_BLOB_NOCOPY};  // curl copies the struct; the PEM lives in config_
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_CAINFO, nullptr);
    curl_easy_setopt(easy, CURLOPT_CAPATH, nullptr);
  } else if (!config_.ca_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_CAINFO, config_.ca_file.c_str());
    curl_easy_setopt(easy, CURLOPT_CAPATH, nullptr);
  }
  if (!config_.client_cert_pem.empty()) {
    curl_blob blob{const_cast<char*>(config_.client_cert_pem.data()),
                   config_.client_cert_pem.size(), CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  } else if (!config_.client_cert_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT, config_.client_cert_file.c_str());
  }
  if (!config_.client_key_pem.empty()) {
    curl_blob blob{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                   CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
  } else if (!config_.client_key_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLKEY, config_.client_key_file.c_str());
  }

  const std::string_view method(request.method);
  if (method == "GET") {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  } else {
    if (method == "POST") {
      curl_easy_setopt(easy, CURLOPT_POST, 1L);
    } else {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, request.method);
    }
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }

  // Drive the transfer through the multi interface so `stop` is noticed between short polls
  // instead of only when curl's progress callback happens to run (about once a second).
  CURLcode result = CURLE_OK;
  bool stopped = false;
  std::string multi_error;
  CURLMcode multi_code = curl_multi_add_handle(connection->multi, easy);
  if (multi_code == CURLM_OK) {
    bool done = false;
    while (!done) {
      int running = 0;
      multi_code = curl_multi_perform(connection->multi, &running);
      if (multi_code != CURLM_OK) break;
      int queued = 0;
      while (CURLMsg* message = curl_multi_info_read(connection->multi, &queued)) {
        if (message->msg == CURLMSG_DONE && message->easy_handle == easy) {
          result = message->data.result;
          done = true;
        }
      }
      if (done) break;
      if (request.stop != nullptr && request.stop->load()) {
        stopped = true;
        break;
      }
      const int poll_ms = request.stop != nullptr ? 50 : 1000;
      multi_code = curl_multi_poll(connection->multi, nullptr, 0, poll_ms, nullptr);
      if (multi_code != CURLM_OK) break;
    }
    curl_multi_remove_handle(connection->multi, easy);
  }
  if (multi_code != CURLM_OK) multi_error = curl_multi_strerror(multi_code);
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &transfer.response.status);
  // The handle goes back to the pool: drop its pointers to this call's buffers and lists.
  curl_easy_reset(easy);
  curl_slist_free_all(connect_to);
  Release(std::move(connection));

  const std::string what = std::string(request.method) + " " + url;
  if (!multi_error.empty()) return Error{what + ": " + multi_error};
  if (transfer.too_large) {
    return Error{what + ": response larger than " + std::to_string(transfer.max_bytes) + " bytes"};
  }
  const bool streamed = transfer.on_line != nullptr && transfer.streaming;
  // A watch ends normally when the consumer or `stop` ends it, or when max_duration expires
  // after the stream started.
  if (stopped || (result == CURLE_WRITE_ERROR && transfer.consumer_done) ||
      (result == CURLE_OPERATION_TIMEDOUT && streamed)) {
    return std::move(transfer.response);
  }
  if (result != CURLE_OK) {
    std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(result);
    return Error{what + ": " + detail};
  }
  if (streamed && !transfer.partial_line.empty()) transfer.Deliver(transfer.partial_line);
  return std::move(transfer.response);
}

Result<HttpResponse> ApiClient::Get(std::string_view path) {
  Request request;
  request.method = "GET";
  request.path = path;
  request.timeout = config_.request_timeout;
  return Send(request);
}

Result<HttpResponse> ApiClient::Post(std::string_view path, std::string_view body,
                                     std::string_view content_type) {
  Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.content_type = content_type;
  request.timeout = config_.request_timeout;
  return Send(request);
}

Result<HttpResponse> ApiClient::Put(std::string_view path, std::string_view body) {
  Request request;
  request.method = "PUT";
  request.path = path;
  request.body = body;
  request.content_type = "application/json";
  request.timeout = config_.request_timeout;
  return Send(request);
}

Result<HttpResponse> ApiClient::Patch(std::string_view path, std::string_view body,
                                      std::string_view content_type) {
  Request request;
  request.method = "PATCH";
  request.path = path;
  request.body = body;
  request.content_type = content_type;
  request.timeout = config_.request_timeout;
  return Send(request);
}

Result<long> ApiClient::Watch(std::string_view path,  // NOLINT(google-runtime-int)
                              const std::function<bool(std::string_view line)>& on_line,
                              const std::atomic<bool>& stop,
                              std::chrono::milliseconds max_duration) {
  Request request;
  request.method = "GET";
  request.path = path;
  request.timeout = max_duration;
  request.on_line = &on_line;
  request.stop = &stop;
  Result<HttpResponse> response = Send(request);
  if (!response.ok()) return Error{response.error()};
  if (response->status >= 300) {
    spdlog::debug("kube client: watch {} answered {}: {}", path, response->status,
                  StatusMessage(response->body));
  }
  return response->status;
}

std::string EscapeUrlComponent(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

}  // namespace toposched::kube
