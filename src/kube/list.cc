#include "kube/list.h"

#include <iterator>
#include <string>

#include <fmt/format.h>

#include "kube/decode.h"
#include "kube/informer.h"

namespace toposched::kube {
namespace {

// A fleet of 5,000 nodes and 100,000 pods is 200 pages of 500: far more is a server that loops.
constexpr int kMaxPages = 10000;

template <typename T, typename Decode>
Result<std::vector<T>> ListEvery(ApiClient& client, std::string_view collection,
                                 std::string_view query, int page_size, Decode decode) {
  std::vector<T> all;
  std::string continue_token;
  for (int page = 0; page < kMaxPages; ++page) {
    std::string path = fmt::format("{}?limit={}", collection, page_size);
    if (!query.empty()) fmt::format_to(std::back_inserter(path), "&{}", query);
    if (!continue_token.empty()) path += "&continue=" + EscapeUrlComponent(continue_token);
    auto response = client.Get(path);
    if (!response.ok()) {
      return Error{
          fmt::format("GET {} from {}: {}", collection, client.config().server, response.error())};
    }
    if (response->status != 200) {
      return Error{fmt::format("GET {}: HTTP {}: {}", collection, response->status,
                               StatusMessage(response->body))};
    }
    auto list = decode(simdjson::padded_string(response->body));
    if (!list.ok()) return Error{fmt::format("GET {}: {}", collection, list.error())};
    std::move(list->items.begin(), list->items.end(), std::back_inserter(all));
    if (list->continue_token.empty()) return all;
    continue_token = std::move(list->continue_token);
  }
  return Error{fmt::format("GET {}: more than {} pages", collection, kMaxPages)};
}

}  // namespace

Result<std::vector<Pod>> ListPods(ApiClient& client, std::string_view collection,
                                  std::string_view query, int page_size) {
  return ListEvery<Pod>(client, collection, query, page_size,
                        [](const simdjson::padded_string& json) { return DecodePodList(json); });
}

Result<std::vector<Node>> ListNodes(ApiClient& client, std::string_view query, int page_size) {
  return ListEvery<Node>(client, kNodesPath, query, page_size,
                         [](const simdjson::padded_string& json) { return DecodeNodeList(json); });
}

}  // namespace toposched::kube
