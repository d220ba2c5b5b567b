#include "kube/mpijob.h"

#include <fmt/format.h>

#include "base/json_reader.h"

namespace toposched::kube {

namespace ondemand = simdjson::ondemand;
using json::Path;

std::string MpiJobPath(std::string_view ns, std::string_view name) {
  return fmt::format("/apis/kubeflow.org/v2beta1/namespaces/{}/mpijobs/{}", ns, name);
}

namespace {

// Opens the object at `value`; absent (null) is an error naming `path`.
Status OpenRequired(ondemand::value& value, const Path& path, ondemand::object& object) {
  bool present = false;
  TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(value, path, object, present));
  if (!present) return json::ErrorAt(path, "expected an object");
  return OkStatus();
}

}  // namespace

Result<int> DecodeMpiJobWorkers(std::string_view text) {
  const simdjson::padded_string padded(text);
  int workers = 1;
  bool has_worker = false;
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path;
    ondemand::object object;
    TOPOSCHED_RETURN_IF_ERROR(OpenRequired(root, path, object));
    return json::ForEachField(
        object, path,
        [&](std::string_view key, ondemand::value& spec, const Path& spec_at) -> Status {
          if (key != "spec") return OkStatus();
          ondemand::object spec_object;
          TOPOSCHED_RETURN_IF_ERROR(OpenRequired(spec, spec_at, spec_object));
          return json::ForEachField(
              spec_object, spec_at,
              [&](std::string_view k, ondemand::value& rs, const Path& rs_at) -> Status {
                if (k != "mpiReplicaSpecs") return OkStatus();
                ondemand::object replica_specs;
                TOPOSCHED_RETURN_IF_ERROR(OpenRequired(rs, rs_at, replica_specs));
                return json::ForEachField(
                    replica_specs, rs_at,
                    [&](std::string_view role, ondemand::value& worker,
                        const Path& worker_at) -> Status {
                      if (role != "Worker") return OkStatus();
                      has_worker = true;
                      ondemand::object worker_object;
                      TOPOSCHED_RETURN_IF_ERROR(OpenRequired(worker, worker_at, worker_object));
                      return json::ForEachField(
                          worker_object, worker_at,
                          [&](std::string_view f, ondemand::value& replicas,
                              const Path& at) -> Status {
                            if (f != "replicas") return OkStatus();
                            int64_t n = 0;
                            TOPOSCHED_RETURN_IF_ERROR(json::ReadInt64(replicas, at, n));
                            if (n < 1 || n > 4096) {
                              return json::ErrorAt(at, "expected 1..4096 workers");
                            }
                            workers = static_cast<int>(n);
                            return OkStatus();
                          });
                    });
              });
        });
  });
  if (!status.ok()) return Error{fmt::format("MPIJob: {}", status.error())};
  if (!has_worker) return Error{"MPIJob: spec.mpiReplicaSpecs has no Worker"};
  return workers;
}

}  // namespace toposched::kube
