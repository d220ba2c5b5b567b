#include "support/fake_apiserver.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "support/build_paths.h"
#include "support/test_certs.h"

namespace toposched::testing {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace json = boost::json;
using tcp = net::ip::tcp;

// Older events are dropped (and watches from before them get "too old"), like etcd compaction.
constexpr size_t kMaxHistory = 10000;
constexpr size_t kMaxBodyBytes = size_t{64} << 20;

std::string_view KindWord(Kind kind) { return kind == Kind::kPod ? "Pod" : "Node"; }

// The fields a field selector may test.
struct Fields {
  std::string ns;
  std::string name;
  std::string node_name;
  std::string phase;
  std::string driver;  // ResourceSlices' spec.driver
};

std::string StringAt(const json::value& root, std::initializer_list<std::string_view> path) {
  const json::value* at = &root;
  for (std::string_view key : path) {
    if (!at->is_object()) return {};
    const json::object& object = at->get_object();
    auto it = object.find(key);
    if (it == object.end()) return {};
    at = &it->value();
  }
  return at->is_string() ? std::string(at->get_string()) : std::string();
}

Fields FieldsOf(const json::value& object) {
  return Fields{StringAt(object, {"metadata", "namespace"}), StringAt(object, {"metadata", "name"}),
                StringAt(object, {"spec", "nodeName"}), StringAt(object, {"status", "phase"}),
                StringAt(object, {"spec", "driver"})};
}

struct Requirement {
  std::string field;
  bool equal = true;
  std::string value;
};

// Parses "a=b,c!=d"; nullopt for an unsupported field.
std::optional<std::vector<Requirement>> ParseFieldSelector(std::string_view text) {
  std::vector<Requirement> requirements;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view term = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    Requirement requirement;
    size_t op = term.find("!=");
    size_t value_at;
    if (op != std::string_view::npos) {
      requirement.equal = false;
      value_at = op + 2;
    } else if ((op = term.find("==")) != std::string_view::npos) {
      value_at = op + 2;
    } else if ((op = term.find('=')) != std::string_view::npos) {
      value_at = op + 1;
    } else {
      return std::nullopt;
    }
    requirement.field = std::string(term.substr(0, op));
    requirement.value = std::string(term.substr(value_at));
    static const char* const kSupported[] = {"metadata.name", "metadata.namespace", "spec.nodeName",
                                             "status.phase", "spec.driver"};
    if (std::find(std::begin(kSupported), std::end(kSupported), requirement.field) ==
        std::end(kSupported)) {
      return std::nullopt;
    }
    requirements.push_back(std::move(requirement));
  }
  return requirements;
}

bool Matches(const std::vector<Requirement>& selector, const Fields& fields) {
  for (const Requirement& requirement : selector) {
    const std::string* actual = nullptr;
    if (requirement.field == "metadata.name") actual = &fields.name;
    if (requirement.field == "metadata.namespace") actual = &fields.ns;
    if (requirement.field == "spec.nodeName") actual = &fields.node_name;
    if (requirement.field == "status.phase") actual = &fields.phase;
    if (requirement.field == "spec.driver") actual = &fields.driver;
    if (actual == nullptr || (*actual == requirement.value) != requirement.equal) return false;
  }
  return true;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const std::string hex(text.substr(i + 1, 2));
      char* end = nullptr;
      const long value = std::strtol(hex.c_str(), &end, 16);  // NOLINT(google-runtime-int)
      if (end == hex.c_str() + 2) {
        out += static_cast<char>(value);
        i += 2;
        continue;
      }
    }
    out += text[i] == '+' ? ' ' : text[i];
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> params;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    params[PercentDecode(pair.substr(0, eq))] =
        eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
  }
  return params;
}

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> segments;
  while (!path.empty()) {
    if (path.front() == '/') {
      path.remove_prefix(1);
      continue;
    }
    const size_t slash = path.find('/');
    segments.push_back(PercentDecode(path.substr(0, slash)));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  return segments;
}

std::string StatusJson(int code, std::string_view reason, std::string_view message) {
  json::object status;
  status["kind"] = "Status";
  status["apiVersion"] = "v1";
  status["metadata"] = json::object();
  status["status"] = code < 300 ? "Success" : "Failure";
  if (!message.empty()) status["message"] = message;
  if (!reason.empty()) status["reason"] = reason;
  status["code"] = code;
  return json::serialize(status);
}

std::string ReasonFor(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 415:
      return "UnsupportedMediaType";
    case 500:
      return "InternalError";
    default:
      return "";
  }
}

json::value MergePatch(json::value target, const json::value& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = json::object();
  json::object& object = target.as_object();
  for (const auto& [key, value] : patch.as_object()) {
    if (value.is_null()) {
      object.erase(key);
    } else {
      auto it = object.find(key);
      json::value current = it == object.end() ? json::value() : it->value();
      object[key] = MergePatch(std::move(current), value);
    }
  }
  return target;
}

std::string Base64(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    const uint32_t n = (static_cast<unsigned char>(data[i]) << 16) |
                       (static_cast<unsigned char>(data[i + 1]) << 8) |
                       static_cast<unsigned char>(data[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i + 1 == data.size()) {
    const uint32_t n = static_cast<unsigned char>(data[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == data.size()) {
    const uint32_t n = (static_cast<unsigned char>(data[i]) << 16) |
                       (static_cast<unsigned char>(data[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response MakeResponse(const Request& request, int code, std::string body) {
  Response response(static_cast<http::status>(code), request.version());
  response.set(http::field::content_type, "application/json");
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

Response StatusResponse(const Request& request, int code, std::string_view message) {
  return MakeResponse(request, code, StatusJson(code, ReasonFor(code), message));
}

}  // namespace

class Session;

class FakeApiServer::Impl {
 public:
  explicit Impl(Options options);
  ~Impl();
  void Stop();

  void OnRequest(const std::shared_ptr<Session>& session, Request request);
  void RemoveWatcher(const Session* session);

  // Everything below is guarded by mutex_.
  mutable std::mutex mutex_;
  Options options_;
  TestPki pki_;
  std::map<std::string, json::value> pods_;    // by namespace/name
  std::map<std::string, json::value> nodes_;   // by name
  std::map<std::string, json::value> leases_;  // coordination.k8s.io/v1, by namespace/name
  std::map<std::string, std::pair<int, std::string>> served_json_;  // ServeJson: path -> answer
  // resource.k8s.io/v1 ResourceSlices, by name
  std::map<std::string, json::value> resource_slices_;
  SharedCountersMode shared_counters_mode_ = SharedCountersMode::kKeep;
  DeviceTaintsMode device_taints_mode_ = DeviceTaintsMode::kKeep;
  int64_t resource_version_ = 100;
  int64_t compacted_ = 0;  // watches from before this are too old

  struct StoredEvent {
    Kind kind;
    int64_t resource_version;
    Fields fields;
    std::string line;
  };
  std::deque<StoredEvent> history_;
  TooOldMode too_old_mode_ = TooOldMode::kHttp410;
  WatchListMode watch_list_mode_ = WatchListMode::kServe;
  int reject_pod_watches_ = 0;
  int reject_node_watches_ = 0;
  std::string canned_pod_list_;  // AnswerNextPodListsWith
  int canned_pod_lists_ = 0;

  struct Watcher {
    std::weak_ptr<Session> session;
    Kind kind;
    std::string ns;  // empty: all namespaces
    std::vector<Requirement> selector;
    int64_t last_sent = 0;
  };
  std::vector<Watcher> watchers_;
  int pod_watches_started_ = 0;
  int node_watches_started_ = 0;
  int connections_ = 0;
  std::vector<FailureRule> failures_;
  std::vector<RecordedRequest> requests_;
  // Requests a `hold` rule keeps: what answers them, and when they can no longer be applied.
  struct Held {
    std::function<void()> finish;
    std::function<void()> expire;
    std::optional<std::chrono::steady_clock::time_point> deadline;
  };
  std::vector<Held> held_;

  net::io_context io_;
  ssl::context tls_{ssl::context::tls_server};
  tcp::acceptor acceptor_{io_};
  int port_ = 0;
  std::thread thread_;

  int64_t Store(Kind kind, std::string_view type, const json::value& object);
  void Broadcast(Kind kind, int64_t resource_version, const Fields& fields,
                 const std::string& line);
  template <typename Fn>
  void ForEachWatcherOnIoThread(Kind kind, Fn fn);

 private:
  void Accept();
  void Route(const std::shared_ptr<Session>& session, const Request& request);
  void HandleCollection(const std::shared_ptr<Session>& session, const Request& request, Kind kind,
                        const std::string& ns, const std::map<std::string, std::string>& params);
  void HandleWatch(const std::shared_ptr<Session>& session, const Request& request, Kind kind,
                   const std::string& ns, std::vector<Requirement> selector,
                   const std::map<std::string, std::string>& params);
  Response HandleBinding(const Request& request, const std::string& ns, const std::string& name);
  // A merge-patch of a pod (ns non-empty) or of a node (ns empty).
  Response HandlePatch(const Request& request, const std::string& ns, const std::string& name);
  // GET, POST (create) and PUT (update, 409 on a stale metadata.resourceVersion) of Leases.
  Response HandleLease(const Request& request, const std::vector<std::string>& path);
  // List (field selector, limit/continue), GET, POST, PUT (409 on a stale
  // metadata.resourceVersion) and DELETE of ResourceSlices.
  Response HandleResourceSlice(const Request& request, const std::vector<std::string>& path,
                               const std::map<std::string, std::string>& params);
};

// One TLS connection. Serves requests one after another (keep-alive); a watch turns it into a
// chunked stream until the watch ends, and then the connection closes.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(FakeApiServer::Impl* server, tcp::socket socket, ssl::context& tls)
      : server_(server), stream_(std::move(socket), tls), timer_(stream_.get_executor()) {}

  void Start() {
    stream_.async_handshake(
        ssl::stream_base::server, [self = shared_from_this()](beast::error_code error) {
          if (error) return self->Close();
          SSL* ssl = self->stream_.native_handle();
          self->client_verified_ =
              SSL_get0_peer_certificate(ssl) != nullptr && SSL_get_verify_result(ssl) == X509_V_OK;
          self->Read();
        });
  }

  bool client_verified() const { return client_verified_; }
  net::steady_timer& timer() { return timer_; }

  void Send(Response response) {
    if (closed_) return;
    auto shared = std::make_shared<Response>(std::move(response));
    http::async_write(stream_, *shared,
                      [self = shared_from_this(), shared](beast::error_code error, size_t) {
                        if (error || !shared->keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  void StartWatch(std::vector<std::string> lines, int timeout_seconds) {
    watching_ = true;
    header_ = std::make_unique<http::response<http::empty_body>>(http::status::ok, 11);
    header_->set(http::field::content_type, "application/json");
    header_->chunked(true);
    // The connection ends with the watch, which keeps this fake simple: it never has to switch
    // from watching for a hang-up back to reading requests.
    header_->keep_alive(false);
    serializer_ = std::make_unique<http::response_serializer<http::empty_body>>(*header_);
    writing_ = true;
    for (std::string& line : lines) outbox_.push_back(std::move(line) + "\n");
    http::async_write_header(stream_, *serializer_,
                             [self = shared_from_this()](beast::error_code error, size_t) {
                               if (error) return self->Close();
                               self->WriteNext();
                             });
    WatchForHangUp();
    if (timeout_seconds > 0) {
      timer_.expires_after(std::chrono::seconds(timeout_seconds));
      timer_.async_wait([weak = weak_from_this()](beast::error_code error) {
        if (auto self = weak.lock(); self && !error) self->EndWatch();
      });
    }
  }

  void Enqueue(const std::string& line) {
    if (!watching_ || ending_ || closed_) return;
    outbox_.push_back(line + "\n");
    if (!writing_) WriteNext();
  }

  // Sends the final chunk, then closes the connection.
  void EndWatch() {
    if (!watching_ || ending_ || closed_) return;
    ending_ = true;
    if (!writing_) WriteNext();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(stream_).close();
    if (watching_) server_->RemoveWatcher(this);
    watching_ = false;
  }

 private:
  void Read() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       if (error) return self->Close();
                       self->server_->OnRequest(self, self->parser_->release());
                     });
  }

  void WriteNext() {
    if (closed_) return;
    writing_ = true;
    if (!outbox_.empty()) {
      current_ = std::move(outbox_.front());
      outbox_.pop_front();
      net::async_write(stream_, http::make_chunk(net::buffer(current_)),
                       [self = shared_from_this()](beast::error_code error, size_t) {
                         if (error) return self->Close();
                         self->WriteNext();
                       });
      return;
    }
    if (ending_) {
      net::async_write(stream_, http::make_chunk_last(),
                       [self = shared_from_this()](beast::error_code error, size_t) {
                         if (error) return self->Close();
                         self->FinishWatch();
                       });
      return;
    }
    writing_ = false;
  }

  // The pending read keeps the session alive while it waits for events, and notices the client
  // going away (Stop, a timeout) even when nothing is being written.
  void WatchForHangUp() {
    stream_.async_read_some(net::buffer(hang_up_buffer_),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (error) return self->Close();
                              self->WatchForHangUp();  // a client sends nothing; ignore it
                            });
  }

  void FinishWatch() { Close(); }

  FakeApiServer::Impl* server_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer timer_;
  bool client_verified_ = false;
  bool closed_ = false;

  bool watching_ = false;
  bool writing_ = false;
  bool ending_ = false;
  std::unique_ptr<http::response<http::empty_body>> header_;
  std::unique_ptr<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> outbox_;
  std::string current_;
  char hang_up_buffer_[64];
};

FakeApiServer::Impl::Impl(Options options) : options_(std::move(options)), pki_(GenerateTestPki()) {
  tls_.use_certificate_chain(net::buffer(pki_.server_cert_pem));
  tls_.use_private_key(net::buffer(pki_.server_key_pem), ssl::context::pem);
  // Ask for a client certificate but do not require one: tokens work too.
  tls_.add_certificate_authority(net::buffer(pki_.ca_cert_pem));
  tls_.set_verify_mode(ssl::verify_peer);
  // With peer verification on, OpenSSL refuses to resume a session (curl tries on every new
  // connection) unless the context has a session id context.
  static constexpr unsigned char kSessionContext[] = "toposched-fake-apiserver";
  SSL_CTX_set_session_id_context(tls_.native_handle(), kSessionContext, sizeof kSessionContext - 1);
  const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  Accept();
  thread_ = std::thread([this] { io_.run(); });
}

FakeApiServer::Impl::~Impl() { Stop(); }

void FakeApiServer::Impl::Stop() {
  if (!thread_.joinable()) return;
  io_.stop();
  thread_.join();
}

void FakeApiServer::Impl::Accept() {
  acceptor_.async_accept([this](beast::error_code error, tcp::socket socket) {
    if (error) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++connections_;
    }
    socket.set_option(tcp::no_delay(true));
    std::make_shared<Session>(this, std::move(socket), tls_)->Start();
    Accept();
  });
}

void FakeApiServer::Impl::RemoveWatcher(const Session* session) {
  std::lock_guard<std::mutex> lock(mutex_);
  watchers_.erase(std::remove_if(watchers_.begin(), watchers_.end(),
                                 [&](const Watcher& watcher) {
                                   auto locked = watcher.session.lock();
                                   return locked == nullptr || locked.get() == session;
                                 }),
                  watchers_.end());
}

template <typename Fn>
void FakeApiServer::Impl::ForEachWatcherOnIoThread(Kind kind, Fn fn) {
  net::post(io_, [this, kind, fn] {
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Watcher& watcher : watchers_) {
        if (watcher.kind != kind) continue;
        if (auto session = watcher.session.lock()) sessions.push_back(std::move(session));
      }
    }
    for (const auto& session : sessions) fn(*session);
  });
}

// REQUIRES: mutex_ held.
int64_t FakeApiServer::Impl::Store(Kind kind, std::string_view type, const json::value& object) {
  json::object event;
  event["type"] = type;
  event["object"] = object;
  StoredEvent stored{kind, resource_version_, FieldsOf(object), json::serialize(event)};
  history_.push_back(stored);
  if (history_.size() > kMaxHistory) {
    compacted_ = history_.front().resource_version;
    history_.pop_front();
  }
  net::post(io_, [this, stored = std::move(stored)] {
    Broadcast(stored.kind, stored.resource_version, stored.fields, stored.line);
  });
  return resource_version_;
}

void FakeApiServer::Impl::Broadcast(Kind kind, int64_t resource_version, const Fields& fields,
                                    const std::string& line) {
  std::vector<std::shared_ptr<Session>> targets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Watcher& watcher : watchers_) {
      if (watcher.kind != kind || watcher.last_sent >= resource_version) continue;
      if (!watcher.ns.empty() && watcher.ns != fields.ns) continue;
      if (!Matches(watcher.selector, fields)) continue;
      watcher.last_sent = resource_version;
      if (auto session = watcher.session.lock()) targets.push_back(std::move(session));
    }
  }
  for (const auto& session : targets) session->Enqueue(line);
}

void FakeApiServer::Impl::OnRequest(const std::shared_ptr<Session>& session, Request request) {
  RecordedRequest record;
  record.method = std::string(request.method_string());
  record.target = std::string(request.target());
  const size_t question = record.target.find('?');
  record.path = record.target.substr(0, question);
  record.query = question == std::string::npos ? "" : record.target.substr(question + 1);
  record.authorization = std::string(request[http::field::authorization]);
  record.content_type = std::string(request[http::field::content_type]);
  record.body = request.body();

  std::optional<FailureRule> failure;
  bool authorized;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back(record);
    authorized = session->client_verified() ||
                 (!options_.token.empty() && record.authorization == "Bearer " + options_.token);
    if (authorized) {
      for (FailureRule& rule : failures_) {
        if (rule.times == 0) continue;
        if (!rule.method.empty() && rule.method != record.method) continue;
        if (record.path.compare(0, rule.path_prefix.size(), rule.path_prefix) != 0) continue;
        if (rule.times > 0) --rule.times;
        failure = rule;
        break;
      }
    }
  }
  if (!authorized) {
    return session->Send(StatusResponse(request, 401, "Unauthorized"));
  }
  if (!failure.has_value()) return Route(session, request);

  std::function<void()> expire;
  if (failure->hold) {
    expire = [session, copy = request]() {
      session->Send(StatusResponse(
          copy, 504, "Timeout: request did not complete within the allowed duration"));
    };
  }
  auto finish = [this, session, request = std::move(request), status = failure->status,
                 apply = failure->apply_first]() {
    if (status != 0 && apply) {
      const std::string target(request.target());
      const std::vector<std::string> path =
          SplitPath(std::string_view(target).substr(0, target.find('?')));
      const bool pod = path.size() >= 6 && path[2] == "namespaces" && path[4] == "pods";
      if (pod && path.size() == 7 && path[6] == "binding" && request.method_string() == "POST") {
        HandleBinding(request, path[3], path[5]);  // applied; its own answer is dropped
      } else if (pod && path.size() == 6 && request.method_string() == "PATCH") {
        HandlePatch(request, path[3], path[5]);
      }
    }
    if (status != 0) {
      session->Send(StatusResponse(request, status, "injected failure"));
    } else {
      Route(session, request);
    }
  };
  if (failure->hold) {
    // ?timeout=Nms (what toposched sends) bounds when the server may still apply it.
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (const size_t at = record.query.find("timeout="); at != std::string::npos) {
      const std::string value = record.query.substr(at + 8, record.query.find('&', at) - at - 8);
      if (value.size() > 2 && value.ends_with("ms")) {
        deadline = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(std::stoll(value.substr(0, value.size() - 2)));
      }
    }
    Held held{std::move(finish), std::move(expire), deadline};
    if (failure->delay.count() == 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      held_.push_back(std::move(held));
      return;
    }
    session->timer().expires_after(failure->delay);
    session->timer().async_wait(
        [this, held = std::move(held), session](beast::error_code error) mutable {
          if (error) return;
          std::lock_guard<std::mutex> lock(mutex_);
          held_.push_back(std::move(held));
        });
    return;
  }
  if (failure->delay.count() == 0) return finish();
  session->timer().expires_after(failure->delay);
  session->timer().async_wait(
      [finish = std::move(finish), session](beast::error_code error) mutable {
        if (!error) finish();
      });
}

void FakeApiServer::Impl::Route(const std::shared_ptr<Session>& session, const Request& request) {
  const std::string target(request.target());
  const size_t question = target.find('?');
  const std::vector<std::string> path = SplitPath(std::string_view(target).substr(0, question));
  const auto params =
      ParseQuery(question == std::string::npos ? std::string_view()
                                               : std::string_view(target).substr(question + 1));
  const std::string method(request.method_string());
  const size_t n = path.size();
  if (method == "GET") {
    std::lock_guard<std::mutex> lock(mutex_);
    auto served = served_json_.find(target.substr(0, question));
    if (served != served_json_.end()) {
      return session->Send(MakeResponse(request, served->second.first, served->second.second));
    }
  }
  if (n >= 6 && path[0] == "apis" && path[1] == "coordination.k8s.io" && path[2] == "v1" &&
      path[3] == "namespaces" && path[5] == "leases") {
    return session->Send(HandleLease(request, path));
  }
  if (n >= 4 && path[0] == "apis" && path[1] == "resource.k8s.io" && path[2] == "v1" &&
      path[3] == "resourceslices") {
    return session->Send(HandleResourceSlice(request, path, params));
  }
  const bool core = n >= 2 && path[0] == "api" && path[1] == "v1";
  if (!core) return session->Send(StatusResponse(request, 404, "the server could not find it"));

  // /api/v1/pods, /api/v1/nodes, /api/v1/namespaces/NS/pods
  if (method == "GET" && n == 3 && (path[2] == "pods" || path[2] == "nodes")) {
    return HandleCollection(session, request, path[2] == "pods" ? Kind::kPod : Kind::kNode, "",
                            params);
  }
  if (method == "GET" && n == 5 && path[2] == "namespaces" && path[4] == "pods") {
    return HandleCollection(session, request, Kind::kPod, path[3], params);
  }
  if (n == 6 && path[2] == "namespaces" && path[4] == "pods") {
    if (method == "GET") {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = pods_.find(path[3] + "/" + path[5]);
      if (it == pods_.end()) {
        return session->Send(StatusResponse(request, 404, "pods \"" + path[5] + "\" not found"));
      }
      return session->Send(MakeResponse(request, 200, json::serialize(it->second)));
    }
    if (method == "PATCH") return session->Send(HandlePatch(request, path[3], path[5]));
  }
  if (method == "PATCH" && n == 7 && path[2] == "namespaces" && path[4] == "pods" &&
      path[6] == "status") {
    // Recorded (RequestsMatching) and answered with the pod as stored: the fake keeps no status.
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pods_.find(path[3] + "/" + path[5]);
    if (it == pods_.end()) {
      return session->Send(StatusResponse(request, 404, "pods \"" + path[5] + "\" not found"));
    }
    return session->Send(MakeResponse(request, 200, json::serialize(it->second)));
  }
  if (method == "POST" && n == 7 && path[2] == "namespaces" && path[4] == "pods" &&
      path[6] == "binding") {
    return session->Send(HandleBinding(request, path[3], path[5]));
  }
  if (method == "POST" && n == 5 && path[2] == "namespaces" && path[4] == "events") {
    boost::system::error_code error;
    json::value event = json::parse(request.body(), error);
    if (error || !event.is_object()) {
      return session->Send(StatusResponse(request, 400, "invalid Event JSON"));
    }
    return session->Send(MakeResponse(request, 201, request.body()));
  }
  if (method == "PATCH" && n == 4 && path[2] == "nodes") {
    return session->Send(HandlePatch(request, "", path[3]));
  }
  if (method == "GET" && n == 4 && path[2] == "nodes") {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = nodes_.find(path[3]);
    if (it == nodes_.end()) {
      return session->Send(StatusResponse(request, 404, "nodes \"" + path[3] + "\" not found"));
    }
    return session->Send(MakeResponse(request, 200, json::serialize(it->second)));
  }
  session->Send(StatusResponse(request, 404, "the server could not find the requested resource"));
}

void FakeApiServer::Impl::HandleCollection(const std::shared_ptr<Session>& session,
                                           const Request& request, Kind kind, const std::string& ns,
                                           const std::map<std::string, std::string>& params) {
  std::vector<Requirement> selector;
  if (auto it = params.find("fieldSelector"); it != params.end()) {
    auto parsed = ParseFieldSelector(it->second);
    if (!parsed) {
      return session->Send(StatusResponse(request, 400, "field label not supported"));
    }
    selector = std::move(*parsed);
  }
  auto watch = params.find("watch");
  if (watch != params.end() && (watch->second == "1" || watch->second == "true")) {
    return HandleWatch(session, request, kind, ns, std::move(selector), params);
  }

  size_t limit = 0;
  if (auto it = params.find("limit"); it != params.end()) {
    limit = std::strtoul(it->second.c_str(), nullptr, 10);
  }
  size_t offset = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  if (kind == Kind::kPod && canned_pod_lists_ > 0 && params.count("continue") == 0) {
    --canned_pod_lists_;
    return session->Send(MakeResponse(request, 200, canned_pod_list_));
  }
  int64_t snapshot = resource_version_;
  if (auto it = params.find("continue"); it != params.end() && !it->second.empty()) {
    // Our tokens are "<snapshot rv>:<offset>".
    const size_t colon = it->second.find(':');
    if (colon == std::string::npos) {
      return session->Send(StatusResponse(request, 400, "invalid continue token"));
    }
    snapshot = std::strtoll(it->second.c_str(), nullptr, 10);
    offset = std::strtoul(it->second.c_str() + colon + 1, nullptr, 10);
    if (snapshot < compacted_) {
      return session->Send(
          StatusResponse(request, 410,
                         "The provided continue parameter is too old to display a consistent list "
                         "result. You can start a new list without the continue parameter."));
    }
  }
  const auto& store = kind == Kind::kPod ? pods_ : nodes_;
  json::array items;
  size_t index = 0;
  bool more = false;
  for (const auto& [key, object] : store) {
    const Fields fields = FieldsOf(object);
    if (!ns.empty() && fields.ns != ns) continue;
    if (!Matches(selector, fields)) continue;
    if (index++ < offset) continue;
    if (limit > 0 && items.size() == limit) {
      more = true;
      break;
    }
    items.push_back(object);
  }
  json::object metadata;
  metadata["resourceVersion"] = std::to_string(snapshot);
  if (more) metadata["continue"] = std::to_string(snapshot) + ":" + std::to_string(offset + limit);
  json::object list;
  list["kind"] = std::string(KindWord(kind)) + "List";
  list["apiVersion"] = "v1";
  list["metadata"] = std::move(metadata);
  list["items"] = std::move(items);
  session->Send(MakeResponse(request, 200, json::serialize(list)));
}

void FakeApiServer::Impl::HandleWatch(const std::shared_ptr<Session>& session,
                                      const Request& request, Kind kind, const std::string& ns,
                                      std::vector<Requirement> selector,
                                      const std::map<std::string, std::string>& params) {
  int64_t from = 0;
  if (auto it = params.find("resourceVersion"); it != params.end() && !it->second.empty()) {
    char* end = nullptr;
    from = std::strtoll(it->second.c_str(), &end, 10);
    if (*end != '\0') {
      return session->Send(StatusResponse(request, 400, "invalid resourceVersion"));
    }
  }
  int timeout_seconds = 0;
  if (auto it = params.find("timeoutSeconds"); it != params.end()) {
    timeout_seconds = std::atoi(it->second.c_str());
  }
  const auto param = [&](const char* name) {
    auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
  };
  if (param("sendInitialEvents") == "true") {
    WatchListMode watch_list_mode;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      watch_list_mode = watch_list_mode_;
    }
    switch (watch_list_mode) {
      case WatchListMode::kRefuseInvalid:
        return session->Send(StatusResponse(
            request, 422,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
            "resourceVersionMatch is forbidden for watch"));
      case WatchListMode::kRefuseErrorEvent: {
        json::object event;
        event["type"] = "ERROR";
        event["object"] = json::parse(StatusJson(
            500, "InternalError",
            "a watch stream was requested by the client but the required storage feature "
            "RequestWatchProgress is disabled"));
        session->StartWatch({json::serialize(event)}, 0);
        session->EndWatch();
        return;
      }
      case WatchListMode::kServe: {
        // What the API server checks (staging apimachinery ValidateListOptions).
        if (param("resourceVersionMatch") != "NotOlderThan" ||
            param("allowWatchBookmarks") != "true") {
          return session->Send(
              StatusResponse(request, 422,
                             "sendInitialEvents requires resourceVersionMatch=NotOlderThan and "
                             "allowWatchBookmarks=true"));
        }
        std::vector<std::string> lines;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          for (const auto& [key, object] : kind == Kind::kPod ? pods_ : nodes_) {
            const Fields fields = FieldsOf(object);
            if (!ns.empty() && fields.ns != ns) continue;
            if (!Matches(selector, fields)) continue;
            lines.push_back(json::serialize(json::object{{"type", "ADDED"}, {"object", object}}));
          }
          json::object bookmark;
          bookmark["kind"] = KindWord(kind);
          bookmark["apiVersion"] = "v1";
          bookmark["metadata"] =
              json::object{{"resourceVersion", std::to_string(resource_version_)},
                           {"annotations", json::object{{"k8s.io/initial-events-end", "true"}}}};
          lines.push_back(
              json::serialize(json::object{{"type", "BOOKMARK"}, {"object", std::move(bookmark)}}));
          watchers_.push_back(Watcher{session, kind, ns, std::move(selector), resource_version_});
          ++(kind == Kind::kPod ? pod_watches_started_ : node_watches_started_);
        }
        // Events broadcast from now on reach the session through the io thread, after these.
        session->StartWatch(std::move(lines), timeout_seconds);
        return;
      }
      case WatchListMode::kIgnore:
        break;  // a plain watch from "now" with the history replayed, as below
    }
  }

  std::vector<std::string> replay;
  bool too_old = false;
  TooOldMode mode;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mode = too_old_mode_;
    message = "too old resource version: " + std::to_string(from) + " (" +
              std::to_string(compacted_) + ")";
    int& rejects = kind == Kind::kPod ? reject_pod_watches_ : reject_node_watches_;
    if (rejects > 0) {
      --rejects;
      too_old = true;
    } else if (from > 0 && from < compacted_) {
      too_old = true;
    }
    if (!too_old) {
      for (const StoredEvent& event : history_) {
        if (event.kind != kind || event.resource_version <= from) continue;
        if (!ns.empty() && event.fields.ns != ns) continue;
        if (!Matches(selector, event.fields)) continue;
        replay.push_back(event.line);
      }
      watchers_.push_back(Watcher{session, kind, ns, std::move(selector), resource_version_});
      ++(kind == Kind::kPod ? pod_watches_started_ : node_watches_started_);
    }
  }
  if (too_old && mode == TooOldMode::kHttp410) {
    return session->Send(StatusResponse(request, 410, message));
  }
  if (too_old) {
    json::object event;
    event["type"] = "ERROR";
    event["object"] = json::parse(StatusJson(410, "Expired", message));
    session->StartWatch({json::serialize(event)}, 0);
    session->EndWatch();
    return;
  }
  session->StartWatch(std::move(replay), timeout_seconds);
}

Response FakeApiServer::Impl::HandleBinding(const Request& request, const std::string& ns,
                                            const std::string& name) {
  boost::system::error_code error;
  json::value binding = json::parse(request.body(), error);
  if (error || !binding.is_object()) return StatusResponse(request, 400, "invalid Binding JSON");
  if (StringAt(binding, {"metadata", "name"}) != name) {
    return StatusResponse(request, 400, "metadata.name must match the pod name in the URL");
  }
  const std::string node = StringAt(binding, {"target", "name"});
  if (node.empty()) return StatusResponse(request, 400, "target.name: Required value");
  const std::string uid = StringAt(binding, {"metadata", "uid"});

  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pods_.find(ns + "/" + name);
  if (it == pods_.end()) return StatusResponse(request, 404, "pods \"" + name + "\" not found");
  json::value& pod = it->second;
  const std::string pod_uid = StringAt(pod, {"metadata", "uid"});
  if (!uid.empty() && uid != pod_uid) {
    return StatusResponse(request, 409,
                          "Operation cannot be fulfilled on pods/binding \"" + name +
                              "\": Precondition failed: UID in precondition: " + uid +
                              ", UID in object meta: " + pod_uid);
  }
  const std::string bound_to = StringAt(pod, {"spec", "nodeName"});
  if (!bound_to.empty()) {
    return StatusResponse(request, 409,
                          "Operation cannot be fulfilled on pods/binding \"" + name + "\": pod " +
                              name + " is already assigned to node \"" + bound_to + "\"");
  }
  json::object& object = pod.as_object();
  if (!object["spec"].is_object()) object["spec"] = json::object();
  object["spec"].as_object()["nodeName"] = node;
  if (!object["metadata"].is_object()) object["metadata"] = json::object();
  json::object& metadata = object["metadata"].as_object();
  const json::value* annotations = nullptr;
  if (const auto* binding_metadata = binding.as_object().if_contains("metadata")) {
    if (binding_metadata->is_object()) {
      annotations = binding_metadata->as_object().if_contains("annotations");
    }
  }
  if (annotations != nullptr && annotations->is_object()) {
    if (!metadata["annotations"].is_object()) metadata["annotations"] = json::object();
    for (const auto& [key, value] : annotations->as_object()) {
      metadata["annotations"].as_object()[key] = value;
    }
  }
  ++resource_version_;
  metadata["resourceVersion"] = std::to_string(resource_version_);
  Store(Kind::kPod, "MODIFIED", pod);
  return MakeResponse(request, 201, StatusJson(201, "", ""));
}

Response FakeApiServer::Impl::HandlePatch(const Request& request, const std::string& ns,
                                          const std::string& name) {
  if (request[http::field::content_type] != "application/merge-patch+json") {
    return StatusResponse(request, 415, "the fake supports application/merge-patch+json only");
  }
  boost::system::error_code error;
  json::value patch = json::parse(request.body(), error);
  if (error || !patch.is_object()) return StatusResponse(request, 400, "invalid patch JSON");
  std::lock_guard<std::mutex> lock(mutex_);
  const bool node = ns.empty();
  auto& store = node ? nodes_ : pods_;
  auto it = store.find(node ? name : ns + "/" + name);
  if (it == store.end()) {
    return StatusResponse(request, 404,
                          std::string(node ? "nodes" : "pods") + " \"" + name + "\" not found");
  }
  json::value patched = MergePatch(it->second, patch);
  // Identity fields cannot change through a patch.
  json::object identity{{"name", name}};
  if (!node) identity["namespace"] = ns;
  patched.as_object()["metadata"] = MergePatch(patched.as_object()["metadata"], identity);
  ++resource_version_;
  patched.as_object()["metadata"].as_object()["resourceVersion"] =
      std::to_string(resource_version_);
  it->second = std::move(patched);
  Store(node ? Kind::kNode : Kind::kPod, "MODIFIED", it->second);
  return MakeResponse(request, 200, json::serialize(it->second));
}

Response FakeApiServer::Impl::HandleLease(const Request& request,
                                          const std::vector<std::string>& path) {
  const std::string method(request.method_string());
  const std::string& ns = path[4];
  std::lock_guard<std::mutex> lock(mutex_);
  if (path.size() == 6 && method == "POST") {
    boost::system::error_code error;
    json::value lease = json::parse(request.body(), error);
    if (error || !lease.is_object()) return StatusResponse(request, 400, "invalid Lease JSON");
    const std::string name = StringAt(lease, {"metadata", "name"});
    if (name.empty()) return StatusResponse(request, 422, "metadata.name: Required value");
    if (leases_.count(ns + "/" + name) != 0) {
      return StatusResponse(request, 409,
                            "leases.coordination.k8s.io \"" + name + "\" already exists");
    }
    json::object& metadata = lease.as_object()["metadata"].as_object();
    metadata["namespace"] = ns;
    metadata["resourceVersion"] = std::to_string(++resource_version_);
    leases_[ns + "/" + name] = lease;
    return MakeResponse(request, 201, json::serialize(lease));
  }
  if (path.size() != 7) return StatusResponse(request, 405, "method not allowed");
  const std::string key = ns + "/" + path[6];
  auto it = leases_.find(key);
  if (method == "GET") {
    if (it == leases_.end()) {
      return StatusResponse(request, 404,
                            "leases.coordination.k8s.io \"" + path[6] + "\" not found");
    }
    return MakeResponse(request, 200, json::serialize(it->second));
  }
  if (method == "PUT") {
    boost::system::error_code error;
    json::value lease = json::parse(request.body(), error);
    if (error || !lease.is_object()) return StatusResponse(request, 400, "invalid Lease JSON");
    if (it == leases_.end()) {
      return StatusResponse(request, 404,
                            "leases.coordination.k8s.io \"" + path[6] + "\" not found");
    }
    const std::string want = StringAt(lease, {"metadata", "resourceVersion"});
    if (!want.empty() && want != StringAt(it->second, {"metadata", "resourceVersion"})) {
      return StatusResponse(request, 409,
                            "Operation cannot be fulfilled on leases.coordination.k8s.io \"" +
                                path[6] +
                                "\": the object has been modified; please apply your changes "
                                "to the latest version and try again");
    }
    json::object& metadata = lease.as_object()["metadata"].as_object();
    metadata["namespace"] = ns;
    metadata["name"] = path[6];
    metadata["resourceVersion"] = std::to_string(++resource_version_);
    it->second = lease;
    return MakeResponse(request, 200, json::serialize(lease));
  }
  return StatusResponse(request, 405, "method not allowed");
}

namespace {

// What a server with DRAPartitionableDevices off does to the fields of that gate on a write.
void DropPartitionableFields(json::value& slice) {
  json::object* spec = slice.as_object().if_contains("spec") != nullptr
                           ? slice.as_object()["spec"].if_object()
                           : nullptr;
  if (spec == nullptr) return;
  spec->erase("sharedCounters");
  spec->erase("perDeviceNodeSelection");
  if (json::array* devices = spec->contains("devices") ? (*spec)["devices"].if_array() : nullptr) {
    for (json::value& device : *devices) {
      if (json::object* d = device.if_object()) d->erase("consumesCounters");
    }
  }
}

// What a server with DRADeviceTaints off does to devices' taints on a write.
void DropDeviceTaints(json::value& slice) {
  json::object* spec = slice.as_object().if_contains("spec") != nullptr
                           ? slice.as_object()["spec"].if_object()
                           : nullptr;
  if (spec == nullptr) return;
  if (json::array* devices = spec->contains("devices") ? (*spec)["devices"].if_array() : nullptr) {
    for (json::value& device : *devices) {
      if (json::object* d = device.if_object()) d->erase("taints");
    }
  }
}

// The few checks of the real validation a test of a publisher can trip: the name, the driver,
// a slice count, devices or counters (not both) and the device limit.
std::string InvalidSlice(const json::value& slice) {
  if (StringAt(slice, {"metadata", "name"}).empty()) return "metadata.name: Required value";
  if (StringAt(slice, {"spec", "driver"}).empty()) return "spec.driver: Required value";
  const json::object* spec =
      slice.as_object().contains("spec") ? slice.as_object().at("spec").if_object() : nullptr;
  if (spec == nullptr) return "spec: Required value";
  const json::object* pool = spec->contains("pool") ? spec->at("pool").if_object() : nullptr;
  if (pool == nullptr || !pool->contains("resourceSliceCount") ||
      !pool->at("resourceSliceCount").is_int64() || pool->at("resourceSliceCount").as_int64() < 1) {
    return "spec.pool.resourceSliceCount: must be greater than zero";
  }
  const json::array* devices = spec->contains("devices") ? spec->at("devices").if_array() : nullptr;
  const json::array* counters =
      spec->contains("sharedCounters") ? spec->at("sharedCounters").if_array() : nullptr;
  if (devices != nullptr && !devices->empty() && counters != nullptr && !counters->empty()) {
    return "spec: Invalid value: only one of devices and sharedCounters may be set";
  }
  if (devices != nullptr) {
    bool consumes = false;  // consumesCounters or taints: the lower limit
    for (const json::value& device : *devices) {
      if (device.is_object() && (device.as_object().contains("consumesCounters") ||
                                 device.as_object().contains("taints"))) {
        consumes = true;
      }
    }
    if (devices->size() > (consumes ? 64u : 128u)) return "spec.devices: Too many";
  }
  return {};
}

}  // namespace

Response FakeApiServer::Impl::HandleResourceSlice(
    const Request& request, const std::vector<std::string>& path,
    const std::map<std::string, std::string>& params) {
  const std::string method(request.method_string());
  std::lock_guard<std::mutex> lock(mutex_);
  auto not_found = [&](const std::string& name) {
    return StatusResponse(request, 404,
                          "resourceslices.resource.k8s.io \"" + name + "\" not found");
  };
  auto parse_body = [&](json::value& slice) -> std::optional<Response> {
    boost::system::error_code error;
    slice = json::parse(request.body(), error);
    if (error || !slice.is_object()) {
      return StatusResponse(request, 400, "invalid ResourceSlice JSON");
    }
    if (shared_counters_mode_ == SharedCountersMode::kRefuse) {
      const json::object* spec =
          slice.as_object().contains("spec") ? slice.as_object().at("spec").if_object() : nullptr;
      if (spec != nullptr && spec->contains("sharedCounters")) {
        return StatusResponse(request, 400,
                              "ResourceSlice in version \"v1\" cannot be handled as a "
                              "ResourceSlice: strict decoding error: unknown field "
                              "\"spec.sharedCounters\"");
      }
    }
    if (shared_counters_mode_ == SharedCountersMode::kDrop) DropPartitionableFields(slice);
    if (device_taints_mode_ == DeviceTaintsMode::kDrop) DropDeviceTaints(slice);
    if (std::string why = InvalidSlice(slice); !why.empty()) {
      return StatusResponse(request, 422, "ResourceSlice.resource.k8s.io is invalid: " + why);
    }
    return std::nullopt;
  };
  if (path.size() == 4 && method == "GET") {
    std::vector<Requirement> selector;
    if (auto it = params.find("fieldSelector"); it != params.end()) {
      auto parsed = ParseFieldSelector(it->second);
      if (!parsed) return StatusResponse(request, 400, "field label not supported");
      selector = std::move(*parsed);
    }
    size_t limit = 0;
    if (auto it = params.find("limit"); it != params.end()) {
      limit = std::strtoul(it->second.c_str(), nullptr, 10);
    }
    size_t offset = 0;
    if (auto it = params.find("continue"); it != params.end() && !it->second.empty()) {
      offset = std::strtoul(it->second.c_str(), nullptr, 10);
    }
    json::array items;
    size_t index = 0;
    bool more = false;
    for (const auto& [name, slice] : resource_slices_) {
      if (!Matches(selector, FieldsOf(slice))) continue;
      if (index++ < offset) continue;
      if (limit > 0 && items.size() == limit) {
        more = true;
        break;
      }
      items.push_back(slice);
    }
    json::object metadata;
    metadata["resourceVersion"] = std::to_string(resource_version_);
    if (more) metadata["continue"] = std::to_string(offset + limit);
    json::object list;
    list["kind"] = "ResourceSliceList";
    list["apiVersion"] = "resource.k8s.io/v1";
    list["metadata"] = std::move(metadata);
    list["items"] = std::move(items);
    return MakeResponse(request, 200, json::serialize(list));
  }
  if (path.size() == 4 && method == "POST") {
    json::value slice;
    if (auto refused = parse_body(slice)) return std::move(*refused);
    const std::string name = StringAt(slice, {"metadata", "name"});
    if (resource_slices_.count(name) != 0) {
      return StatusResponse(request, 409,
                            "resourceslices.resource.k8s.io \"" + name + "\" already exists");
    }
    if (auto dry = params.find("dryRun"); dry != params.end() && dry->second == "All") {
      return MakeResponse(request, 201, json::serialize(slice));
    }
    json::object& metadata = slice.as_object()["metadata"].as_object();
    metadata["resourceVersion"] = std::to_string(++resource_version_);
    metadata["uid"] = "slice-uid-" + std::to_string(resource_version_);
    resource_slices_[name] = slice;
    return MakeResponse(request, 201, json::serialize(slice));
  }
  if (path.size() != 5) return StatusResponse(request, 405, "method not allowed");
  const std::string& name = path[4];
  auto it = resource_slices_.find(name);
  if (method == "GET") {
    if (it == resource_slices_.end()) return not_found(name);
    return MakeResponse(request, 200, json::serialize(it->second));
  }
  if (method == "DELETE") {
    if (it == resource_slices_.end()) return not_found(name);
    json::value gone = std::move(it->second);
    resource_slices_.erase(it);
    ++resource_version_;
    return MakeResponse(request, 200, json::serialize(gone));
  }
  if (method == "PUT") {
    json::value slice;
    if (auto refused = parse_body(slice)) return std::move(*refused);
    if (it == resource_slices_.end()) return not_found(name);
    const std::string want = StringAt(slice, {"metadata", "resourceVersion"});
    if (want.empty()) {
      return StatusResponse(request, 422,
                            "metadata.resourceVersion: Invalid value: 0: must be specified for "
                            "an update");
    }
    if (want != StringAt(it->second, {"metadata", "resourceVersion"})) {
      return StatusResponse(request, 409,
                            "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"" +
                                name +
                                "\": the object has been modified; please apply your changes to "
                                "the latest version and try again");
    }
    json::object& metadata = slice.as_object()["metadata"].as_object();
    metadata["name"] = name;
    metadata["uid"] = StringAt(it->second, {"metadata", "uid"});
    metadata["resourceVersion"] = std::to_string(++resource_version_);
    it->second = slice;
    return MakeResponse(request, 200, json::serialize(slice));
  }
  return StatusResponse(request, 405, "method not allowed");
}

// ---- FakeApiServer ----

FakeApiServer::FakeApiServer() : FakeApiServer(Options()) {}

FakeApiServer::FakeApiServer(Options options) : impl_(std::make_shared<Impl>(std::move(options))) {}

FakeApiServer::~FakeApiServer() { impl_->Stop(); }

int FakeApiServer::port() const { return impl_->port_; }

std::string FakeApiServer::url() const { return "https://127.0.0.1:" + std::to_string(port()); }

const std::string& FakeApiServer::ca_pem() const { return impl_->pki_.ca_cert_pem; }
const std::string& FakeApiServer::client_cert_pem() const { return impl_->pki_.client_cert_pem; }
const std::string& FakeApiServer::client_key_pem() const { return impl_->pki_.client_key_pem; }

void FakeApiServer::set_token(std::string token) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->options_.token = std::move(token);
}

namespace {

json::value ParseObjectOrDie(std::string_view text) {
  boost::system::error_code error;
  json::value value = json::parse(text, error);
  if (error || !value.is_object()) {
    std::fprintf(stderr, "FakeApiServer: not a JSON object: %.*s\n",
                 static_cast<int>(std::min<size_t>(text.size(), 200)), text.data());
    std::abort();
  }
  return value;
}

void SetResourceVersion(json::value& object, int64_t resource_version) {
  json::object& root = object.as_object();
  if (!root["metadata"].is_object()) root["metadata"] = json::object();
  root["metadata"].as_object()["resourceVersion"] = std::to_string(resource_version);
}

}  // namespace

int64_t FakeApiServer::UpsertPod(std::string_view text) {
  json::value pod = ParseObjectOrDie(text);
  const Fields fields = FieldsOf(pod);
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  SetResourceVersion(pod, ++impl_->resource_version_);
  auto [it, added] = impl_->pods_.insert_or_assign(fields.ns + "/" + fields.name, std::move(pod));
  return impl_->Store(Kind::kPod, added ? "ADDED" : "MODIFIED", it->second);
}

int64_t FakeApiServer::UpsertNode(std::string_view text) {
  json::value node = ParseObjectOrDie(text);
  const Fields fields = FieldsOf(node);
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  SetResourceVersion(node, ++impl_->resource_version_);
  auto [it, added] = impl_->nodes_.insert_or_assign(fields.name, std::move(node));
  return impl_->Store(Kind::kNode, added ? "ADDED" : "MODIFIED", it->second);
}

int64_t FakeApiServer::DeletePod(std::string_view ns, std::string_view name) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->pods_.find(std::string(ns) + "/" + std::string(name));
  if (it == impl_->pods_.end()) return impl_->resource_version_;
  json::value pod = std::move(it->second);
  impl_->pods_.erase(it);
  SetResourceVersion(pod, ++impl_->resource_version_);
  return impl_->Store(Kind::kPod, "DELETED", pod);
}

std::optional<std::string> FakeApiServer::GetLeaseJson(std::string_view ns,
                                                       std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->leases_.find(std::string(ns) + "/" + std::string(name));
  if (it == impl_->leases_.end()) return std::nullopt;
  return json::serialize(it->second);
}

int64_t FakeApiServer::PutLease(std::string_view text) {
  json::value lease = ParseObjectOrDie(text);
  const Fields fields = FieldsOf(lease);
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  SetResourceVersion(lease, ++impl_->resource_version_);
  impl_->leases_[fields.ns + "/" + fields.name] = std::move(lease);
  return impl_->resource_version_;
}

void FakeApiServer::ServeJson(std::string path, std::string body, int status) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->served_json_[std::move(path)] = {status, std::move(body)};
}

void FakeApiServer::Unserve(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->served_json_.erase(path);
}

bool FakeApiServer::DeleteLease(std::string_view ns, std::string_view name) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  ++impl_->resource_version_;
  return impl_->leases_.erase(std::string(ns) + "/" + std::string(name)) != 0;
}

std::optional<std::string> FakeApiServer::GetResourceSliceJson(std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->resource_slices_.find(std::string(name));
  if (it == impl_->resource_slices_.end()) return std::nullopt;
  return json::serialize(it->second);
}

std::vector<std::string> FakeApiServer::ResourceSliceNames() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  std::vector<std::string> names;
  for (const auto& [name, slice] : impl_->resource_slices_) names.push_back(name);
  return names;
}

int64_t FakeApiServer::PutResourceSlice(std::string_view text) {
  json::value slice = ParseObjectOrDie(text);
  const std::string name = StringAt(slice, {"metadata", "name"});
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  SetResourceVersion(slice, ++impl_->resource_version_);
  impl_->resource_slices_[name] = std::move(slice);
  return impl_->resource_version_;
}

void FakeApiServer::set_device_taints_mode(DeviceTaintsMode mode) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->device_taints_mode_ = mode;
}

void FakeApiServer::set_shared_counters_mode(SharedCountersMode mode) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->shared_counters_mode_ = mode;
}

int64_t FakeApiServer::DeleteNode(std::string_view name) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->nodes_.find(std::string(name));
  if (it == impl_->nodes_.end()) return impl_->resource_version_;
  json::value node = std::move(it->second);
  impl_->nodes_.erase(it);
  SetResourceVersion(node, ++impl_->resource_version_);
  return impl_->Store(Kind::kNode, "DELETED", node);
}

std::optional<std::string> FakeApiServer::GetPodJson(std::string_view ns,
                                                     std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->pods_.find(std::string(ns) + "/" + std::string(name));
  if (it == impl_->pods_.end()) return std::nullopt;
  return json::serialize(it->second);
}

std::optional<std::string> FakeApiServer::GetNodeJson(std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  auto it = impl_->nodes_.find(std::string(name));
  if (it == impl_->nodes_.end()) return std::nullopt;
  return json::serialize(it->second);
}

int64_t FakeApiServer::resource_version() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->resource_version_;
}

void FakeApiServer::SendBookmark(Kind kind) {
  int64_t resource_version;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex_);
    resource_version = impl_->resource_version_;
  }
  json::object object;
  object["kind"] = KindWord(kind);
  object["apiVersion"] = "v1";
  object["metadata"] = json::object{{"resourceVersion", std::to_string(resource_version)}};
  json::object event;
  event["type"] = "BOOKMARK";
  event["object"] = std::move(object);
  SendRawWatchLine(kind, json::serialize(event));
}

void FakeApiServer::SendRawWatchLine(Kind kind, std::string line) {
  impl_->ForEachWatcherOnIoThread(
      kind, [line = std::move(line)](Session& session) { session.Enqueue(line); });
}

void FakeApiServer::CompactHistory() {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->history_.clear();
  impl_->compacted_ = impl_->resource_version_;
}

void FakeApiServer::set_watch_list_mode(WatchListMode mode) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->watch_list_mode_ = mode;
}

void FakeApiServer::set_too_old_mode(TooOldMode mode) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->too_old_mode_ = mode;
}

void FakeApiServer::RejectNextWatchesAsTooOld(Kind kind, int count) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  (kind == Kind::kPod ? impl_->reject_pod_watches_ : impl_->reject_node_watches_) = count;
}

void FakeApiServer::AnswerNextPodListsWith(std::string body, int count) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->canned_pod_list_ = std::move(body);
  impl_->canned_pod_lists_ = count;
}

void FakeApiServer::EndWatches(Kind kind) {
  impl_->ForEachWatcherOnIoThread(kind, [](Session& session) { session.EndWatch(); });
}

void FakeApiServer::DropWatchConnections(Kind kind) {
  impl_->ForEachWatcherOnIoThread(kind, [](Session& session) { session.Close(); });
}

int FakeApiServer::open_watches(Kind kind) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return static_cast<int>(std::count_if(impl_->watchers_.begin(), impl_->watchers_.end(),
                                        [&](const Impl::Watcher& watcher) {
                                          return watcher.kind == kind && !watcher.session.expired();
                                        }));
}

int FakeApiServer::watches_started(Kind kind) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return kind == Kind::kPod ? impl_->pod_watches_started_ : impl_->node_watches_started_;
}

bool FakeApiServer::WaitForOpenWatches(Kind kind, int count,
                                       std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (open_watches(kind) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return open_watches(kind) >= count;
}

int FakeApiServer::connections_accepted() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->connections_;
}

void FakeApiServer::InjectFailure(FailureRule rule) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->failures_.push_back(std::move(rule));
}

int FakeApiServer::held() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return static_cast<int>(impl_->held_.size());
}

void FakeApiServer::ReleaseHeld() {
  std::vector<Impl::Held> held;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex_);
    held.swap(impl_->held_);
  }
  // Handled on the io thread; returns once each was applied (or expired) and its answer queued.
  std::promise<void> done;
  net::post(impl_->io_, [&held, &done] {
    for (auto& h : held) {
      if (h.deadline && std::chrono::steady_clock::now() > *h.deadline) {
        h.expire();  // past its deadline: the server gave it up, nothing applied
      } else {
        h.finish();
      }
    }
    done.set_value();
  });
  done.get_future().wait();
}

void FakeApiServer::ClearFailures() {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->failures_.clear();
}

std::vector<RecordedRequest> FakeApiServer::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->requests_;
}

std::vector<RecordedRequest> FakeApiServer::RequestsMatching(std::string_view method,
                                                             std::string_view path_prefix) const {
  std::vector<RecordedRequest> matching;
  for (RecordedRequest& request : requests()) {
    if (!method.empty() && request.method != method) continue;
    if (std::string_view(request.path).substr(0, path_prefix.size()) != path_prefix) continue;
    matching.push_back(std::move(request));
  }
  return matching;
}

std::string FakeApiServer::WriteKubeconfig(const std::string& path,
                                           const KubeconfigOptions& options) const {
  std::ostringstream yaml;
  yaml << "apiVersion: v1\nkind: Config\ncurrent-context: fake\n";
  yaml << "clusters:\n- name: fake-cluster\n  cluster:\n    server: " << url() << "\n";
  if (options.embed_ca) {
    yaml << "    certificate-authority-data: " << Base64(ca_pem()) << "\n";
  } else {
    yaml << "    certificate-authority: " << options.ca_file << "\n";
  }
  if (!options.tls_server_name.empty()) {
    yaml << "    tls-server-name: " << options.tls_server_name << "\n";
  }
  yaml << "contexts:\n- name: fake\n  context:\n    cluster: fake-cluster\n    user: fake-user\n"
          "    namespace: ml\n";
  yaml << "users:\n- name: fake-user\n  user:\n";
  if (options.exec_user) {
    yaml << "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
            "      command: aws\n      args: [eks, get-token, --cluster-name, demo]\n";
  }
  if (options.use_token) {
    if (options.use_token_file) {
      yaml << "    tokenFile: " << options.token_file << "\n";
    } else {
      std::string token = options.token;
      if (token.empty()) {
        std::lock_guard<std::mutex> lock(impl_->mutex_);
        token = impl_->options_.token;
      }
      yaml << "    token: " << token << "\n";
    }
  }
  if (options.client_certificate) {
    yaml << "    client-certificate-data: " << Base64(client_cert_pem()) << "\n";
    yaml << "    client-key-data: " << Base64(client_key_pem()) << "\n";
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << yaml.str();
  return path;
}

std::string ReadSourceFile(const std::string& relative_path) {
  const std::string path = SourcePath(relative_path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace toposched::testing
