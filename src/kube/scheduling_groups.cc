#include "kube/scheduling_groups.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/json_reader.h"

namespace toposched::kube {

namespace ondemand = simdjson::ondemand;
using json::Path;

namespace {

constexpr std::string_view kGroupPath = "/apis/scheduling.k8s.io";

// The object at `value`; null or absent where one is required is an error naming `path`.
Status OpenRequired(ondemand::value& value, const Path& path, ondemand::object& object) {
  bool present = false;
  TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(value, path, object, present));
  if (!present) return json::ErrorAt(path, "expected an object, got null");
  return OkStatus();
}

Status ReadName(ondemand::value& value, const Path& path, std::string& out) {
  ondemand::json_type type;
  TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, path, type));
  if (type != ondemand::json_type::string) return json::ErrorAt(path, "expected a string");
  return json::ReadString(value, path, out);
}

// A PodGroup's spec.schedulingPolicy or a Workload pod group's policy: exactly one of basic and
// gang, as the API server validates. `min_count` becomes gang.minCount, or 0 for basic.
Status DecodePolicy(ondemand::value& value, const Path& path, int& min_count) {
  ondemand::object policy;
  TOPOSCHED_RETURN_IF_ERROR(OpenRequired(value, path, policy));
  bool basic = false;
  bool gang = false;
  bool has_min_count = false;
  // Named, not written inside the macro: its own uses of the macro would shadow the outer one's.
  const auto read_policy_field = [&](std::string_view key, ondemand::value& field,
                                     const Path& at) -> Status {
    ondemand::object object;
    bool present = false;
    if (key == "basic") {
      TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(field, at, object, present));
      basic = present;
      return OkStatus();
    }
    if (key != "gang") return OkStatus();  // a newer policy's field
    TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(field, at, object, present));
    gang = present;
    if (!present) return OkStatus();
    return json::ForEachField(
        object, at,
        [&](std::string_view k, ondemand::value& count, const Path& count_at) -> Status {
          if (k != "minCount") return OkStatus();
          ondemand::json_type type;
          TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(count, count_at, type));
          int64_t n = 0;
          if (type != ondemand::json_type::number ||
              count.get_int64().get(n) != simdjson::SUCCESS) {
            return json::ErrorAt(count_at, "expected an integer");
          }
          // The API's int32, above 0.
          if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
            return json::ErrorAt(count_at, fmt::format("{} is not a count of pods >= 1", n));
          }
          has_min_count = true;
          min_count = static_cast<int>(n);
          return OkStatus();
        });
  };
  TOPOSCHED_RETURN_IF_ERROR(json::ForEachField(policy, path, read_policy_field));
  if (basic == gang) {
    return json::ErrorAt(path, basic ? "both basic and gang are set" : "neither basic nor gang");
  }
  if (basic) {
    min_count = 0;
  } else if (!has_min_count) {
    return json::ErrorAt(path.Field("gang"), "no minCount");
  }
  return OkStatus();
}

// Reads the document's kind (if set, it must be `kind`) and calls spec_fn on its spec, which
// is required.
template <typename SpecFn>
Status DecodeObject(std::string_view text, std::string_view kind, SpecFn&& spec_fn) {
  const simdjson::padded_string padded(text);
  bool has_spec = false;
  // Named, not written inside the macro: its own uses of the macro would shadow the outer one's.
  const auto read_root = [&](ondemand::value& root) -> Status {
    const Path path;
    ondemand::object object;
    TOPOSCHED_RETURN_IF_ERROR(OpenRequired(root, path, object));
    return json::ForEachField(
        object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key == "kind") {
            std::string got;
            TOPOSCHED_RETURN_IF_ERROR(json::ReadString(field, at, got));
            if (!got.empty() && got != kind) {
              return json::ErrorAt(at,
                                   fmt::format("\"{}\", expected \"{}\"", got.substr(0, 40), kind));
            }
            return OkStatus();
          }
          if (key != "spec") return OkStatus();
          has_spec = true;
          ondemand::object spec;
          TOPOSCHED_RETURN_IF_ERROR(OpenRequired(field, at, spec));
          return spec_fn(spec, at);
        });
  };
  TOPOSCHED_RETURN_IF_ERROR(json::DecodeDocument(padded, read_root));
  if (!has_spec) return Error{"no spec"};
  return OkStatus();
}

}  // namespace

std::string PodGroupPath(std::string_view version, std::string_view ns, std::string_view name) {
  return fmt::format("{}/{}/namespaces/{}/podgroups/{}", kGroupPath, version, ns, name);
}

std::string WorkloadPath(std::string_view ns, std::string_view name) {
  return fmt::format("{}/{}/namespaces/{}/workloads/{}", kGroupPath, kWorkloadVersion, ns, name);
}

Result<int> DecodePodGroupMinCount(std::string_view text) {
  int min_count = 0;
  bool has_policy = false;
  Status status =
      DecodeObject(text, "PodGroup", [&](ondemand::object& spec, const Path& path) -> Status {
        return json::ForEachField(
            spec, path,
            [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
              if (key != "schedulingPolicy") return OkStatus();
              has_policy = true;
              return DecodePolicy(field, at, min_count);
            });
      });
  if (status.ok() && !has_policy) status = Error{"spec: no schedulingPolicy"};
  if (!status.ok()) return Error{fmt::format("PodGroup: {}", status.error())};
  return min_count;
}

Result<int> DecodeWorkloadMinCount(std::string_view text, std::string_view pod_group) {
  int min_count = 0;
  bool found = false;
  bool has_groups = false;
  Status status =
      DecodeObject(text, "Workload", [&](ondemand::object& spec, const Path& path) -> Status {
        return json::ForEachField(
            spec, path,
            [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
              if (key != "podGroups") return OkStatus();
              ondemand::array groups;
              bool present = false;
              TOPOSCHED_RETURN_IF_ERROR(json::OpenArray(field, at, groups, present));
              has_groups = present;
              if (!present) return OkStatus();  // null: reported as no podGroups
              return json::ForEachElement(
                  groups, at,
                  [&](size_t, ondemand::value& element, const Path& element_at) -> Status {
                    ondemand::object group;
                    TOPOSCHED_RETURN_IF_ERROR(OpenRequired(element, element_at, group));
                    std::string name;
                    int count = 0;
                    bool has_policy = false;
                    TOPOSCHED_RETURN_IF_ERROR(json::ForEachField(
                        group, element_at,
                        [&](std::string_view k, ondemand::value& v, const Path& v_at) -> Status {
                          if (k == "name") return ReadName(v, v_at, name);
                          if (k != "policy") return OkStatus();
                          has_policy = true;
                          return DecodePolicy(v, v_at, count);
                        }));
                    if (name.empty()) return json::ErrorAt(element_at, "no name");
                    if (!has_policy) return json::ErrorAt(element_at, "no policy");
                    if (name == pod_group) {
                      found = true;
                      min_count = count;
                    }
                    return OkStatus();
                  });
            });
      });
  if (status.ok() && !has_groups) status = Error{"spec: no podGroups"};
  if (status.ok() && !found) {
    status = Error{fmt::format("spec.podGroups has no group \"{}\"", pod_group)};
  }
  if (!status.ok()) return Error{fmt::format("Workload: {}", status.error())};
  return min_count;
}

Result<std::vector<std::string>> DecodeResourceNames(std::string_view text) {
  const simdjson::padded_string padded(text);
  std::vector<std::string> names;
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path;
    ondemand::object object;
    TOPOSCHED_RETURN_IF_ERROR(OpenRequired(root, path, object));
    return json::ForEachField(
        object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key != "resources") return OkStatus();
          return json::ForEachElementOf(
              field, at, [&](size_t, ondemand::value& element, const Path& element_at) -> Status {
                ondemand::object resource;
                TOPOSCHED_RETURN_IF_ERROR(OpenRequired(element, element_at, resource));
                return json::ForEachField(
                    resource, element_at,
                    [&](std::string_view k, ondemand::value& v, const Path& v_at) -> Status {
                      if (k != "name") return OkStatus();
                      names.emplace_back();
                      return ReadName(v, v_at, names.back());
                    });
              });
        });
  });
  if (!status.ok()) return Error{fmt::format("APIResourceList: {}", status.error())};
  return names;
}

std::string SchedulingGroups::PodGroupVersion() const {
  MutexLock lock(mu_);
  return version_;
}

Result<std::string> SchedulingGroups::FindPodGroupVersion() {
  {
    MutexLock lock(mu_);
    if (!version_.empty()) return version_;
  }
  std::vector<std::string> tried;
  for (std::string_view version : kPodGroupVersions) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto response, get_(fmt::format("{}/{}", kGroupPath, version)));
    if (response.status == 404) {
      tried.push_back(fmt::format("{} not served", version));
      continue;
    }
    if (response.status != 200) {
      return Error{
          fmt::format("discovery of {}/{}: HTTP {}", kGroupPath, version, response.status)};
    }
    TOPOSCHED_ASSIGN_OR_RETURN(auto names, DecodeResourceNames(response.body));
    if (std::find(names.begin(), names.end(), "podgroups") == names.end()) {
      tried.push_back(fmt::format("{} has no podgroups", version));
      continue;
    }
    spdlog::info("PodGroups are read as scheduling.k8s.io/{}", version);
    MutexLock lock(mu_);
    version_ = std::string(version);
    return version_;
  }
  return Error{
      fmt::format("the API server serves no PodGroups ({}); upstream gang scheduling needs the "
                  "GenericWorkload feature gate and the scheduling.k8s.io version enabled",
                  fmt::join(tried, ", "))};
}

Result<std::string> SchedulingGroups::GetObject(std::string_view kind, std::string_view path,
                                                std::string_view ns, std::string_view name) {
  const std::string_view resource = kind == "PodGroup" ? "podgroups" : "workloads";
  TOPOSCHED_ASSIGN_OR_RETURN(auto response, get_(path));
  if (response.status == 404) {
    return Error{fmt::format("reading {} {}/{}: not found", kind, ns, name)};
  }
  if (response.status != 200) {
    return Error{fmt::format("reading {} {}/{}: HTTP {}{}", kind, ns, name, response.status,
                             response.status == 403
                                 ? fmt::format(" (RBAC: get {} in scheduling.k8s.io)", resource)
                                 : "")};
  }
  return std::move(response.body);
}

Result<int> SchedulingGroups::PodGroupMinCount(std::string_view ns, std::string_view name) {
  TOPOSCHED_ASSIGN_OR_RETURN(const std::string version, FindPodGroupVersion());
  TOPOSCHED_ASSIGN_OR_RETURN(auto body,
                             GetObject("PodGroup", PodGroupPath(version, ns, name), ns, name));
  auto count = DecodePodGroupMinCount(body);
  if (!count.ok()) return Error{fmt::format("reading {}/{}: {}", ns, name, count.error())};
  return count;
}

Result<int> SchedulingGroups::WorkloadMinCount(std::string_view ns, std::string_view workload,
                                               std::string_view pod_group) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto body,
                             GetObject("Workload", WorkloadPath(ns, workload), ns, workload));
  auto count = DecodeWorkloadMinCount(body, pod_group);
  if (!count.ok()) return Error{fmt::format("reading {}/{}: {}", ns, workload, count.error())};
  return count;
}

}  // namespace toposched::kube
