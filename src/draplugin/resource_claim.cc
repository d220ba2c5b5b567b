#include "draplugin/resource_claim.h"

#include <fmt/format.h>

#include "base/json_reader.h"

namespace toposched::draplugin {
namespace {

namespace ondemand = simdjson::ondemand;
using json::Path;

Status ReadStrings(ondemand::value& value, const Path& path, std::vector<std::string>& out) {
  return json::ForEachElementOf(value, path,
                                [&](size_t, ondemand::value element, const Path& at) -> Status {
                                  std::string text;
                                  TOPOSCHED_RETURN_IF_ERROR(json::ReadString(element, at, text));
                                  out.push_back(std::move(text));
                                  return OkStatus();
                                });
}

Status DecodeOpaque(ondemand::value& value, const Path& path, ClaimConfig& config) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value field, const Path& at) -> Status {
        if (key == "driver") return json::ReadString(field, at, config.driver);
        if (key == "parameters") {
          ondemand::json_type type;
          TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(field, at, type));
          if (type == ondemand::json_type::null) return OkStatus();
          if (type != ondemand::json_type::object) return json::ErrorAt(at, "expected an object");
          ondemand::object object;
          bool present = false;
          TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(field, at, object, present));
          std::string_view raw;
          if (auto error = object.raw_json().get(raw)) return json::JsonErrorAt(at, error);
          config.parameters.assign(raw);
          return OkStatus();
        }
        return OkStatus();
      });
}

Status DecodeConfigs(ondemand::value& value, const Path& path, ClaimConfig::Source default_source,
                     std::vector<ClaimConfig>& out) {
  return json::ForEachElementOf(
      value, path, [&](size_t, ondemand::value element, const Path& at) -> Status {
        ClaimConfig config;
        config.source = default_source;
        bool opaque = false;
        Status read = json::ForEachFieldOf(
            element, at, [&](std::string_view key, ondemand::value field, const Path& f) -> Status {
              if (key == "requests") return ReadStrings(field, f, config.requests);
              if (key == "source") {
                std::string source;
                TOPOSCHED_RETURN_IF_ERROR(json::ReadString(field, f, source));
                if (source == "FromClass") {
                  config.source = ClaimConfig::Source::kClass;
                } else if (source == "FromClaim" || source.empty()) {
                  config.source = ClaimConfig::Source::kClaim;
                } else {
                  return json::ErrorAt(f,
                                       fmt::format("'{}' is not FromClass or FromClaim", source));
                }
                return OkStatus();
              }
              if (key == "opaque") {
                opaque = true;
                return DecodeOpaque(field, f, config);
              }
              return OkStatus();
            });
        if (!read.ok()) return read;
        // A configuration of another type than opaque (none exists in v1 yet) is not ours.
        if (opaque) out.push_back(std::move(config));
        return OkStatus();
      });
}

Status DecodeResult(ondemand::value& value, const Path& path, AllocatedDevice& device) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value field, const Path& at) -> Status {
        if (key == "request") return json::ReadString(field, at, device.request);
        if (key == "driver") return json::ReadString(field, at, device.driver);
        if (key == "pool") return json::ReadString(field, at, device.pool);
        if (key == "device") return json::ReadString(field, at, device.device);
        if (key == "adminAccess") return json::ReadBool(field, at, device.admin_access);
        return OkStatus();
      });
}

Status DecodeAllocation(ondemand::value& value, const Path& path, ResourceClaimView& claim) {
  ondemand::json_type type;
  TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, path, type));
  if (type == ondemand::json_type::null) return OkStatus();
  claim.allocated = true;
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value field, const Path& at) -> Status {
        if (key != "devices") return OkStatus();
        return json::ForEachFieldOf(
            field, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
              if (k == "results") {
                return json::ForEachElementOf(
                    v, p, [&](size_t, ondemand::value element, const Path& e) -> Status {
                      AllocatedDevice device;
                      TOPOSCHED_RETURN_IF_ERROR(DecodeResult(element, e, device));
                      const std::pair<std::string_view, const std::string*> required[] = {
                          {"request", &device.request},
                          {"driver", &device.driver},
                          {"pool", &device.pool},
                          {"device", &device.device}};
                      for (const auto& [what, text] : required) {
                        if (text->empty()) return json::ErrorAt(e.Field(what), "missing");
                      }
                      claim.results.push_back(std::move(device));
                      return OkStatus();
                    });
              }
              if (k == "config") {
                return DecodeConfigs(v, p, ClaimConfig::Source::kClaim, claim.status_configs);
              }
              return OkStatus();
            });
      });
}

Status DecodeConsumer(ondemand::value& value, const Path& path, ClaimConsumer& consumer) {
  TOPOSCHED_RETURN_IF_ERROR(json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value field, const Path& at) -> Status {
        if (key == "apiGroup") return json::ReadString(field, at, consumer.api_group);
        if (key == "resource") return json::ReadString(field, at, consumer.resource);
        if (key == "name") return json::ReadString(field, at, consumer.name);
        if (key == "uid") return json::ReadString(field, at, consumer.uid);
        return OkStatus();
      }));
  if (consumer.resource.empty()) return json::ErrorAt(path.Field("resource"), "missing");
  if (consumer.name.empty()) return json::ErrorAt(path.Field("name"), "missing");
  return OkStatus();
}

}  // namespace

Result<ResourceClaimView> DecodeResourceClaim(std::string_view text) {
  ResourceClaimView claim;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path("resourceclaim");
    ondemand::json_type type;
    TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(root, path, type));
    if (type != ondemand::json_type::object) return json::ErrorAt(path, "expected an object");
    return json::ForEachFieldOf(
        root, path, [&](std::string_view key, ondemand::value field, const Path& at) -> Status {
          if (key == "kind") {
            std::string kind;
            TOPOSCHED_RETURN_IF_ERROR(json::ReadString(field, at, kind));
            if (!kind.empty() && kind != "ResourceClaim") {
              return json::ErrorAt(at, fmt::format("'{}' is not a ResourceClaim", kind));
            }
            return OkStatus();
          }
          if (key == "metadata") {
            return json::ForEachFieldOf(
                field, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                  if (k == "namespace") return json::ReadString(v, p, claim.ns);
                  if (k == "name") return json::ReadString(v, p, claim.name);
                  if (k == "uid") return json::ReadString(v, p, claim.uid);
                  return OkStatus();
                });
          }
          if (key == "spec") {
            return json::ForEachFieldOf(
                field, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                  if (k != "devices") return OkStatus();
                  return json::ForEachFieldOf(
                      v, p, [&](std::string_view k2, ondemand::value v2, const Path& p2) -> Status {
                        if (k2 != "config") return OkStatus();
                        return DecodeConfigs(v2, p2, ClaimConfig::Source::kClaim,
                                             claim.spec_configs);
                      });
                });
          }
          if (key == "status") {
            return json::ForEachFieldOf(
                field, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                  if (k == "allocation") return DecodeAllocation(v, p, claim);
                  if (k == "reservedFor") {
                    return json::ForEachElementOf(
                        v, p, [&](size_t, ondemand::value element, const Path& e) -> Status {
                          ClaimConsumer consumer;
                          TOPOSCHED_RETURN_IF_ERROR(DecodeConsumer(element, e, consumer));
                          claim.reserved_for.push_back(std::move(consumer));
                          return OkStatus();
                        });
                  }
                  return OkStatus();
                });
          }
          return OkStatus();
        });
  });
  if (!status.ok()) return Error{status.error()};
  if (claim.uid.empty()) return Error{"resourceclaim.metadata.uid: missing"};
  return claim;
}

Result<ResourceClaimView> ReadResourceClaim(kube::ApiClient& api, std::string_view ns,
                                            std::string_view name) {
  const std::string path =
      fmt::format("/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims/{}",
                  kube::EscapeUrlComponent(ns), kube::EscapeUrlComponent(name));
  auto response = api.Get(path);
  if (!response.ok()) {
    return Error{fmt::format("reading ResourceClaim {}/{}: {}", ns, name, response.error())};
  }
  if (response->status == 404) return Error{fmt::format("ResourceClaim {}/{} not found", ns, name)};
  if (response->status / 100 != 2) {
    return Error{fmt::format("reading ResourceClaim {}/{}: HTTP {}: {}", ns, name, response->status,
                             kube::StatusMessage(response->body))};
  }
  auto claim = DecodeResourceClaim(response->body);
  if (!claim.ok()) return Error{fmt::format("ResourceClaim {}/{}: {}", ns, name, claim.error())};
  return claim;
}

}  // namespace toposched::draplugin
