#include "webhook/count_requests.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/json_reader.h"
#include "base/json_writer.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "dra/offers.h"
#include "kube/decode.h"
#include "kube/kubeconfig.h"

namespace toposched::webhook {
namespace {

namespace ondemand = simdjson::ondemand;
using json::Path;
using topology::Unit;

constexpr std::string_view kRequestName = "neuron";
constexpr std::string_view kAlignedName = "aligned";
constexpr std::string_view kSetName = "set";
constexpr std::string_view kClaimPrefix = "toposched-neuron-";

// The parts of the pod a patch must know the shape of: which lists and maps exist already (a
// JSON Patch `add` to a missing parent fails) and which claim names are taken.
struct PodShape {
  std::string name;
  std::string generate_name;
  bool has_annotations = false;
  bool has_resource_claims = false;
  std::vector<std::string> claim_names;
  std::vector<bool> container_has_claims;  // per spec.containers index
};

struct Review {
  std::string uid;
  std::string ns;
  std::string operation;
  std::string kind;
  std::string group;
  bool dry_run = false;
  std::string object;  // the pod, raw JSON; empty when absent
};

Status ReadKind(ondemand::value& value, const Path& path, Review& review) {
  return json::ForEachFieldOf(value, path,
                              [&](std::string_view key, ondemand::value v, const Path& at) {
                                if (key == "kind") return json::ReadString(v, at, review.kind);
                                if (key == "group") return json::ReadString(v, at, review.group);
                                return OkStatus();
                              });
}

Result<Review> ReadReview(std::string_view body) {
  Review review;
  std::string api_version;
  std::string kind;
  bool has_request = false;
  const simdjson::padded_string padded(body);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) {
    return json::ForEachFieldOfRequired(
        root, Path(), "expected an object",
        [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key == "apiVersion") return json::ReadString(value, at, api_version);
          if (key == "kind") return json::ReadString(value, at, kind);
          if (key != "request") return OkStatus();
          has_request = true;
          return json::ForEachFieldOfRequired(
              value, at, "missing",
              [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                if (k == "uid") return json::ReadString(v, p, review.uid);
                if (k == "namespace") return json::ReadString(v, p, review.ns);
                if (k == "operation") return json::ReadString(v, p, review.operation);
                if (k == "dryRun") return json::ReadBool(v, p, review.dry_run);
                if (k == "kind") return ReadKind(v, p, review);
                if (k != "object") return OkStatus();
                ondemand::object object;
                bool present = false;
                TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(v, p, object, present));
                if (!present) return OkStatus();
                std::string_view raw;
                if (auto error = object.raw_json().get(raw)) return json::JsonErrorAt(p, error);
                review.object.assign(raw);
                return OkStatus();
              });
        });
  });
  if (!status.ok()) return Error{status.error()};
  if (api_version != "admission.k8s.io/v1" || kind != "AdmissionReview") {
    return Error{fmt::format(
        "expected an AdmissionReview of admission.k8s.io/v1, got kind \"{}\" of \"{}\" (the "
        "webhook's admissionReviewVersions must be [v1])",
        kind.substr(0, 40), api_version.substr(0, 40))};
  }
  if (!has_request) return Error{"request: missing"};
  if (review.uid.empty()) return Error{"request.uid: missing"};
  return review;
}

Status ReadContainerClaims(ondemand::value& containers, const Path& path, PodShape& shape) {
  return json::ForEachElementOf(containers, path, [&](size_t, ondemand::value c, const Path& at) {
    bool has_claims = false;
    Status s = json::ForEachFieldOf(
        c, at, [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
          if (key != "resources") return OkStatus();
          return json::ForEachFieldOf(
              v, p, [&](std::string_view k, ondemand::value r, const Path& q) -> Status {
                if (k != "claims") return OkStatus();
                ondemand::array array;
                TOPOSCHED_RETURN_IF_ERROR(json::OpenArray(r, q, array, has_claims));
                return OkStatus();
              });
        });
    shape.container_has_claims.push_back(has_claims);
    return s;
  });
}

Result<PodShape> ReadPodShape(const std::string& object) {
  PodShape shape;
  const simdjson::padded_string padded(object);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) {
    return json::ForEachFieldOfRequired(
        root, Path("request.object"), "expected an object",
        [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key == "metadata") {
            return json::ForEachFieldOf(
                value, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                  if (k == "name") return json::ReadString(v, p, shape.name);
                  if (k == "generateName") return json::ReadString(v, p, shape.generate_name);
                  if (k != "annotations") return OkStatus();
                  ondemand::object annotations;
                  return json::OpenObject(v, p, annotations, shape.has_annotations);
                });
          }
          if (key != "spec") return OkStatus();
          return json::ForEachFieldOf(
              value, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                if (k == "containers") return ReadContainerClaims(v, p, shape);
                if (k != "resourceClaims") return OkStatus();
                ondemand::array claims;
                TOPOSCHED_RETURN_IF_ERROR(json::OpenArray(v, p, claims, shape.has_resource_claims));
                if (!shape.has_resource_claims) return OkStatus();
                return json::ForEachElement(
                    claims, p, [&](size_t, ondemand::value c, const Path& q) {
                      return json::ForEachFieldOf(
                          c, q,
                          [&](std::string_view f, ondemand::value n, const Path& r) -> Status {
                            if (f != "name") return OkStatus();
                            std::string name;
                            TOPOSCHED_RETURN_IF_ERROR(json::ReadString(n, r, name));
                            shape.claim_names.push_back(std::move(name));
                            return OkStatus();
                          });
                    });
              });
        });
  });
  if (!status.ok()) return Error{status.error()};
  return shape;
}

// RFC 6901: '~' and '/' inside one reference token.
std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// A JSON Patch (RFC 6902), one op after another.
class PatchWriter {
 public:
  void Remove(const std::string& path) {
    ops_.push_back(JsonTree{{"op", "remove"}, {"path", path}});
  }
  void Add(const std::string& path, JsonTree value) {
    ops_.push_back(JsonTree{{"op", "add"}, {"path", path}, {"value", std::move(value)}});
  }
  // Empty without an op: Decision::patch then leaves the pod as it is.
  std::string Done() && { return ops_.empty() ? std::string() : WriteJson(ops_); }

 private:
  JsonTree ops_ = JsonTree::array();
};

Decision Refuse(Decision decision, std::string message) {
  decision.allowed = false;
  decision.message = std::move(message);
  decision.patch.clear();
  decision.templates.clear();
  decision.rewrites.clear();
  return decision;
}

// One container's ask, summed over a resource's names, and the names it used.
struct Ask {
  int64_t count = 0;
  std::vector<std::string> limit_keys;    // keys to remove from resources.limits
  std::vector<std::string> request_keys;  // ... and from resources.requests
  std::string asked_as;
};

Ask AskOf(const kube::Container& container, const claims::ResourceSpec& spec) {
  Ask ask;
  ask.count = claims::AsksWithAliases(container, spec, &ask.asked_as);
  for (const auto& [key, value] : container.limits) {
    if (spec.Matches(key)) ask.limit_keys.push_back(key);
  }
  for (const auto& [key, value] : container.requests) {
    if (spec.Matches(key)) ask.request_keys.push_back(key);
  }
  return ask;
}

// Why the pod is refused when an init container asks for a count (nullopt: none does).
std::optional<std::string> InitContainerRefusal(const kube::Pod& pod,
                                                const std::vector<claims::ResourceSpec>& specs) {
  for (const kube::Container& init : pod.init_containers) {
    for (const claims::ResourceSpec& spec : specs) {
      const Ask ask = AskOf(init, spec);
      if (ask.count <= 0) continue;
      return fmt::format(
          "init container \"{}\" asks for {}: {}; toposched serves count requests through DRA for "
          "app containers only (an init container's claim would hold its devices for the pod's "
          "whole life). Ask from an app container, or keep the pod on device-plugin nodes: remove "
          "the label {} from it or its namespace",
          init.name, ask.asked_as, ask.count, claims::kLabelNeuronDra);
    }
  }
  return std::nullopt;
}

// The pod-level part of the patch: the new spec.resourceClaims entries and the annotation that
// records the rewrite, each added to the list or map the pod has, or as a new one.
void AddPodEntries(const PodShape& shape, std::vector<JsonTree> new_claims,
                   const std::string& annotation, PatchWriter& patch) {
  if (shape.has_resource_claims) {
    for (JsonTree& claim : new_claims) patch.Add("/spec/resourceClaims/-", std::move(claim));
  } else {
    patch.Add("/spec/resourceClaims", JsonTree(std::move(new_claims)));
  }
  const std::string annotation_key(claims::kAnnotationCountRequests);
  if (shape.has_annotations) {
    patch.Add("/metadata/annotations/" + PointerToken(annotation_key), annotation);
  } else {
    patch.Add("/metadata/annotations", {{annotation_key, annotation}});
  }
}

// A selector list of one CEL expression asking the device's `attribute` to be `count`. The
// attribute may be missing (another driver's device, an older plugin): "in" first, so a selector
// never fails with a runtime error, which would fail the allocation on the node.
JsonTree CountSelectors(std::string_view attribute, int64_t count) {
  const std::string expression =
      fmt::format(R"("{0}" in device.attributes["{1}"] && device.attributes["{1}"].{0} == {2})",
                  attribute, dra::kOurAttributeDomain, count);
  return JsonTree::array({JsonTree{{"cel", {{"expression", expression}}}}});
}

// The template's spec.spec.devices: one request named "neuron" for `size`.
JsonTree ClaimDevices(const ClaimSize& size) {
  JsonTree request = {{"name", kRequestName}};
  if (size.unit == Unit::kCore) {
    request["exactly"] = {{"deviceClassName", dra::kCoreRangeClass},
                          {"allocationMode", "ExactCount"},
                          {"count", 1},
                          {"selectors", CountSelectors("coreCount", size.count)}};
    return {{"requests", JsonTree::array({std::move(request)})}};
  }
  if (size.count == 1) {  // any one whole device is a legal set
    request["exactly"] = {{"deviceClassName", dra::kWholeDeviceClass},
                          {"allocationMode", "ExactCount"},
                          {"count", 1}};
    return {{"requests", JsonTree::array({std::move(request)})}};
  }
  // Aligned whole devices first (the constraint keeps them in one group), else one device set.
  const JsonTree aligned = {{"name", kAlignedName},
                            {"deviceClassName", dra::kWholeDeviceClass},
                            {"allocationMode", "ExactCount"},
                            {"count", size.count}};
  const JsonTree set = {{"name", kSetName},
                        {"deviceClassName", dra::kDeviceSetClass},
                        {"allocationMode", "ExactCount"},
                        {"count", 1},
                        {"selectors", CountSelectors("deviceCount", size.count)}};
  request["firstAvailable"] = JsonTree::array({aligned, set});
  const JsonTree constraint = {
      {"requests", JsonTree::array({fmt::format("{}/{}", kRequestName, kAlignedName)})},
      {"matchAttribute", dra::GroupAttribute(static_cast<int>(size.count))}};
  return {{"requests", JsonTree::array({std::move(request)})},
          {"constraints", JsonTree::array({constraint})}};
}

}  // namespace

std::string TemplateName(const ClaimSize& size) {
  return fmt::format("toposched-neuron-{}-{}-v1", size.unit == Unit::kDevice ? "devices" : "cores",
                     size.count);
}

std::string TemplateJson(std::string_view ns, const ClaimSize& size) {
  const JsonTree metadata = {
      {"name", TemplateName(size)},
      {"namespace", ns},
      {"labels", {{"app.kubernetes.io/managed-by", "toposched-admission-webhook"}}}};
  return WriteJson({{"apiVersion", "resource.k8s.io/v1"},
                    {"kind", "ResourceClaimTemplate"},
                    {"metadata", metadata},
                    {"spec", {{"spec", {{"devices", ClaimDevices(size)}}}}}});
}

Result<Decision> Decide(std::string_view admission_review) {
  TOPOSCHED_ASSIGN_OR_RETURN(Review review, ReadReview(admission_review));
  Decision decision;
  decision.uid = review.uid;
  decision.ns = review.ns;
  decision.dry_run = review.dry_run;
  if (review.operation != "CREATE" || review.kind != "Pod" || !review.group.empty()) {
    return decision;  // not ours to change: the configuration sends pod creations only
  }
  if (review.object.empty()) return Error{"request.object: missing for a CREATE"};
  // A pod we cannot read is refused with the reason (the API server's validation would refuse
  // most of them after us; a JSON Patch against a shape we misread could do harm).
  Result<PodShape> read = ReadPodShape(review.object);
  if (!read.ok()) return Refuse(std::move(decision), "the pod cannot be read: " + read.error());
  PodShape& shape = *read;
  decision.pod = shape.name.empty() ? shape.generate_name + "*" : shape.name;
  Result<kube::Pod> pod = kube::DecodePod(simdjson::padded_string(review.object));
  if (!pod.ok()) {
    return Refuse(std::move(decision), "the pod cannot be read: request.object: " + pod.error());
  }

  const claims::ResourceSet resources;
  const std::vector<claims::ResourceSpec> specs = resources.Specs();
  if (std::optional<std::string> refusal = InitContainerRefusal(*pod, specs)) {
    return Refuse(std::move(decision), std::move(*refusal));
  }

  PatchWriter patch;
  std::vector<JsonTree> new_claims;  // the pod.spec.resourceClaims entries
  std::string annotation;
  if (shape.container_has_claims.size() != pod->containers.size()) {
    return Refuse(std::move(decision),
                  "the pod cannot be read: spec.containers read inconsistently");
  }
  for (size_t i = 0; i < pod->containers.size(); ++i) {
    const kube::Container& container = pod->containers[i];
    std::vector<std::pair<const claims::ResourceSpec*, Ask>> asks;
    for (const claims::ResourceSpec& spec : specs) {
      Ask ask = AskOf(container, spec);
      // Zero or negative (the API server's validation, after us, refuses the latter): unchanged.
      if (ask.count > 0) asks.emplace_back(&spec, std::move(ask));
    }
    if (asks.empty()) continue;
    if (asks.size() > 1) {
      return Refuse(std::move(decision),
                    fmt::format("container \"{}\" asks for {} and {}: one DRA claim holds devices "
                                "or cores, not both; ask for one of them",
                                container.name, asks[0].second.asked_as, asks[1].second.asked_as));
    }
    const auto& [spec, ask] = asks.front();
    if (ask.count > kMaxCount) {
      return Refuse(std::move(decision),
                    fmt::format("container \"{}\" asks for {}: {}, more than any Neuron node has",
                                container.name, ask.asked_as, ask.count));
    }
    const ClaimSize size{spec->unit, ask.count};
    const std::string claim = fmt::format("{}{}", kClaimPrefix, i);
    if (std::find(shape.claim_names.begin(), shape.claim_names.end(), claim) !=
        shape.claim_names.end()) {
      return Refuse(std::move(decision),
                    fmt::format("the pod already has a resource claim named \"{}\", the name "
                                "toposched gives container \"{}\"'s claim; rename yours",
                                claim, container.name));
    }
    const std::string base = fmt::format("/spec/containers/{}/resources", i);
    for (const std::string& key : ask.limit_keys)
      patch.Remove(base + "/limits/" + PointerToken(key));
    for (const std::string& key : ask.request_keys) {
      patch.Remove(base + "/requests/" + PointerToken(key));
    }
    const JsonTree claim_ref = {{"name", claim}};
    if (shape.container_has_claims[i]) {
      patch.Add(base + "/claims/-", claim_ref);
    } else {
      patch.Add(base + "/claims", JsonTree::array({claim_ref}));
    }
    new_claims.push_back(
        JsonTree{{"name", claim}, {"resourceClaimTemplateName", TemplateName(size)}});
    if (std::find(decision.templates.begin(), decision.templates.end(), size) ==
        decision.templates.end()) {
      decision.templates.push_back(size);
    }
    if (!annotation.empty()) annotation += ',';
    annotation += fmt::format("{}={}:{}", container.name, ask.asked_as, ask.count);
    decision.rewrites.push_back(fmt::format("{}: {} {} -> claim {} from {}", container.name,
                                            ask.asked_as, ask.count, claim, TemplateName(size)));
  }
  if (new_claims.empty()) return decision;
  AddPodEntries(shape, std::move(new_claims), annotation, patch);
  decision.patch = std::move(patch).Done();
  return decision;
}

std::string ResponseJson(const Decision& decision) {
  JsonTree response = {{"uid", decision.uid}, {"allowed", decision.allowed}};
  if (!decision.allowed) {
    response["status"] = {
        {"code", 422}, {"reason", "Invalid"}, {"message", "toposched: " + decision.message}};
  } else if (!decision.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = kube::EncodeBase64(decision.patch);
    JsonTree warnings = JsonTree::array();
    for (const std::string& rewrite : decision.rewrites) {
      warnings.push_back("toposched: DRA serves " + rewrite);
    }
    response["warnings"] = std::move(warnings);
  }
  return WriteJson({{"apiVersion", "admission.k8s.io/v1"},
                    {"kind", "AdmissionReview"},
                    {"response", std::move(response)}});
}

}  // namespace toposched::webhook
