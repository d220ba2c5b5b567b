#include "provision/partition.h"

#include <simdjson.h>

#include <fmt/format.h>

#include "base/json_escape.h"

namespace toposched::provision {
namespace {

constexpr std::string_view kPrefix = "ts-";
constexpr size_t kMaxIpus = 1024;
constexpr size_t kMaxPartitions = 100000;

Status DecodeOne(simdjson::dom::element element, Partition& out) {
  simdjson::dom::object object;
  if (element.get_object().get(object) != simdjson::SUCCESS) {
    return Error{"a partition must be a JSON object"};
  }
  bool has_name = false;
  bool has_state = false;
  for (auto field : object) {
    const std::string_view key = field.key;
    if (key == "name" || key == "pool" || key == "message" || key == "state") {
      std::string_view text;
      if (field.value.get_string().get(text) != simdjson::SUCCESS) {
        return Error{fmt::format("partition field '{}' must be a string", key)};
      }
      if (key == "name") {
        if (!ValidPartitionName(text)) {
          return Error{fmt::format("partition name '{}' is not a valid name", text.substr(0, 64))};
        }
        out.name = std::string(text);
        has_name = true;
      } else if (key == "pool") {
        out.pool = std::string(text.substr(0, 256));
      } else if (key == "message") {
        out.message = std::string(text.substr(0, 1024));
      } else {
        if (text == "creating") {
          out.state = PartitionState::kCreating;
        } else if (text == "active") {
          out.state = PartitionState::kActive;
        } else if (text == "failed") {
          out.state = PartitionState::kFailed;
        } else if (text == "removing") {
          out.state = PartitionState::kRemoving;
        } else {
          return Error{
              fmt::format("unknown partition state '{}' (expected creating, active, "
                          "failed or removing)",
                          text.substr(0, 32))};
        }
        has_state = true;
      }
    } else if (key == "ipus") {
      simdjson::dom::array array;
      if (field.value.get_array().get(array) != simdjson::SUCCESS) {
        return Error{"partition field 'ipus' must be an array of ids"};
      }
      out.ipus.clear();
      for (auto item : array) {
        int64_t id = 0;
        if (item.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id >= 4096) {
          return Error{"partition field 'ipus' must hold ids from 0 to 4095"};
        }
        if (out.ipus.size() >= kMaxIpus) return Error{"partition has too many ipus"};
        out.ipus.push_back(static_cast<int>(id));
      }
    }
    // Other fields are the service's business.
  }
  if (!has_name) return Error{"partition has no 'name'"};
  if (!has_state) return Error{fmt::format("partition {} has no 'state'", out.name)};
  return OkStatus();
}

Result<simdjson::dom::element> ParseDocument(simdjson::dom::parser& parser, std::string_view json) {
  simdjson::dom::element root;
  const auto code = parser.parse(json.data(), json.size()).get(root);
  if (code != simdjson::SUCCESS) {
    return Error{fmt::format("the partition service answered malformed JSON ({}): {}",
                             simdjson::error_message(code), json.substr(0, 80))};
  }
  return root;
}

}  // namespace

std::string_view StateName(PartitionState state) {
  switch (state) {
    case PartitionState::kCreating:
      return "creating";
    case PartitionState::kActive:
      return "active";
    case PartitionState::kFailed:
      return "failed";
    case PartitionState::kRemoving:
      return "removing";
  }
  return "unknown";
}

std::string PartitionNameFor(std::string_view pod_uid) {
  return fmt::format("{}{}", kPrefix, pod_uid);
}

std::string OwnerOf(std::string_view partition_name) {
  if (!partition_name.starts_with(kPrefix) || partition_name.size() == kPrefix.size()) return {};
  return std::string(partition_name.substr(kPrefix.size()));
}

bool ValidPartitionName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string EncodePartition(const Partition& p) {
  std::string out = "{\"name\":";
  AppendJsonQuoted(out, p.name);
  out += ",\"pool\":";
  AppendJsonQuoted(out, p.pool);
  out += fmt::format(",\"ipus\":[{}],\"state\":\"{}\"", fmt::join(p.ipus, ","), StateName(p.state));
  if (!p.message.empty()) {
    out += ",\"message\":";
    AppendJsonQuoted(out, p.message);
  }
  out += '}';
  return out;
}

std::string EncodePartitionList(const std::vector<Partition>& partitions) {
  std::string out = "{\"partitions\":[";
  for (size_t i = 0; i < partitions.size(); ++i) {
    if (i != 0) out += ',';
    out += EncodePartition(partitions[i]);
  }
  return out + "]}";
}

Result<Partition> ParsePartition(std::string_view json) {
  simdjson::dom::parser parser;
  auto root = ParseDocument(parser, json);
  if (!root.ok()) return Error{root.error()};
  Partition out;
  if (auto s = DecodeOne(*root, out); !s.ok()) {
    return Error{fmt::format("the partition service answered an invalid partition: {}", s.error())};
  }
  return out;
}

Result<std::vector<Partition>> ParsePartitionList(std::string_view json) {
  simdjson::dom::parser parser;
  auto root = ParseDocument(parser, json);
  if (!root.ok()) return Error{root.error()};
  simdjson::dom::array array;
  if ((*root)["partitions"].get_array().get(array) != simdjson::SUCCESS) {
    return Error{"the partition service's list has no 'partitions' array"};
  }
  std::vector<Partition> out;
  for (auto item : array) {
    if (out.size() >= kMaxPartitions) return Error{"the partition list is too long"};
    Partition p;
    if (auto s = DecodeOne(item, p); !s.ok()) {
      return Error{fmt::format("the partition service's list entry {}: {}", out.size(), s.error())};
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string ErrorText(std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  std::string_view text;
  if (parser.parse(body.data(), body.size()).get(root) == simdjson::SUCCESS &&
      root["error"].get_string().get(text) == simdjson::SUCCESS) {
    return std::string(text.substr(0, 512));
  }
  return std::string(body.substr(0, 200));
}

}  // namespace toposched::provision
