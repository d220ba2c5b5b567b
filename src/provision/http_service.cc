// The partition service client over HTTP+JSON. Paths (the fake in partition_service_command.cc
// serves the same):
//   POST   <url>/partitions          {"name","pool","ipus"}  -> 201 partition
//   GET    <url>/partitions/<name>                           -> 200 partition | 404
//   DELETE <url>/partitions/<name>                           -> 202 | 404 (gone already)
//   GET    <url>/partitions                                  -> 200 {"partitions":[...]}
#include <algorithm>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "net/http_client.h"
#include "provision/service.h"

namespace toposched::provision {
namespace {

constexpr size_t kMaxBody = 16 << 20;

struct Reply {
  long status = 0;  // NOLINT(google-runtime-int)
  std::string body;
};

net::HttpClientOptions TransportOptions(const HttpServiceConfig& config) {
  net::HttpClientOptions options;
  options.tls.ca_file = config.ca_file;
  options.connect_timeout =
      std::chrono::milliseconds(std::min<int64_t>(config.timeout.count(), 3000));
  options.max_response_bytes = kMaxBody;
  return options;
}

class HttpService : public PartitionService {
 public:
  explicit HttpService(HttpServiceConfig config)
      : config_(std::move(config)), http_(TransportOptions(config_)) {
    while (!config_.url.empty() && config_.url.back() == '/') config_.url.pop_back();
  }

  Status Create(const Partition& p) override {
    const std::string body =
        WriteJson(JsonTree{{"name", p.name}, {"pool", p.pool}, {"ipus", p.ipus}});
    TOPOSCHED_ASSIGN_OR_RETURN(auto reply, Call("POST", "/partitions", body));
    if (reply.status != 200 && reply.status != 201) return Refused("create", reply);
    return OkStatus();
  }

  Result<std::optional<Partition>> Get(const std::string& name) override {
    if (!ValidPartitionName(name)) return Error{fmt::format("invalid partition name '{}'", name)};
    TOPOSCHED_ASSIGN_OR_RETURN(auto reply, Call("GET", "/partitions/" + name, {}));
    if (reply.status == 404) return std::optional<Partition>{};
    if (reply.status != 200) return Refused("status", reply);
    TOPOSCHED_ASSIGN_OR_RETURN(auto parsed, ParsePartition(reply.body));
    if (parsed.name != name) {
      return Error{
          fmt::format("asked for partition {}, the service answered about {}", name, parsed.name)};
    }
    return std::optional<Partition>(std::move(parsed));
  }

  Status Remove(const std::string& name) override {
    if (!ValidPartitionName(name)) return Error{fmt::format("invalid partition name '{}'", name)};
    TOPOSCHED_ASSIGN_OR_RETURN(auto reply, Call("DELETE", "/partitions/" + name, {}));
    if (reply.status == 404 || (reply.status >= 200 && reply.status < 300)) return OkStatus();
    return Refused("remove", reply);
  }

  Result<std::vector<Partition>> List() override {
    TOPOSCHED_ASSIGN_OR_RETURN(auto reply, Call("GET", "/partitions", {}));
    if (reply.status != 200) return Refused("list", reply);
    return ParsePartitionList(reply.body);
  }

 private:
  Error Refused(std::string_view what, const Reply& reply) const {
    return Error{fmt::format("partition service at {} refused {} (HTTP {}): {}", config_.url, what,
                             reply.status, ErrorText(reply.body))};
  }

  Result<Reply> Call(const char* method, const std::string& path, const std::string& body) {
    net::HttpClientRequest request;
    request.method = method;
    request.url = config_.url + path;
    request.headers.push_back("Accept: application/json");
    if (!body.empty()) request.headers.push_back("Content-Type: application/json");
    if (!config_.token.empty()) request.headers.push_back("Authorization: Bearer " + config_.token);
    request.body = body;
    request.timeout = config_.timeout;
    auto answer = http_.Send(request);
    if (!answer.ok()) {
      return Error{fmt::format("partition service at {}: {} {}: {}", config_.url, method, path,
                               answer.error())};
    }
    Reply reply{answer->status, std::move(answer->body)};
    if (reply.status == 401 || reply.status == 403) {
      return Error{
          fmt::format("partition service at {} refused our credentials (HTTP {}): {}; "
                      "check --partition-service-token-file",
                      config_.url, reply.status, ErrorText(reply.body))};
    }
    return reply;
  }

  HttpServiceConfig config_;
  net::HttpClient http_;
};

}  // namespace

Result<std::unique_ptr<PartitionService>> MakeHttpService(const HttpServiceConfig& config) {
  if (!config.url.starts_with("http://") && !config.url.starts_with("https://")) {
    return Error{
        fmt::format("partition service URL '{}' must start with http:// or https://", config.url)};
  }
  return std::unique_ptr<PartitionService>(std::make_unique<HttpService>(config));
}

}  // namespace toposched::provision
