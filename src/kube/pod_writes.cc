// The writes toposched makes to pods (Binding, annotation merge-patch, Events) and to its nodes'
// labels (see client.h).
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/json_reader.h"
#include "base/json_writer.h"
#include "kube/client.h"
#include "kube/decode.h"
#include "kube/timestamp.h"

namespace toposched::kube {
namespace {

namespace ondemand = simdjson::ondemand;

// The API server rejects longer event messages in events.k8s.io/v1; stay under it everywhere.
constexpr size_t kMaxEventMessage = 1024;

std::string PodPath(std::string_view ns, std::string_view name) {
  return "/api/v1/namespaces/" + EscapeUrlComponent(ns) + "/pods/" + EscapeUrlComponent(name);
}

// A merge patch's map: a value sets the key, nullopt writes null, which removes it.
JsonTree MergePatchMap(const std::map<std::string, std::optional<std::string>>& changes) {
  JsonTree map = JsonTree::object();
  for (const auto& [key, value] : changes) map[key] = value ? JsonTree(*value) : JsonTree(nullptr);
  return map;
}

// Cuts at a UTF-8 character boundary, so a long text does not end in half a character.
std::string_view TruncateUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

Status HttpFailure(std::string_view what, const HttpResponse& response) {
  std::string kind;
  if (response.status == 409) {
    kind = "conflict ";
  } else if (response.status == 404) {
    kind = "not found ";
  } else if (response.status == 401 || response.status == 403) {
    kind = "not allowed ";
  }
  return Error{fmt::format("{}: {}(HTTP {}): {}", what, kind, response.status,
                           StatusMessage(response.body))};
}

}  // namespace

std::string Rfc3339Now() {
  return FormatRfc3339(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()));
}

std::string StatusMessage(std::string_view body) {
  std::string message;
  const simdjson::padded_string padded(body);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const json::Path path;
    return json::ForEachFieldOf(
        root, path,
        [&](std::string_view key, ondemand::value& field, const json::Path& at) -> Status {
          if (key == "message") return json::ReadString(field, at, message);
          return OkStatus();
        });
  });
  if (status.ok() && !message.empty()) return message;
  constexpr size_t kMaxShown = 200;
  std::string shown(TruncateUtf8(body, kMaxShown));
  if (shown.size() < body.size()) shown += "...";
  return shown.empty() ? "(empty body)" : shown;
}

WriteResult ClassifyWrite(std::string_view what, const Result<HttpResponse>& response,
                          bool unsent) {
  WriteResult result;
  if (!response.ok()) {
    result.outcome = unsent ? WriteOutcome::kNotApplied : WriteOutcome::kUnknown;
    result.error = fmt::format("{}: {}{}", what, response.error(),
                               unsent ? " (not sent)" : " (its outcome is unknown)");
    return result;
  }
  result.http_status = response->status;
  if (response->status >= 200 && response->status < 300) return result;
  // A 5xx may come from a proxy or an API server that applied the write and failed after (a 504
  // after the write reached etcd); a 408 is the server giving up while it may still apply it.
  const bool unknown = response->status >= 500 || response->status == 408;
  result.outcome = unknown ? WriteOutcome::kUnknown : WriteOutcome::kNotApplied;
  result.error = HttpFailure(what, *response).error();
  if (unknown) result.error += " (its outcome is unknown)";
  return result;
}

WriteResult WriteBinding(ApiClient& client, std::string_view ns, std::string_view name,
                         std::string_view uid, std::string_view node,
                         const std::map<std::string, std::string>& annotations,
                         const WriteFence& fence) {
  JsonTree metadata = {{"name", name}, {"namespace", ns}};
  // The uid is a precondition: the server refuses the binding if the pod was re-created.
  if (!uid.empty()) metadata["uid"] = uid;
  if (!annotations.empty()) metadata["annotations"] = annotations;
  const JsonTree binding = {{"apiVersion", "v1"},
                            {"kind", "Binding"},
                            {"metadata", std::move(metadata)},
                            {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  const std::string body = WriteJson(binding);
  const std::string what = fmt::format("binding pod {}/{} to node {}", ns, name, node);
  std::string path = PodPath(ns, name) + "/binding";
  std::chrono::milliseconds budget{0};
  if (fence) {
    Result<std::chrono::milliseconds> allowed = fence();
    if (!allowed.ok()) {
      WriteResult refused;
      refused.outcome = WriteOutcome::kNotApplied;
      refused.error = fmt::format("{}: not sent: {}", what, allowed.error());
      return refused;
    }
    // The API server gives up at the same time (kube-apiserver reads ?timeout= as the request's
    // deadline), so a write held up on its way does not land after the client gave up.
    budget = std::max(*allowed, std::chrono::milliseconds(1));
    path += fmt::format("?timeout={}ms", budget.count());
  }
  bool unsent = false;
  Result<HttpResponse> response = client.Post(path, body, "application/json", budget, &unsent);
  return ClassifyWrite(what, response, unsent);
}

Status BindPod(ApiClient& client, std::string_view ns, std::string_view name, std::string_view uid,
               std::string_view node, const std::map<std::string, std::string>& annotations,
               const WriteFence& fence) {
  return WriteBinding(client, ns, name, uid, node, annotations, fence).ToStatus();
}

Result<std::optional<Pod>> GetPod(ApiClient& client, std::string_view ns, std::string_view name) {
  const std::string what = fmt::format("reading pod {}/{}", ns, name);
  Result<HttpResponse> response = client.Get(PodPath(ns, name));
  if (!response.ok()) return Error{what + ": " + response.error()};
  if (response->status == 404) return std::optional<Pod>();
  if (response->status < 200 || response->status >= 300) {
    return Error{HttpFailure(what, *response).error()};
  }
  auto pod = DecodePod(response->body);
  if (!pod.ok()) return Error{what + ": " + pod.error()};
  return std::optional<Pod>(std::move(pod).value());
}

Status PatchPodAnnotations(ApiClient& client, std::string_view ns, std::string_view name,
                           const std::map<std::string, std::optional<std::string>>& annotations) {
  const std::string patch =
      WriteJson({{"metadata", {{"annotations", MergePatchMap(annotations)}}}});
  const std::string what = fmt::format("patching annotations of pod {}/{}", ns, name);
  Result<HttpResponse> response =
      client.Patch(PodPath(ns, name), patch, "application/merge-patch+json");
  if (!response.ok()) return Error{what + ": " + response.error()};
  if (response->status >= 200 && response->status < 300) return OkStatus();
  return HttpFailure(what, *response);
}

namespace {

// One merge-patch of a Node's metadata.<field> (labels or annotations).
Status PatchNodeMetadata(ApiClient& client, std::string_view node, std::string_view field,
                         const std::map<std::string, std::optional<std::string>>& changes,
                         std::string_view what) {
  const std::string patch = WriteJson({{"metadata", {{field, MergePatchMap(changes)}}}});
  Result<HttpResponse> response = client.Patch("/api/v1/nodes/" + EscapeUrlComponent(node), patch,
                                               "application/merge-patch+json");
  if (!response.ok()) return Error{std::string(what) + ": " + response.error()};
  if (response->status >= 200 && response->status < 300) return OkStatus();
  return HttpFailure(std::string(what), *response);
}

}  // namespace

Status PatchNodeLabel(ApiClient& client, std::string_view node, std::string_view key,
                      const std::optional<std::string>& value) {
  return PatchNodeMetadata(client, node, "labels", {{std::string(key), value}},
                           fmt::format("labelling node {} {}", node, key));
}

Status PatchNodeAnnotations(ApiClient& client, std::string_view node,
                            const std::map<std::string, std::optional<std::string>>& annotations) {
  std::vector<std::string> keys;
  keys.reserve(annotations.size());
  for (const auto& [key, value] : annotations) keys.push_back(key);
  return PatchNodeMetadata(client, node, "annotations", annotations,
                           fmt::format("annotating node {} {}", node, fmt::join(keys, ", ")));
}

Status SetPodCondition(ApiClient& client, const Pod& pod, const PodCondition& condition) {
  // A strategic merge patch of status.conditions merges by type: other conditions stay.
  const JsonTree entry = {{"type", condition.type},
                          {"status", condition.status},
                          {"reason", condition.reason},
                          {"message", condition.message},
                          {"lastTransitionTime", Rfc3339Now()}};
  const std::string patch = WriteJson(
      {{"metadata", {{"uid", pod.uid}}}, {"status", {{"conditions", JsonTree::array({entry})}}}});
  const std::string what =
      fmt::format("setting condition {} of pod {}/{}", condition.type, pod.ns, pod.name);
  auto response =
      client.Patch(fmt::format("/api/v1/namespaces/{}/pods/{}/status", EscapeUrlComponent(pod.ns),
                               EscapeUrlComponent(pod.name)),
                   patch, "application/strategic-merge-patch+json");
  if (!response.ok()) return Error{what + ": " + response.error()};
  if (response->status >= 200 && response->status < 300) return OkStatus();
  return HttpFailure(what, *response);
}

Status EvictPod(ApiClient& client, const Pod& pod) {
  const std::string body = WriteJson({{"apiVersion", "policy/v1"},
                                      {"kind", "Eviction"},
                                      {"metadata", {{"name", pod.name}, {"namespace", pod.ns}}},
                                      {"deleteOptions", {{"preconditions", {{"uid", pod.uid}}}}}});
  const std::string what = fmt::format("evicting pod {}/{}", pod.ns, pod.name);
  auto response = client.Post(fmt::format("/api/v1/namespaces/{}/pods/{}/eviction",
                                          EscapeUrlComponent(pod.ns), EscapeUrlComponent(pod.name)),
                              body);
  if (!response.ok()) return Error{what + ": " + response.error()};
  // 404: gone already; 409: a pod of that name with another uid (this one is gone).
  if ((response->status >= 200 && response->status < 300) || response->status == 404 ||
      response->status == 409) {
    return OkStatus();
  }
  if (response->status == 429) {
    return Error{fmt::format("{}: a PodDisruptionBudget does not allow it now ({})", what,
                             StatusMessage(response->body))};
  }
  return HttpFailure(what, *response);
}

namespace {

// A core/v1 Event about `pod`, seen once now.
JsonTree EventTree(const Pod& pod, std::string_view type, std::string_view reason,
                   std::string_view message, std::string_view component) {
  // client-go names events <object>.<hex nanoseconds> so repeated events do not collide.
  const std::string event_name = fmt::format("{}.{:x}", pod.name, static_cast<uint64_t>(WallNs()));
  const std::string timestamp = Rfc3339Now();
  JsonTree involved = {
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", pod.ns}, {"name", pod.name}};
  if (!pod.uid.empty()) involved["uid"] = pod.uid;
  if (!pod.resource_version.empty()) involved["resourceVersion"] = pod.resource_version;
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", event_name}, {"namespace", pod.ns}}},
          {"involvedObject", std::move(involved)},
          {"reason", reason},
          {"message", TruncateUtf8(message, kMaxEventMessage)},
          {"type", type},
          {"source", {{"component", component}}},
          {"reportingComponent", component},
          {"firstTimestamp", timestamp},
          {"lastTimestamp", timestamp},
          {"count", 1}};
}

}  // namespace

Status PostPodEvent(ApiClient& client, const Pod& pod, std::string_view type,
                    std::string_view reason, std::string_view message, std::string_view component) {
  if (type != "Normal" && type != "Warning") {
    return Error{fmt::format("event type must be Normal or Warning, not \"{}\"", type)};
  }
  const std::string body = WriteJson(EventTree(pod, type, reason, message, component));
  const std::string what = fmt::format("posting event {} for pod {}/{}", reason, pod.ns, pod.name);
  Result<HttpResponse> response =
      client.Post("/api/v1/namespaces/" + EscapeUrlComponent(pod.ns) + "/events", body);
  if (!response.ok()) return Error{what + ": " + response.error()};
  if (response->status >= 200 && response->status < 300) return OkStatus();
  return HttpFailure(what, *response);
}

}  // namespace toposched::kube
