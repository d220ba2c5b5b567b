#include "provision/partition.h"

#include <simdjson.h>

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "base/json_reader.h"
#include "base/json_writer.h"

namespace toposched::provision {
namespace {

constexpr std::string_view kPrefix = "ts-";
constexpr size_t kMaxIpus = 1024;
constexpr size_t kMaxPartitions = 100000;

namespace ondemand = simdjson::ondemand;

// Our own verdict on a well-formed answer, told apart from simdjson's errors (malformed JSON),
// which On-Demand may find only while the decoder walks the document.
struct Verdict {
  bool invalid = false;
  Status Reject(std::string message) {
    invalid = true;
    return Error{std::move(message)};
  }
};

bool IsType(ondemand::value& value, const json::Path& path, ondemand::json_type want,
            Status& status) {
  ondemand::json_type type;
  status = json::TypeOf(value, path, type);
  return status.ok() && type == want;
}

Status DecodeOne(ondemand::value& element, const json::Path& path, Verdict& verdict,
                 Partition& out) {
  Status status = OkStatus();
  if (!IsType(element, path, ondemand::json_type::object, status)) {
    if (!status.ok()) return status;
    return verdict.Reject("a partition must be a JSON object");
  }
  ondemand::object object;
  if (auto error = element.get_object().get(object)) return json::JsonErrorAt(path, error);
  bool has_name = false;
  bool has_state = false;
  status = json::ForEachField(
      object, path,
      [&](std::string_view key, ondemand::value& value, const json::Path& at) -> Status {
        Status read = OkStatus();
        if (key == "name" || key == "pool" || key == "message" || key == "state") {
          if (!IsType(value, at, ondemand::json_type::string, read)) {
            if (!read.ok()) return read;
            return verdict.Reject(fmt::format("partition field '{}' must be a string", key));
          }
          std::string_view text;
          if (auto error = value.get_string().get(text)) return json::JsonErrorAt(at, error);
          if (key == "name") {
            if (!ValidPartitionName(text)) {
              return verdict.Reject(
                  fmt::format("partition name '{}' is not a valid name", text.substr(0, 64)));
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
              return verdict.Reject(
                  fmt::format("unknown partition state '{}' (expected creating, active, "
                              "failed or removing)",
                              text.substr(0, 32)));
            }
            has_state = true;
          }
        } else if (key == "ipus") {
          if (!IsType(value, at, ondemand::json_type::array, read)) {
            if (!read.ok()) return read;
            return verdict.Reject("partition field 'ipus' must be an array of ids");
          }
          ondemand::array array;
          if (auto error = value.get_array().get(array)) return json::JsonErrorAt(at, error);
          out.ipus.clear();
          return json::ForEachElement(
              array, at, [&](size_t, ondemand::value& item, const json::Path&) -> Status {
                int64_t id = 0;
                if (item.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id >= 4096) {
                  return verdict.Reject("partition field 'ipus' must hold ids from 0 to 4095");
                }
                if (out.ipus.size() >= kMaxIpus)
                  return verdict.Reject("partition has too many ipus");
                out.ipus.push_back(static_cast<int>(id));
                return OkStatus();
              });
        }
        // Other fields are the service's business.
        return OkStatus();
      });
  if (!status.ok()) return status;
  if (!has_name) return verdict.Reject("partition has no 'name'");
  if (!has_state) return verdict.Reject(fmt::format("partition {} has no 'state'", out.name));
  return OkStatus();
}

Error Malformed(const Status& status, std::string_view json) {
  return Error{fmt::format("the partition service answered malformed JSON ({}): {}", status.error(),
                           json.substr(0, 80))};
}

JsonTree PartitionTree(const Partition& p) {
  JsonTree out = {
      {"name", p.name}, {"pool", p.pool}, {"ipus", p.ipus}, {"state", StateName(p.state)}};
  if (!p.message.empty()) out["message"] = p.message;
  return out;
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

std::string EncodePartition(const Partition& p) { return WriteJson(PartitionTree(p)); }

std::string EncodePartitionList(const std::vector<Partition>& partitions) {
  JsonTree list = JsonTree::array();
  for (const Partition& p : partitions) list.push_back(PartitionTree(p));
  return WriteJson(JsonTree{{"partitions", std::move(list)}});
}

Result<Partition> ParsePartition(std::string_view json) {
  const simdjson::padded_string padded(json);
  Partition out;
  Verdict verdict;
  const Status status = json::DecodeDocument(
      padded, [&](ondemand::value& root) { return DecodeOne(root, json::Path(), verdict, out); });
  if (!status.ok() && !verdict.invalid) return Malformed(status, json);
  if (!status.ok()) {
    return Error{
        fmt::format("the partition service answered an invalid partition: {}", status.error())};
  }
  return out;
}

Result<std::vector<Partition>> ParsePartitionList(std::string_view json) {
  const simdjson::padded_string padded(json);
  std::vector<Partition> out;
  Verdict verdict;
  const Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const json::Path path;
    Status read = OkStatus();
    if (!IsType(root, path, ondemand::json_type::object, read)) {
      if (!read.ok()) return read;
      return verdict.Reject("the partition service's list has no 'partitions' array");
    }
    ondemand::object object;
    if (auto error = root.get_object().get(object)) return json::JsonErrorAt(path, error);
    bool seen = false;  // the first "partitions" counts
    read = json::ForEachField(
        object, path,
        [&](std::string_view key, ondemand::value& value, const json::Path& at) -> Status {
          if (key != "partitions" || seen) return OkStatus();
          seen = true;
          Status type = OkStatus();
          if (!IsType(value, at, ondemand::json_type::array, type)) {
            if (!type.ok()) return type;
            return verdict.Reject("the partition service's list has no 'partitions' array");
          }
          ondemand::array array;
          if (auto error = value.get_array().get(array)) return json::JsonErrorAt(at, error);
          return json::ForEachElement(
              array, at, [&](size_t, ondemand::value& item, const json::Path& item_path) -> Status {
                if (out.size() >= kMaxPartitions) {
                  return verdict.Reject("the partition list is too long");
                }
                Partition p;
                Status decoded = DecodeOne(item, item_path, verdict, p);
                if (!decoded.ok()) {
                  if (!verdict.invalid) return decoded;
                  return Error{fmt::format("the partition service's list entry {}: {}", out.size(),
                                           decoded.error())};
                }
                out.push_back(std::move(p));
                return OkStatus();
              });
        });
    if (!read.ok()) return read;
    if (!seen) return verdict.Reject("the partition service's list has no 'partitions' array");
    return OkStatus();
  });
  if (!status.ok() && !verdict.invalid) return Malformed(status, json);
  if (!status.ok()) return Error{status.error()};
  return out;
}

std::string ErrorText(std::string_view body) {
  const simdjson::padded_string padded(body);
  std::string text;
  bool found = false;
  const Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const json::Path path;
    ondemand::object object;
    bool present = false;
    Status open = json::OpenObject(root, path, object, present);
    if (!open.ok()) return open;
    if (!present) return Error{"null"};
    return json::ForEachField(
        object, path,
        [&](std::string_view key, ondemand::value& value, const json::Path&) -> Status {
          if (key != "error" || found) return OkStatus();
          // The first "error" counts. Copied: the view points into the thread's parser.
          std::string_view view;
          if (value.get_string().get(view) != simdjson::SUCCESS) return Error{"not a string"};
          text.assign(view.substr(0, 512));
          found = true;
          return OkStatus();
        });
  });
  if (status.ok() && found) return text;
  return std::string(body.substr(0, 200));
}

}  // namespace toposched::provision
