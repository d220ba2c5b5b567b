#include "net/http_server.h"

#include <simdjson.h>

#include <array>
#include <atomic>
#include <future>
#include <limits>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/json_writer.h"
#include "base/mutex.h"
#include "net/connection_slots.h"
#include "net/open_file_limit.h"

namespace toposched::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own name

constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr auto kMaxAcceptBackoff = std::chrono::milliseconds(1000);
constexpr size_t kHeaderLimit = 64 * 1024;
// The body buffer's first size; it doubles as bytes arrive, up to the declared length.
constexpr size_t kFirstBodyChunk = 64 * 1024;
// At most this much is read before the TLS handshake (or the header) starts: the first bytes show
// the connection is not idle; they are handed to the handshake (or the header's parser).
constexpr size_t kFirstRead = 512;

tcp::socket& Socket(beast::tcp_stream& s) { return s.socket(); }
tcp::socket& Socket(beast::ssl_stream<beast::tcp_stream>& s) { return s.next_layer().socket(); }
beast::tcp_stream& Tcp(beast::tcp_stream& s) { return s; }
beast::tcp_stream& Tcp(beast::ssl_stream<beast::tcp_stream>& s) { return s.next_layer(); }

std::string JsonError(const std::string& message) { return WriteJson({{"Error", message}}); }

bool OutOfDescriptors(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors ||
         ec == boost::system::errc::too_many_files_open_in_system ||
         ec == boost::system::errc::too_many_files_open;
}

// Everything a session or a Responder may touch, shared: it lives until the server handle and the
// last Responder are gone, so a Responder called after Stop() touches valid memory.
struct Core {
  Core(const HttpServerOptions& o, HttpHandler h)
      : options(o),
        handler(std::move(h)),
        ssl(ssl::context::tls_server),
        slots(o.max_connections, o.max_waiting_connections),
        ioc(std::max(1, o.threads)),
        accept_strand(asio::make_strand(ioc)),
        acceptor(accept_strand),
        accept_timer(accept_strand) {}

  void Count(std::atomic<uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

  // A connection closed: if accepting is paused for want of descriptors, try again now.
  void ConnectionClosed() {
    connections.fetch_sub(1);
    if (stopped.load() || !paused.load()) return;
    asio::post(accept_strand, [this] {
      if (paused) accept_timer.cancel();
    });
  }

  const HttpServerOptions options;
  const HttpHandler handler;
  // Guards stopped against a Responder posting into a stopping io_context.
  Mutex post_mu;
  std::atomic<bool> stopped{false};
  std::atomic<bool> accepting{true};
  std::atomic<bool> paused{false};  // accepting paused after EMFILE/ENFILE
  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> bodies_in_flight{0};
  std::atomic<int64_t> requests_in_flight{0};
  std::atomic<int64_t> body_bytes{0};
  std::atomic<uint64_t> uncertified_refused{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> connections_evicted{0};
  std::atomic<uint64_t> bodies_refused{0};
  std::atomic<uint64_t> bodies_too_large{0};
  std::atomic<uint64_t> read_timeouts{0};
  std::atomic<uint64_t> accept_fd_exhausted{0};
  std::atomic<uint64_t> accept_pauses{0};
  bool tls = false;
  ssl::context ssl;
  ConnectionSlots slots;
  // Declared after what sessions use, so destroyed before it: destroying the io_context destroys
  // the handlers it still holds, and with them sessions.
  asio::io_context ioc;
  asio::strand<asio::io_context::executor_type> accept_strand;
  tcp::acceptor acceptor;
  asio::steady_timer accept_timer;
  // Keeps the threads running while nothing is pending but answers to come (after
  // StopAccepting, a session waiting for its handler has no operation in the io_context).
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
};

// A connection closed, failed or timed out before its first request.
void EndedBeforeRequest(Core& core, const beast::error_code& e, const char* when) {
  if (e == beast::error::timeout) core.Count(core.read_timeouts);
  spdlog::debug("connection ended {}: {}", when, e.message());
}

// Counts one thing in flight for as long as it lives.
class InFlight {
 public:
  explicit InFlight(std::atomic<int64_t>& count) : count_(count) { count_.fetch_add(1); }
  ~InFlight() { count_.fetch_sub(1); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // On the session's executor: writes the answer, then reads the next request or closes.
  virtual void Answer(HttpResponse response, std::shared_ptr<InFlight> request) = 0;
  virtual asio::any_io_executor executor() = 0;
  // On the session's executor: its slot was given to a newer connection; close.
  virtual void Evict() = 0;
};

// A connection in the waiting room: accepted, nothing read yet. Only its socket, a timer and
// room for its first bytes: a thousand idle connections cost their descriptors, not a TLS
// session each (net/connection_slots.h).
struct Waiting {
  Waiting(Core& c, tcp::socket socket)
      : core(c),
        stream(std::move(socket)),
        deadline(std::chrono::steady_clock::now() + c.options.handshake_timeout) {
    core.connections.fetch_add(1);
  }
  ~Waiting() {
    if (slot != 0) core.slots.Release(slot);
    core.ConnectionClosed();
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

  Core& core;
  beast::tcp_stream stream;
  // From accept to the end of the TLS handshake, the first byte included.
  const std::chrono::steady_clock::time_point deadline;
  ConnectionSlots::Id slot = 0;  // 0 once handed to the session
  std::array<char, kFirstRead> first{};
};

// One request's way back, shared by the copies of its Responder. The session is released before
// the core (members are destroyed in reverse order).
struct Pending {
  std::shared_ptr<Core> core;
  std::shared_ptr<SessionBase> session;
  std::shared_ptr<InFlight> request;
  std::atomic<bool> answered{false};

  void Answer(HttpResponse response) {
    if (answered.exchange(true)) return;  // once
    MutexLock lock(core->post_mu);
    if (core->stopped) return;  // the answer is dropped; `request` ends with this Pending
    asio::post(session->executor(), [session = session, request = std::move(request),
                                     response = std::move(response)]() mutable {
      session->Answer(std::move(response), std::move(request));
    });
  }
};

template <typename Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, Core& core) : stream_(std::move(stream)), core_(core) {
    core_.connections.fetch_add(1);
  }
  ~Session() override {
    core_.body_bytes.fetch_sub(static_cast<int64_t>(body_charged_));
    if (slot_ != 0) core_.slots.Release(slot_);
    core_.ConnectionClosed();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // For the Responder: the core's owner, so that the core outlives a late answer. `slot` is the
  // connection's slot in core_.slots, in phase kHandshaking; `first` the bytes it sent first, read
  // in the waiting room; `deadline` the end of its handshake (accept + handshake_timeout).
  void Run(std::weak_ptr<Core> owner, ConnectionSlots::Id slot, std::string_view first,
           std::chrono::steady_clock::time_point deadline) {
    owner_ = std::move(owner);
    slot_ = slot;
    beast::error_code ec;
    Socket(stream_).set_option(tcp::no_delay(true), ec);
    Tcp(stream_).expires_at(deadline);
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      std::copy(first.begin(), first.end(), first_bytes_.begin());
      stream_.async_handshake(
          ssl::stream_base::server, asio::buffer(first_bytes_.data(), first.size()),
          // The default argument: Boost's check of this overload asks for a handler of
          // (error_code) alone, though it calls it with (error_code, bytes used).
          [self = this->shared_from_this()](beast::error_code e, size_t /*used*/ = 0) {
            if (e) {
              EndedBeforeRequest(self->core_, e, "in its TLS handshake");
              return;
            }
            self->peer_certified_ = self->PeerCertified();
            self->anonymous_ =
                !self->core_.options.tls_client_ca_file.empty() && !self->peer_certified_;
            if (self->anonymous_) {
              self->core_.slots.Enter(self->slot_, ConnectionSlots::Phase::kAnonymous);
            } else {
              self->Hold();
            }
            self->ReadHeader();
          });
    } else {
      // Plain HTTP authenticates no one: a connection holds its slot from its first header.
      auto into = buffer_.prepare(first.size());
      std::copy(first.begin(), first.end(), static_cast<char*>(into.data()));
      buffer_.commit(first.size());
      ReadHeader();
    }
  }

  void Evict() override {
    spdlog::debug("closing a connection that had not authenticated: its slot went to a newer one");
    Tcp(stream_).close();
  }

  asio::any_io_executor executor() override { return Tcp(stream_).get_executor(); }

  // After the handshake: the client presented a certificate and it verified (with verify_peer an
  // unverified one already failed the handshake).
  bool PeerCertified() {
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      SSL* ssl = stream_.native_handle();
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
      X509* cert = SSL_get1_peer_certificate(ssl);
#else
      X509* cert = SSL_get_peer_certificate(ssl);
#endif
      if (cert == nullptr) return false;
      X509_free(cert);
      return SSL_get_verify_result(ssl) == X509_V_OK;
    } else {
      return false;
    }
  }

  void Answer(HttpResponse response, std::shared_ptr<InFlight> request) override {
    Reply(std::move(response), keep_alive_, std::move(request));
  }

 private:
  // The slot is the connection's until it closes.
  void Hold() {
    held_ = true;
    core_.slots.Enter(slot_, ConnectionSlots::Phase::kHeld);
  }

  // An anonymous caller's answer is written: until its next request its slot may be taken back.
  void Unhold() {
    held_ = false;
    core_.slots.Enter(slot_, ConnectionSlots::Phase::kAnonymous);
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // The body is read by hand below, which enforces the limit with a 413.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    // A connection without a client certificate gets a short wait for each request.
    Tcp(stream_).expires_after(anonymous_ ? core_.options.handshake_timeout
                                          : core_.options.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      if (ec == beast::error::timeout) {
        core_.Count(core_.read_timeouts);
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
        // A malformed request line or header: answer and close.
        Reply({400, "text/plain", fmt::format("bad request: {}\n", ec.message())}, false, nullptr);
      }
      return;
    }
    // From here the request is answered: its slot is not taken back.
    if (!held_) Hold();
    const auto& header = parser_->get();
    // Anonymous callers (probes, scrapers) are kept alive too: between requests their slot may
    // be taken back (kAnonymous), and a new TLS handshake per probe costs more than a kept one.
    keep_alive_ = header.keep_alive();
    request_.method = std::string(header.method_string());
    request_.target = std::string(header.target());
    request_.authorization = std::string(header[http::field::authorization]);
    request_.body.clear();
    if (!Certified()) {
      // Before any body is read: an unauthenticated client gets nothing buffered.
      core_.Count(core_.uncertified_refused);
      spdlog::debug("{} {}: refused, no client certificate", request_.method, request_.target);
      Reply({403, "application/json",
             JsonError("a client certificate signed by the extender's client CA "
                       "(--tls-client-ca-file) is required")},
            false, nullptr);
      return;
    }
    const auto length = parser_->content_length();
    if (!length || *length == 0) {
      if (!length && parser_->chunked()) {
        Reply({411, "text/plain", "send the body with Content-Length\n"}, false, nullptr);
        return;
      }
      request_.body.reserve(simdjson::SIMDJSON_PADDING);
      Dispatch();
      return;
    }
    if (*length > core_.options.body_limit) {
      core_.Count(core_.bodies_too_large);
      Reply({413, "application/json",
             JsonError(fmt::format("request body of {} bytes is over the limit of {} bytes "
                                   "(--body-limit)",
                                   *length, core_.options.body_limit))},
            false, nullptr);
      return;
    }
    // A slot for this body, from now until the handler has taken it.
    body_slot_ = std::make_unique<InFlight>(core_.bodies_in_flight);
    if (core_.bodies_in_flight.load() > core_.options.max_bodies_in_flight) {
      RefuseBusy(
          fmt::format("{} request bodies are being received or handled "
                      "(--max-bodies-in-flight)",
                      core_.options.max_bodies_in_flight));
      return;
    }
    length_ = static_cast<size_t>(*length);
    // What already came with the header; the buffer then grows only as bytes arrive.
    have_ = std::min<size_t>(buffer_.size(), length_);
    if (!Grow(std::max(have_, std::min(length_, kFirstBodyChunk)))) {
      RefuseBusy(MemoryLimitReason());
      return;
    }
    asio::buffer_copy(asio::buffer(request_.body.data(), have_), buffer_.data());
    buffer_.consume(have_);
    // One deadline for the whole body: a client trickling it is cut when it passes.
    Tcp(stream_).expires_after(core_.options.body_timeout);
    if (header[http::field::expect] == "100-continue" && have_ < length_) {
      // curl sends Expect for large bodies and would wait a second without this.
      continue_ = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(stream_, asio::buffer(*continue_),
                        [self = this->shared_from_this()](beast::error_code e, size_t) {
                          if (!e) self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  // Resizes the body to `size` bytes, with simdjson's padding past it, within the server's
  // body_memory_limit; false (nothing changed) when the bodies held would pass it.
  bool Grow(size_t size) {
    const auto more = static_cast<int64_t>(size) - static_cast<int64_t>(body_charged_);
    if (more > 0 && core_.body_bytes.fetch_add(more) + more >
                        static_cast<int64_t>(core_.options.body_memory_limit)) {
      core_.body_bytes.fetch_sub(more);
      return false;
    }
    body_charged_ = size;
    request_.body.reserve(size + simdjson::SIMDJSON_PADDING);
    request_.body.resize(size);
    return true;
  }

  // The body's buffer is no longer ours (handed to the handler, or dropped).
  void ReleaseBody() {
    core_.body_bytes.fetch_sub(static_cast<int64_t>(body_charged_));
    body_charged_ = 0;
    body_slot_.reset();
  }

  void RefuseBusy(const std::string& why) {
    ReleaseBody();
    request_.body = std::string();
    core_.Count(core_.bodies_refused);
    Reply({503, "application/json", JsonError(fmt::format("busy: {}; retry", why))}, false,
          nullptr);
  }

  void ReadBody() {
    if (have_ == length_) {
      Dispatch();
      return;
    }
    if (have_ == request_.body.size() && !Grow(std::min(length_, request_.body.size() * 2))) {
      RefuseBusy(MemoryLimitReason());
      return;
    }
    stream_.async_read_some(
        asio::buffer(request_.body.data() + have_, request_.body.size() - have_),
        [self = this->shared_from_this()](beast::error_code ec, size_t n) {
          if (ec) {
            // The client went away mid-body, or was too slow.
            if (ec == beast::error::timeout) self->core_.Count(self->core_.read_timeouts);
            self->ReleaseBody();
            return;
          }
          self->have_ += n;
          self->ReadBody();
        });
  }

  std::string MemoryLimitReason() const {
    return fmt::format(
        "request bodies being received hold {} MiB of the {} MiB allowed "
        "(--body-memory-limit)",
        core_.body_bytes.load() >> 20, core_.options.body_memory_limit >> 20);
  }

  // With a client CA: whether this request may go on without a client certificate.
  bool Certified() {
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      if (core_.options.tls_client_ca_file.empty()) return true;
      if (peer_certified_) return true;
      if (request_.method == "GET") {
        const std::string_view path =
            std::string_view(request_.target).substr(0, request_.target.find('?'));
        for (const std::string& p : core_.options.anonymous_paths) {
          if (path == p) return true;
        }
      }
      return false;
    } else {
      return true;
    }
  }

  void Dispatch() {
    auto owner = owner_.lock();
    if (!owner) return;  // the server is going away

    auto pending = std::make_shared<Pending>();
    pending->core = std::move(owner);
    pending->session = this->shared_from_this();
    pending->request = std::make_shared<InFlight>(core_.requests_in_flight);
    Responder respond = [pending](HttpResponse response) { pending->Answer(std::move(response)); };
    core_.handler(std::move(request_), std::move(respond));
    request_ = HttpRequest{};
    length_ = 0;
    ReleaseBody();
  }

  void Reply(HttpResponse response, bool keep_alive, std::shared_ptr<InFlight> request) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), 11);
    res->set(http::field::server, "toposched");
    res->set(http::field::content_type, response.content_type);
    res->keep_alive(keep_alive);
    res->body() = std::move(response.body);
    res->prepare_payload();
    Tcp(stream_).expires_after(kWriteTimeout);
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res, keep_alive,
                       request = std::move(request)](beast::error_code ec, size_t) {
                        if (ec) return;
                        if (keep_alive) {
                          if (self->anonymous_) self->Unhold();
                          self->ReadHeader();
                        } else {
                          self->Close();
                        }
                      });
  }

  void Close() {
    beast::error_code ec;
    Socket(stream_).shutdown(tcp::socket::shutdown_send, ec);
  }

  Stream stream_;
  Core& core_;
  std::weak_ptr<Core> owner_;
  beast::flat_buffer buffer_{kHeaderLimit};
  std::optional<http::request_parser<http::empty_body>> parser_;
  HttpRequest request_;
  size_t length_ = 0;  // the declared body length
  size_t have_ = 0;    // body bytes received
  std::unique_ptr<InFlight> body_slot_;
  size_t body_charged_ = 0;  // bytes of core_.body_bytes this body holds
  bool peer_certified_ = false;
  bool anonymous_ = false;  // TLS with a client CA, and no client certificate
  bool held_ = false;       // the slot is in phase kHeld
  ConnectionSlots::Id slot_ = 0;
  std::array<char, kFirstRead> first_bytes_{};  // the start of the TLS handshake
  bool keep_alive_ = true;
  std::shared_ptr<std::string> continue_;
};

class BeastServer final : public HttpServer {
 public:
  BeastServer(const HttpServerOptions& options, HttpHandler handler)
      : core_(std::make_shared<Core>(FitOpenFileLimit(options), std::move(handler))) {}

  ~BeastServer() override { Stop(); }
  BeastServer(const BeastServer&) = delete;
  BeastServer& operator=(const BeastServer&) = delete;

  Status Listen() {
    const HttpServerOptions& o = core_->options;
    beast::error_code ec;
    const auto address = asio::ip::make_address(o.address, ec);
    if (ec) return Error{fmt::format("--listen: '{}' is not an IP address", o.address)};
    const tcp::endpoint endpoint(address, o.port);
    tcp::acceptor& acceptor = core_->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Error{fmt::format("cannot listen on {}:{}: {}", o.address, o.port, ec.message())};
    port_ = acceptor.local_endpoint().port();
    core_->tls = !o.tls_cert_file.empty() || !o.tls_key_file.empty();
    if (!o.tls_client_ca_file.empty() && !core_->tls) {
      return Error{"--tls-client-ca-file needs TLS: set --tls-cert-file and --tls-key-file too"};
    }
    if (core_->tls) {
      if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
        return Error{"TLS needs both --tls-cert-file and --tls-key-file"};
      }
      ssl::context& ssl = core_->ssl;
      ssl.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      ssl.use_certificate_chain_file(o.tls_cert_file, ec);
      if (ec) return Error{fmt::format("TLS certificate {}: {}", o.tls_cert_file, ec.message())};
      ssl.use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
      if (ec) return Error{fmt::format("TLS key {}: {}", o.tls_key_file, ec.message())};
      if (!o.tls_client_ca_file.empty()) {
        ssl.load_verify_file(o.tls_client_ca_file, ec);
        if (ec) return Error{fmt::format("client CA {}: {}", o.tls_client_ca_file, ec.message())};
        // Asked for, not demanded at the handshake: probes and /metrics come without one, and
        // every other request without one is answered 403 (Session::Certified).
        ssl.set_verify_mode(ssl::verify_peer);
        // Without a session id context OpenSSL fails every resumed handshake once peers are
        // verified; clients that resume (curl) reconnect after each anonymous answer.
        static constexpr unsigned char kSessionContext[] = "toposched";
        SSL_CTX_set_session_id_context(ssl.native_handle(), kSessionContext,
                                       sizeof kSessionContext - 1);
      }
    }
    asio::post(core_->accept_strand, [core = core_.get(), weak = std::weak_ptr<Core>(core_)] {
      Accept(*core, weak, core->options.accept_backoff);
    });
    for (int i = 0; i < std::max(1, o.threads); ++i) {
      threads_.emplace_back([core = core_.get()] { core->ioc.run(); });
    }
    return OkStatus();
  }

  uint16_t port() const override { return port_; }

  HttpServerStats stats() const override {
    const Core& c = *core_;
    HttpServerStats s;
    s.connections_refused = c.connections_refused.load();
    s.connections_evicted = c.connections_evicted.load();
    s.bodies_refused = c.bodies_refused.load();
    s.bodies_too_large = c.bodies_too_large.load();
    s.read_timeouts = c.read_timeouts.load();
    s.accept_fd_exhausted = c.accept_fd_exhausted.load();
    s.accept_pauses = c.accept_pauses.load();
    s.connections = c.connections.load();
    s.bodies_in_flight = c.bodies_in_flight.load();
    s.body_bytes = c.body_bytes.load();
    s.uncertified_refused = c.uncertified_refused.load();
    s.requests_in_flight = c.requests_in_flight.load();
    return s;
  }

  void StopAccepting() override {
    if (!core_->accepting.exchange(false) || threads_.empty()) return;
    std::promise<void> closed;
    asio::post(core_->accept_strand, [core = core_.get(), &closed] {
      beast::error_code ec;
      core->acceptor.close(ec);
      core->accept_timer.cancel();
      closed.set_value();
    });
    closed.get_future().wait();
  }

  bool Drain(std::chrono::steady_clock::time_point deadline) override {
    // Polled: drains happen once, at shutdown, and a condition variable would need every
    // decrement to take a lock.
    while (core_->requests_in_flight.load() > 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  void Stop() override {
    if (core_->stopped.load()) return;
    StopAccepting();
    {
      MutexLock lock(core_->post_mu);
      core_->stopped = true;
    }
    core_->work.reset();
    core_->ioc.stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  // On the accept strand. `backoff` is the pause after the next EMFILE/ENFILE.
  static void Accept(Core& core, const std::weak_ptr<Core>& weak,
                     std::chrono::milliseconds backoff) {
    if (!core.accepting) return;
    core.acceptor.async_accept(
        asio::make_strand(core.ioc), [&core, weak, backoff](beast::error_code ec, tcp::socket s) {
          if (ec == asio::error::operation_aborted || !core.accepting) return;
          if (ec) {
            // Out of descriptors (or another failure of accept itself): retrying at once would spin
            // on the same error. Pause, until the backoff passes or a connection closes.
            const bool fds = OutOfDescriptors(ec);
            if (fds) core.Count(core.accept_fd_exhausted);
            core.Count(core.accept_pauses);
            if (!core.paused.exchange(true)) {
              spdlog::warn(
                  "accept: {} ({} connections open); pausing accepting for up to {} ms, "
                  "logged once until accepting succeeds again",
                  ec.message(), core.connections.load(), backoff.count());
            }
            core.accept_timer.expires_after(backoff);
            core.accept_timer.async_wait([&core, weak, backoff](beast::error_code) {
              Accept(core, weak, std::min(backoff * 2, kMaxAcceptBackoff));
            });
            return;
          }
          if (core.paused.exchange(false)) {
            spdlog::info("accepting connections again after {} failed accepts in all",
                         core.accept_pauses.load());
          }
          if (core.tls) {
            Admit<beast::ssl_stream<beast::tcp_stream>>(core, weak, std::move(s));
          } else {
            Admit<beast::tcp_stream>(core, weak, std::move(s));
          }
          Accept(core, weak, core.options.accept_backoff);
        });
  }

  // On the accept strand: a place in the waiting room for the new connection (the oldest waiting
  // one is closed when the room is full). Its first bytes move it into a slot and a session.
  template <typename Stream>
  static void Admit(Core& core, const std::weak_ptr<Core>& weak, tcp::socket socket) {
    auto waiting = std::make_shared<Waiting>(core, std::move(socket));
    ConnectionSlots::Close evicted;
    waiting->slot = core.slots.Wait(
        [w = std::weak_ptr<Waiting>(waiting)] {
          if (auto s = w.lock()) asio::post(s->stream.get_executor(), [s] { s->stream.close(); });
        },
        &evicted);
    if (evicted) {
      core.Count(core.connections_evicted);
      evicted();
    }
    waiting->stream.expires_at(waiting->deadline);
    waiting->stream.async_read_some(
        asio::buffer(waiting->first),
        [waiting, weak](beast::error_code e, size_t n) { Spoke<Stream>(weak, waiting, e, n); });
  }

  // The waiting connection sent its first bytes (or ended): a slot and a session, or closed.
  template <typename Stream>
  static void Spoke(const std::weak_ptr<Core>& weak, const std::shared_ptr<Waiting>& waiting,
                    beast::error_code e, size_t n) {
    Core& core = waiting->core;
    if (e) {
      EndedBeforeRequest(core, e, "before its first byte");
      return;
    }
    std::shared_ptr<Session<Stream>> session;
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      session =
          std::make_shared<Session<Stream>>(Stream(std::move(waiting->stream), core.ssl), core);
    } else {
      session = std::make_shared<Session<Stream>>(std::move(waiting->stream), core);
    }
    ConnectionSlots::Close evicted;
    const ConnectionSlots::Id slot = std::exchange(waiting->slot, 0);
    const ConnectionSlots::Spoke spoke = core.slots.Speak(
        slot,
        [w = std::weak_ptr<SessionBase>(session)] {
          if (auto s = w.lock()) asio::post(s->executor(), [s] { s->Evict(); });
        },
        &evicted);
    if (evicted) {
      core.Count(core.connections_evicted);
      evicted();
    }
    if (spoke == ConnectionSlots::Spoke::kGone) {
      spdlog::debug("a connection spoke after its place in the waiting room went to a newer one");
      return;  // counted as evicted already; the session closes the socket as it goes
    }
    if (spoke == ConnectionSlots::Spoke::kRefused) {
      core.Count(core.connections_refused);
      spdlog::debug(
          "refusing a connection: all {} slots are held by authenticated clients or requests "
          "being answered (--max-connections)",
          core.options.max_connections);
      return;  // the session closes the socket as it goes
    }
    session->Run(weak, slot, std::string_view(waiting->first.data(), n), waiting->deadline);
  }

  std::shared_ptr<Core> core_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<BeastServer>(options, std::move(handler));
  TOPOSCHED_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace toposched::net
