// `toposched partition-service`: a loopback fake of a V-IPU-style partition service (create,
// status, remove, list) with configurable latency and failure rate, so bind-time provisioning
// runs end to end on one machine (docs/pools.md).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "base/text.h"
#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "net/http_server.h"
#include "provision/fake_service.h"

namespace toposched::cli {

struct PartitionServiceOptions {
  std::string address = "127.0.0.1";
  int port = 8191;
  double latency_s = 0.5;
  double remove_latency_s = 0.2;
  double failure_rate = 0;
  std::string token_file;
  uint64_t seed = 1;
  std::string log_level = "info";
};

std::shared_ptr<PartitionServiceOptions> AddPartitionServiceCommand(CLI::App& app) {
  auto o = std::make_shared<PartitionServiceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "partition-service",
      "Serve a fake V-IPU-style partition service for tests and demos: POST /partitions, GET "
      "/partitions[/NAME], DELETE /partitions/NAME (JSON). Partitions become active (or failed) "
      "after --latency.");
  cmd->add_option("--address", o->address, "Address to listen on (keep it loopback)")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0 picks a free one and logs it)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--latency", o->latency_s, "Seconds from create to active/failed")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--remove-latency", o->remove_latency_s, "Seconds from remove to gone")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--failure-rate", o->failure_rate, "Share of creates that end failed (0-1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--token-file", o->token_file,
                  "Require this bearer token (first line of the file)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--seed", o->seed, "Seed for the failure draws")->capture_default_str();
  cmd->add_option("--log-level", o->log_level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  return o;
}

int RunPartitionService(const PartitionServiceOptions& o) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  const StopSignals signals;  // before any thread starts

  provision::FakeServiceOptions options;
  options.latency = std::chrono::milliseconds(static_cast<int64_t>(o.latency_s * 1000));
  options.remove_latency =
      std::chrono::milliseconds(static_cast<int64_t>(o.remove_latency_s * 1000));
  options.failure_rate = o.failure_rate;
  options.seed = o.seed;
  if (!o.token_file.empty()) {
    Result<std::string> token = ReadTokenFile(o.token_file);
    if (!token.ok()) {
      spdlog::error("--token-file: {}", token.error());
      return kExitUsage;
    }
    options.token = std::move(token).value();
  }
  provision::FakePartitionService fake(options, SteadyNs);
  net::HttpServerOptions http;
  http.address = o.address;
  http.port = static_cast<uint16_t>(o.port);
  http.threads = 2;
  http.body_limit = 1 << 20;
  auto server =
      net::HttpServer::Start(http, [&](net::HttpRequest&& request, const net::Responder& respond) {
        provision::FakeAnswer answer =
            fake.Handle(request.method, request.target, request.body, request.authorization);
        spdlog::debug("{} {} -> {}", request.method, request.target, answer.status);
        respond({answer.status, "application/json", std::move(answer.body)});
      });
  if (!server.ok()) {
    spdlog::error("{}", server.error());
    return kExitUsage;
  }
  spdlog::info("partition service on http://{}:{} (latency {} s, failure rate {})", o.address,
               (*server)->port(), o.latency_s, o.failure_rate);
  const int signal = signals.Wait();
  spdlog::info("signal {} received: shutting down", signal);
  (*server)->Stop();
  return kExitOk;
}

}  // namespace toposched::cli
