#include "claims/ultraserver.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/text.h"
#include "claims/keys.h"

namespace toposched::claims {
namespace {

using Labels = std::map<std::string, std::string, std::less<>>;

const std::string* Find(const Labels& labels, std::string_view key) {
  auto it = labels.find(key);
  return it == labels.end() ? nullptr : &it->second;
}

// "1_2_4" -> {1, 2, 4}. Empty, unknown or repeated configs are refused.
Result<std::vector<int>> ParseModes(std::string_view text) {
  std::vector<int> configs;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find('_', start), text.size());
    const std::string_view token = text.substr(start, end - start);
    if (token != "1" && token != "2" && token != "4") {
      return Error{fmt::format("label {}: '{}' is not a node config (1, 2 or 4, joined by '_')",
                               kLabelUltraServerMode, token)};
    }
    const int config = token[0] - '0';
    if (std::find(configs.begin(), configs.end(), config) != configs.end()) {
      return Error{
          fmt::format("label {}: node config {} is listed twice", kLabelUltraServerMode, config)};
    }
    configs.push_back(config);
    if (end == text.size()) break;
    start = end + 1;
  }
  std::sort(configs.begin(), configs.end());
  return configs;
}

// The server id and node id of one config (2 or 4): both or neither.
Status ReadConfig(const Labels& labels, std::string_view server_key, std::string_view node_key,
                  int nodes, std::string& server_id, int& node_id) {
  const std::string* server = Find(labels, server_key);
  const std::string* node = Find(labels, node_key);
  if (server == nullptr && node == nullptr) return OkStatus();
  if (server == nullptr || node == nullptr) {
    return Error{fmt::format("label {} is set without {}",
                             server == nullptr ? node_key : server_key,
                             server == nullptr ? server_key : node_key)};
  }
  if (server->empty() ||
      std::all_of(server->begin(), server->end(), [](char c) { return c == '0'; })) {
    // AWS's init script treats all zeros as "no UltraServer": not a group anyone can share.
    return Error{fmt::format("label {}: '{}' is not a real server id", server_key, *server)};
  }
  const std::optional<int64_t> parsed_id = ParseDecimal(*node, 0, nodes - 1);
  if (!parsed_id) {
    return Error{
        fmt::format("label {}: '{}' is not a node id from 0 to {}", node_key, *node, nodes - 1)};
  }
  const int id = static_cast<int>(*parsed_id);
  server_id = *server;
  node_id = id;
  return OkStatus();
}

}  // namespace

bool UltraServerPlace::Supports(int nodes) const {
  if (std::find(node_configs.begin(), node_configs.end(), nodes) == node_configs.end()) {
    return false;
  }
  if (nodes == 1) return true;
  return NodeId(nodes) >= 0;
}

const std::string& UltraServerPlace::GroupId(int nodes) const {
  static const std::string none;
  if (nodes == 4) return server_id_4;
  if (nodes == 2) return server_id_2;
  return none;
}

int UltraServerPlace::NodeId(int nodes) const {
  if (nodes == 4) return node_id_4;
  if (nodes == 2) return node_id_2;
  return -1;
}

Result<std::optional<UltraServerPlace>> UltraServerPlaceOf(const Labels& labels) {
  const std::string* mode = Find(labels, kLabelUltraServerMode);
  const bool any = mode != nullptr || Find(labels, kLabelUltraServerServerId4) != nullptr ||
                   Find(labels, kLabelUltraServerNodeId4) != nullptr ||
                   Find(labels, kLabelUltraServerServerId2) != nullptr ||
                   Find(labels, kLabelUltraServerNodeId2) != nullptr;
  if (!any) return std::optional<UltraServerPlace>{};
  UltraServerPlace place;
  if (mode == nullptr) {
    return Error{fmt::format("UltraServer ids are set without label {}", kLabelUltraServerMode)};
  }
  TOPOSCHED_ASSIGN_OR_RETURN(place.node_configs, ParseModes(*mode));
  TOPOSCHED_RETURN_IF_ERROR(ReadConfig(labels, kLabelUltraServerServerId4, kLabelUltraServerNodeId4,
                                       4, place.server_id_4, place.node_id_4));
  TOPOSCHED_RETURN_IF_ERROR(ReadConfig(labels, kLabelUltraServerServerId2, kLabelUltraServerNodeId2,
                                       2, place.server_id_2, place.node_id_2));
  return std::optional<UltraServerPlace>(std::move(place));
}

}  // namespace toposched::claims
