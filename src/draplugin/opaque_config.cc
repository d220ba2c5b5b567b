#include "draplugin/opaque_config.h"

#include <array>
#include <cstdint>
#include <optional>

#include <fmt/format.h>

#include "base/json_reader.h"

namespace toposched::draplugin {
namespace {

namespace ondemand = simdjson::ondemand;
using json::Path;

constexpr std::array<std::string_view, 3> kApiVersions = {
    kOpaqueApiVersion, "neuron.aws.com/v1alphav1", "resource.neuron.aws.com/v1alphav1"};

// A required integer field: present, an integer (not 2.0, not "2"), one of `allowed`.
Status ReadChoice(ondemand::value& value, const Path& path, std::initializer_list<int> allowed,
                  int& out) {
  ondemand::json_type type;
  TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, path, type));
  if (type != ondemand::json_type::number) {
    return json::ErrorAt(path, fmt::format("expected one of {}", fmt::join(allowed, ", ")));
  }
  int64_t number = 0;
  if (value.get_int64().get(number) != simdjson::SUCCESS) {
    return json::ErrorAt(path,
                         fmt::format("expected an integer, one of {}", fmt::join(allowed, ", ")));
  }
  for (int choice : allowed) {
    if (number == choice) {
      out = choice;
      return OkStatus();
    }
  }
  return json::ErrorAt(
      path, fmt::format("{} is not allowed (one of {})", number, fmt::join(allowed, ", ")));
}

}  // namespace

Result<OpaqueConfig> DecodeOpaqueConfig(std::string_view text) {
  // Fields are read in any order: the kind decides which value field is legal, so values are
  // kept until the end.
  std::optional<std::string> api_version;
  std::optional<std::string> kind;
  std::optional<int> lnc;
  std::optional<int> mode;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path("parameters");
    return json::ForEachFieldOfRequired(
        root, path, "expected an object, got null",
        [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          auto once = [&](bool seen) -> Status {
            return seen ? json::ErrorAt(at, "given twice") : OkStatus();
          };
          if (key == "apiVersion" || key == "kind") {
            std::optional<std::string>& slot = key == "apiVersion" ? api_version : kind;
            TOPOSCHED_RETURN_IF_ERROR(once(slot.has_value()));
            ondemand::json_type type;
            TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, at, type));
            if (type != ondemand::json_type::string) return json::ErrorAt(at, "expected a string");
            std::string read;
            TOPOSCHED_RETURN_IF_ERROR(json::ReadString(value, at, read));
            slot = std::move(read);
            return OkStatus();
          }
          if (key == "logicalNeuronCore") {
            TOPOSCHED_RETURN_IF_ERROR(once(lnc.has_value()));
            int read = 0;
            TOPOSCHED_RETURN_IF_ERROR(ReadChoice(value, at, {1, 2}, read));
            lnc = read;
            return OkStatus();
          }
          if (key == "ultraserverMode") {
            TOPOSCHED_RETURN_IF_ERROR(once(mode.has_value()));
            int read = 0;
            TOPOSCHED_RETURN_IF_ERROR(ReadChoice(value, at, {1, 2, 4}, read));
            mode = read;
            return OkStatus();
          }
          return json::ErrorAt(at,
                               "unknown field (NeuronConfig has logicalNeuronCore, "
                               "UltraServerConfig has ultraserverMode)");
        });
  });
  if (!status.ok()) return Error{status.error()};

  if (!api_version) return Error{"parameters.apiVersion: missing"};
  bool known_version = false;
  for (std::string_view accepted : kApiVersions) known_version |= *api_version == accepted;
  if (!known_version) {
    return Error{fmt::format("parameters.apiVersion: '{}' is not {} (or {}, {})", *api_version,
                             kApiVersions[0], kApiVersions[1], kApiVersions[2])};
  }
  if (!kind) return Error{"parameters.kind: missing"};
  OpaqueConfig config;
  config.api_version = *api_version;
  if (*kind == "NeuronConfig") {
    if (mode) return Error{"parameters.ultraserverMode: not a field of NeuronConfig"};
    if (!lnc) return Error{"parameters.logicalNeuronCore: missing (NeuronConfig sets it, 1 or 2)"};
    config.kind = OpaqueConfig::Kind::kNeuronConfig;
    config.logical_neuron_core = *lnc;
  } else if (*kind == "UltraServerConfig") {
    if (lnc) return Error{"parameters.logicalNeuronCore: not a field of UltraServerConfig"};
    if (!mode) {
      return Error{"parameters.ultraserverMode: missing (UltraServerConfig sets it, 1, 2 or 4)"};
    }
    config.kind = OpaqueConfig::Kind::kUltraServerConfig;
    config.ultraserver_mode = *mode;
  } else {
    return Error{
        fmt::format("parameters.kind: '{}' is not NeuronConfig or UltraServerConfig", *kind)};
  }
  return config;
}

std::string DescribeOpaqueConfig(const OpaqueConfig& config) {
  if (config.kind == OpaqueConfig::Kind::kNeuronConfig) {
    return fmt::format("NeuronConfig{{logicalNeuronCore: {}}}", config.logical_neuron_core);
  }
  return fmt::format("UltraServerConfig{{ultraserverMode: {}}}", config.ultraserver_mode);
}

}  // namespace toposched::draplugin
