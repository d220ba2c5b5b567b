#include "claims/allocation_record.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "base/json_reader.h"
#include "base/json_writer.h"

namespace toposched::claims {
namespace {

using json::Path;
namespace ondemand = simdjson::ondemand;

// Device and core ids are small (64 devices x 8 cores at most today); anything far above that
// is a corrupt record, not a bigger machine.
constexpr int64_t kMaxId = 65535;

Status ReadIds(ondemand::value& value, const Path& path, std::vector<int>& ids) {
  return json::ForEachElementOfRequired(
      value, path, [&](size_t, ondemand::value& element, const Path& at) -> Status {
        ondemand::json_type type;
        Status typed = json::TypeOf(element, at, type);
        if (!typed.ok()) return typed;
        if (type != ondemand::json_type::number) return json::ErrorAt(at, "expected an integer id");
        int64_t id = 0;
        if (element.get_int64().get(id) != simdjson::SUCCESS) {
          return json::ErrorAt(at, "expected an integer id");
        }
        if (id < 0 || id > kMaxId) return json::ErrorAt(at, "id out of range");
        if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
          return json::ErrorAt(at, "duplicate id " + std::to_string(id));
        }
        ids.push_back(static_cast<int>(id));
        return OkStatus();
      });
}

Status ReadContainer(ondemand::value& value, const Path& path, ContainerIds& out) {
  ondemand::object object;
  bool present = false;
  Status status = json::OpenObject(value, path, object, present);
  if (!status.ok()) return status;
  if (!present) return json::ErrorAt(path, "expected an object");
  bool has_name = false;
  bool has_resource = false;
  bool has_ids = false;
  status = json::ForEachField(
      object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") {
          has_name = true;
          return json::ReadRequiredString(field, at, out.container);
        }
        if (key == "resource") {
          has_resource = true;
          return json::ReadRequiredString(field, at, out.resource);
        }
        if (key == "ids") {
          has_ids = true;
          out.ids.clear();
          return ReadIds(field, at, out.ids);
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  if (!has_name) return json::ErrorAt(path, "missing \"name\"");
  if (!has_resource) return json::ErrorAt(path, "missing \"resource\"");
  if (!has_ids) return json::ErrorAt(path, "missing \"ids\"");
  return OkStatus();
}

}  // namespace

std::string AllocationRecordJson(const AllocationRecord& record) {
  JsonTree containers = JsonTree::array();  // [] when there are none, never null
  for (const ContainerIds& container : record.containers) {
    containers.push_back(JsonTree{{"name", container.container},
                                  {"resource", container.resource},
                                  {"ids", JsonTree(container.ids)}});
  }
  return WriteJson({{"node", record.node},
                    {"instanceType", record.instance_type},
                    {"containers", std::move(containers)}});
}

Result<AllocationRecord> ParseAllocationRecord(std::string_view text) {
  AllocationRecord record;
  bool has_node = false;
  bool has_containers = false;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path;
    return json::ForEachFieldOfRequired(
        root, path, "expected an object",
        [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key == "node") {
            has_node = true;
            return json::ReadRequiredString(field, at, record.node);
          }
          if (key == "instanceType")
            return json::ReadRequiredString(field, at, record.instance_type);
          if (key != "containers") return OkStatus();
          has_containers = true;
          record.containers.clear();
          return json::ForEachElementOfRequired(
              field, at, [&](size_t, ondemand::value& element, const Path& element_at) {
                ContainerIds container;
                Status read = ReadContainer(element, element_at, container);
                if (read.ok()) record.containers.push_back(std::move(container));
                return read;
              });
        });
  });
  if (!status.ok()) return Error{"allocation record: " + status.error()};
  if (!has_node) return Error{"allocation record: missing \"node\""};
  if (!has_containers) return Error{"allocation record: missing \"containers\""};
  return record;
}

Result<int64_t> ParseAllocTime(std::string_view text) {
  if (text.empty()) return Error{"allocation time: empty"};
  if (text.size() > 19) return Error{"allocation time: out of range"};
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return Error{"allocation time: expected decimal digits"};
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Error{"allocation time: out of range"};
  }
  return static_cast<int64_t>(value);
}

}  // namespace toposched::claims
