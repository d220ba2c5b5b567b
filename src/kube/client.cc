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

#include <spdlog/spdlog.h>

#include "base/text.h"
#include "net/http_client.h"

namespace toposched::kube {

struct ApiClient::Request {
  const char* method = "GET";
  std::string_view path;
  std::string_view body;
  std::string_view content_type;
  std::chrono::milliseconds timeout{0};
  // Streaming (Watch) only.
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::atomic<bool>* stop = nullptr;
  bool* unsent = nullptr;  // see net::HttpClientRequest::unsent
};

namespace {

// Splits a watch's streamed body into lines for on_line.
struct LineSplitter {
  const std::function<bool(std::string_view)>* on_line = nullptr;
  size_t max_bytes = 0;
  std::string partial_line;  // a line split across chunks
  bool too_large = false;

  // Delivers one line; false when the consumer wants no more.
  bool Deliver(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return true;
    return (*on_line)(line);
  }

  // Returns false to end the transfer.
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

net::HttpClientOptions TransportOptions(const ClientConfig& config, std::string connect_to) {
  net::HttpClientOptions options;
  options.tls.ca_file = config.ca_file;
  options.tls.ca_pem = config.ca_pem;
  options.tls.insecure_skip_verify = config.insecure_skip_tls_verify;
  options.tls.client_cert_file = config.client_cert_file;
  options.tls.client_cert_pem = config.client_cert_pem;
  options.tls.client_key_file = config.client_key_file;
  options.tls.client_key_pem = config.client_key_pem;
  options.connect_to = std::move(connect_to);
  options.connect_timeout = config.connect_timeout;
  options.max_response_bytes = config.max_response_bytes;
  options.max_idle_connections = config.max_idle_connections;
  options.user_agent = config.user_agent;
  return options;
}

}  // namespace

ApiClient::ApiClient(ClientConfig config) : config_(std::move(config)) {}

ApiClient::~ApiClient() = default;

Result<std::unique_ptr<ApiClient>> ApiClient::Create(ClientConfig config) {
  Result<net::UrlParts> url = net::SplitUrl(config.server);
  if (!url.ok()) return Error{"invalid server URL \"" + config.server + "\""};
  if (url->scheme != "https" && url->scheme != "http") {
    return Error{"server URL \"" + config.server + "\" must be http or https"};
  }
  if (!IsTokenSafe(config.token)) return Error{"the bearer token holds control characters"};
  std::unique_ptr<ApiClient> client(new ApiClient(std::move(config)));
  const ClientConfig& settings = client->config_;
  // tls_server_name replaces the host in the URL while CONNECT_TO still dials the real address.
  std::string connect_to;
  if (settings.tls_server_name.empty()) {
    client->url_base_ = url->scheme + "://" + url->host + ":" + url->port + url->path;
  } else {
    client->url_base_ =
        url->scheme + "://" + settings.tls_server_name + ":" + url->port + url->path;
    connect_to = settings.tls_server_name + ":" + url->port + ":" + url->host + ":" + url->port;
  }
  client->http_ = std::make_unique<net::HttpClient>(TransportOptions(settings, connect_to));
  if (!settings.token_file.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto token, ReadTokenFile(settings.token_file));
    MutexLock lock(client->token_mutex_);  // not shared yet; the lock is for the analysis
    client->token_ = std::move(token);
    client->token_read_at_ = std::chrono::steady_clock::now();
  }
  return client;
}

Result<std::unique_ptr<ApiClient>> ApiClient::FromKubeconfig(const std::string& path) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto config, LoadKubeconfig(path));
  return Create(std::move(config));
}

Result<std::unique_ptr<ApiClient>> ApiClient::InCluster(const InClusterOptions& options) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto config, InClusterConfig(options));
  return Create(std::move(config));
}

Result<std::unique_ptr<ApiClient>> ApiClient::FromEnvironment(const std::string& kubeconfig_flag) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto config, ConfigFromEnvironment(kubeconfig_flag));
  return Create(std::move(config));
}

std::string ApiClient::Token(bool force_reload) {
  MutexLock lock(token_mutex_);
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
  net::HttpClientRequest call;
  call.method = request.method;
  call.url = url_base_ + std::string(request.path);
  call.headers.push_back("Accept: application/json");
  call.headers.push_back("Expect:");  // no 100-continue round trip before large bodies
  if (!token.empty()) call.headers.push_back("Authorization: Bearer " + token);
  if (!request.content_type.empty()) {
    call.headers.push_back("Content-Type: " + std::string(request.content_type));
  }
  call.body = request.body;
  call.timeout = request.timeout;
  call.unsent = request.unsent;
  LineSplitter lines;
  if (request.on_line != nullptr) {
    lines.on_line = request.on_line;
    lines.max_bytes = config_.max_response_bytes;
    call.on_body = [&lines](std::string_view chunk) { return lines.Stream(chunk); };
    call.stop = request.stop;
  }
  Result<net::HttpClientResponse> response = http_->Send(call);

  const std::string what = std::string(request.method) + " " + call.url;
  if (!response.ok()) return Error{what + ": " + response.error()};
  if (lines.too_large) {
    return Error{what + ": response larger than " + std::to_string(lines.max_bytes) + " bytes"};
  }
  if (response->streamed && response->end == net::TransferEnd::kComplete &&
      !lines.partial_line.empty()) {
    lines.Deliver(lines.partial_line);
  }
  return HttpResponse{response->status, std::move(response->body)};
}

Result<HttpResponse> ApiClient::Get(std::string_view path) {
  Request request;
  request.method = "GET";
  request.path = path;
  request.timeout = config_.request_timeout;
  return Send(request);
}

Result<HttpResponse> ApiClient::Post(std::string_view path, std::string_view body,
                                     std::string_view content_type,
                                     std::chrono::milliseconds timeout, bool* unsent) {
  Request request;
  request.unsent = unsent;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.content_type = content_type;
  request.timeout = config_.request_timeout;
  if (timeout.count() > 0 && (request.timeout.count() == 0 || timeout < request.timeout)) {
    request.timeout = timeout;
  }
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

Result<HttpResponse> ApiClient::Delete(std::string_view path) {
  Request request;
  request.method = "DELETE";
  request.path = path;
  request.body = "";  // a zero-length body, never a null one, for curl's POSTFIELDS
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
  TOPOSCHED_ASSIGN_OR_RETURN(auto response, Send(request));
  if (response.status >= 300) {
    spdlog::debug("kube client: watch {} answered {}: {}", path, response.status,
                  StatusMessage(response.body));
  }
  return response.status;
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
