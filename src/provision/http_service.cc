// The partition service client over HTTP+JSON. Paths (the fake in partition_service_command.cc
// serves the same):
//   POST   <url>/partitions          {"name","pool","ipus"}  -> 201 partition
//   GET    <url>/partitions/<name>                           -> 200 partition | 404
//   DELETE <url>/partitions/<name>                           -> 202 | 404 (gone already)
//   GET    <url>/partitions                                  -> 200 {"partitions":[...]}
#include <algorithm>

#include <curl/curl.h>
#include <fmt/format.h>

#include "base/json_escape.h"
#include "provision/service.h"

namespace toposched::provision {
namespace {

constexpr size_t kMaxBody = 16 << 20;

struct Reply {
  long status = 0;
  std::string body;
  bool too_large = false;
};

size_t Write(char* data, size_t size, size_t count, void* user) {
  auto* reply = static_cast<Reply*>(user);
  const size_t n = size * count;
  if (reply->body.size() + n > kMaxBody) {
    reply->too_large = true;
    return 0;
  }
  reply->body.append(data, n);
  return n;
}

class HttpService : public PartitionService {
 public:
  explicit HttpService(HttpServiceConfig config) : config_(std::move(config)) {
    while (!config_.url.empty() && config_.url.back() == '/') config_.url.pop_back();
  }

  Status Create(const Partition& p) override {
    std::string body = "{\"name\":";
    AppendJsonQuoted(body, p.name);
    body += ",\"pool\":";
    AppendJsonQuoted(body, p.pool);
    body += fmt::format(",\"ipus\":[{}]}}", fmt::join(p.ipus, ","));
    auto reply = Call("POST", "/partitions", body);
    if (!reply.ok()) return Error{reply.error()};
    if (reply->status != 200 && reply->status != 201) return Refused("create", *reply);
    return OkStatus();
  }

  Result<std::optional<Partition>> Get(const std::string& name) override {
    if (!ValidPartitionName(name)) return Error{fmt::format("invalid partition name '{}'", name)};
    auto reply = Call("GET", "/partitions/" + name, {});
    if (!reply.ok()) return Error{reply.error()};
    if (reply->status == 404) return std::optional<Partition>{};
    if (reply->status != 200) return Refused("status", *reply);
    auto parsed = ParsePartition(reply->body);
    if (!parsed.ok()) return Error{parsed.error()};
    if (parsed->name != name) {
      return Error{
          fmt::format("asked for partition {}, the service answered about {}", name, parsed->name)};
    }
    return std::optional<Partition>(std::move(parsed).value());
  }

  Status Remove(const std::string& name) override {
    if (!ValidPartitionName(name)) return Error{fmt::format("invalid partition name '{}'", name)};
    auto reply = Call("DELETE", "/partitions/" + name, {});
    if (!reply.ok()) return Error{reply.error()};
    if (reply->status == 404 || (reply->status >= 200 && reply->status < 300)) return OkStatus();
    return Refused("remove", *reply);
  }

  Result<std::vector<Partition>> List() override {
    auto reply = Call("GET", "/partitions", {});
    if (!reply.ok()) return Error{reply.error()};
    if (reply->status != 200) return Refused("list", *reply);
    return ParsePartitionList(reply->body);
  }

 private:
  Error Refused(std::string_view what, const Reply& reply) const {
    return Error{fmt::format("partition service at {} refused {} (HTTP {}): {}", config_.url, what,
                             reply.status, ErrorText(reply.body))};
  }

  Result<Reply> Call(const char* method, const std::string& path, const std::string& body) {
    CURL* easy = curl_easy_init();
    if (easy == nullptr) return Error{"out of memory"};
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    if (!body.empty()) headers = curl_slist_append(headers, "Content-Type: application/json");
    std::string auth;
    if (!config_.token.empty()) {
      auth = "Authorization: Bearer " + config_.token;
      headers = curl_slist_append(headers, auth.c_str());
    }
    const std::string url = config_.url + path;
    Reply reply;
    char error_buffer[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.timeout.count()));
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::min<int64_t>(config_.timeout.count(), 3000)));
    if (!config_.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, config_.ca_file.c_str());
    if (std::string_view(method) == "POST") {
      curl_easy_setopt(easy, CURLOPT_POST, 1L);
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    } else if (std::string_view(method) != "GET") {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    }
    const CURLcode code = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &reply.status);
    curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
    if (reply.too_large) {
      return Error{
          fmt::format("partition service at {}: answer over {} bytes", config_.url, kMaxBody)};
    }
    if (code != CURLE_OK) {
      return Error{fmt::format("partition service at {}: {} {}: {}", config_.url, method, path,
                               error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(code))};
    }
    if (reply.status == 401 || reply.status == 403) {
      return Error{
          fmt::format("partition service at {} refused our credentials (HTTP {}): {}; "
                      "check --partition-service-token-file",
                      config_.url, reply.status, ErrorText(reply.body))};
    }
    return reply;
  }

  HttpServiceConfig config_;
};

}  // namespace

Result<std::unique_ptr<PartitionService>> MakeHttpService(const HttpServiceConfig& config) {
  if (!config.url.starts_with("http://") && !config.url.starts_with("https://")) {
    return Error{
        fmt::format("partition service URL '{}' must start with http:// or https://", config.url)};
  }
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) return Error{"libcurl failed to initialise"};
  return std::unique_ptr<PartitionService>(std::make_unique<HttpService>(config));
}

}  // namespace toposched::provision
