#include "net/http_server.h"

#include <simdjson.h>

#include <atomic>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace toposched::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own name

constexpr auto kReadTimeout = std::chrono::seconds(60);
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr size_t kHeaderLimit = 64 * 1024;

tcp::socket& Socket(beast::tcp_stream& s) { return s.socket(); }
tcp::socket& Socket(beast::ssl_stream<beast::tcp_stream>& s) { return s.next_layer().socket(); }
beast::tcp_stream& Tcp(beast::tcp_stream& s) { return s; }
beast::tcp_stream& Tcp(beast::ssl_stream<beast::tcp_stream>& s) { return s.next_layer(); }

template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, const HttpServerOptions& options, const HttpHandler& handler)
      : stream_(std::move(stream)), options_(options), handler_(handler) {}

  void Run() {
    beast::error_code ec;
    Socket(stream_).set_option(tcp::no_delay(true), ec);
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      Tcp(stream_).expires_after(kReadTimeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code e) {
                                if (e) {
                                  spdlog::debug("TLS handshake failed: {}", e.message());
                                  return;
                                }
                                self->ReadHeader();
                              });
    } else {
      ReadHeader();
    }
  }

 private:
  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // The body is read by hand below, which enforces the limit with a 413.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Tcp(stream_).expires_after(kReadTimeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != beast::error::timeout && ec != asio::error::operation_aborted) {
        // A malformed request line or header: answer and close.
        Reply({400, "text/plain", fmt::format("bad request: {}\n", ec.message())}, false);
      }
      return;
    }
    const auto& header = parser_->get();
    keep_alive_ = header.keep_alive();
    request_.method = std::string(header.method_string());
    request_.target = std::string(header.target());
    request_.authorization = std::string(header[http::field::authorization]);
    const auto length = parser_->content_length();
    if (!length) {
      if (parser_->chunked()) {
        Reply({411, "text/plain", "send the body with Content-Length\n"}, false);
        return;
      }
      request_.body.clear();
      Dispatch();
      return;
    }
    if (*length > options_.body_limit) {
      Reply({413, "application/json",
             fmt::format("{{\"Error\":\"request body of {} bytes is over the limit of {} bytes "
                         "(--body-limit)\"}}",
                         *length, options_.body_limit)},
            false);
      return;
    }
    // Room for simdjson's padding past the body, so it is parsed in place.
    request_.body.reserve(*length + simdjson::SIMDJSON_PADDING);
    request_.body.resize(*length);
    const size_t buffered = std::min<size_t>(buffer_.size(), *length);
    asio::buffer_copy(asio::buffer(request_.body.data(), buffered), buffer_.data());
    buffer_.consume(buffered);
    if (header[http::field::expect] == "100-continue" && buffered < *length) {
      // curl sends Expect for large bodies and would wait a second without this.
      continue_ = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(stream_, asio::buffer(*continue_),
                        [self = this->shared_from_this(), buffered](beast::error_code e, size_t) {
                          if (!e) self->ReadBody(buffered);
                        });
      return;
    }
    ReadBody(buffered);
  }

  void ReadBody(size_t have) {
    if (have == request_.body.size()) {
      Dispatch();
      return;
    }
    Tcp(stream_).expires_after(kReadTimeout);
    asio::async_read(stream_,
                     asio::buffer(request_.body.data() + have, request_.body.size() - have),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return;  // client went away mid-body
                       self->Dispatch();
                     });
  }

  void Dispatch() {
    auto self = this->shared_from_this();
    auto executor = Tcp(stream_).get_executor();
    Responder respond = [self, executor](HttpResponse response) {
      asio::post(executor, [self, response = std::move(response)]() mutable {
        self->Reply(std::move(response), self->keep_alive_);
      });
    };
    handler_(std::move(request_), std::move(respond));
    request_ = HttpRequest{};
  }

  void Reply(HttpResponse response, bool keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), 11);
    res->set(http::field::server, "toposched");
    res->set(http::field::content_type, response.content_type);
    res->keep_alive(keep_alive);
    res->body() = std::move(response.body);
    res->prepare_payload();
    Tcp(stream_).expires_after(kWriteTimeout);
    http::async_write(
        stream_, *res,
        [self = this->shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
          if (ec) return;
          if (keep_alive) {
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
  const HttpServerOptions& options_;
  const HttpHandler& handler_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::empty_body>> parser_;
  HttpRequest request_;
  bool keep_alive_ = true;
  std::shared_ptr<std::string> continue_;
};

class BeastServer final : public HttpServer {
 public:
  BeastServer(const HttpServerOptions& options, HttpHandler handler)
      : options_(options),
        handler_(std::move(handler)),
        ioc_(options.threads),
        acceptor_(ioc_),
        ssl_(ssl::context::tls_server) {}

  ~BeastServer() override { Stop(); }

  Status Listen() {
    beast::error_code ec;
    const auto address = asio::ip::make_address(options_.address, ec);
    if (ec) return Error{fmt::format("--listen: '{}' is not an IP address", options_.address)};
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Error{
          fmt::format("cannot listen on {}:{}: {}", options_.address, options_.port, ec.message())};
    }
    tls_ = !options_.tls_cert_file.empty() || !options_.tls_key_file.empty();
    if (tls_) {
      if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
        return Error{"TLS needs both --tls-cert-file and --tls-key-file"};
      }
      ssl_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      ssl_.use_certificate_chain_file(options_.tls_cert_file, ec);
      if (ec)
        return Error{fmt::format("TLS certificate {}: {}", options_.tls_cert_file, ec.message())};
      ssl_.use_private_key_file(options_.tls_key_file, ssl::context::pem, ec);
      if (ec) return Error{fmt::format("TLS key {}: {}", options_.tls_key_file, ec.message())};
      if (!options_.tls_client_ca_file.empty()) {
        ssl_.load_verify_file(options_.tls_client_ca_file, ec);
        if (ec) {
          return Error{fmt::format("client CA {}: {}", options_.tls_client_ca_file, ec.message())};
        }
        ssl_.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    }
    Accept();
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
    return OkStatus();
  }

  uint16_t port() const override { return acceptor_.local_endpoint().port(); }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    asio::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    ioc_.stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec != asio::error::operation_aborted) spdlog::warn("accept: {}", ec.message());
        if (!stopped_) Accept();
        return;
      }
      if (tls_) {
        std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
            beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(s)), ssl_), options_,
            handler_)
            ->Run();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(s)), options_,
                                                     handler_)
            ->Run();
      }
      Accept();
    });
  }

  const HttpServerOptions options_;
  const HttpHandler handler_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  ssl::context ssl_;
  bool tls_ = false;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<BeastServer>(options, std::move(handler));
  TOPOSCHED_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace toposched::net
