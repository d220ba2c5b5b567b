#include "webhook/count_requests.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "base/json_escape.h"
#include "base/json_reader.h"
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

class PatchWriter {
 public:
  void Remove(const std::string& path) { Op("remove", path, ""); }
  void Add(const std::string& path, const std::string& value_json) { Op("add", path, value_json); }
  std::string Done() && { return ops_ == 0 ? std::string() : std::move(out_) + "]"; }

 private:
  void Op(std::string_view op, const std::string& path, const std::string& value_json) {
    out_ += ops_++ == 0 ? "[" : ",";
    out_ += "{\"op\":\"";
    out_ += op;
    out_ += "\",\"path\":";
    AppendJsonQuoted(out_, path);
    if (!value_json.empty()) {
      out_ += ",\"value\":";
      out_ += value_json;
    }
    out_ += '}';
  }
  std::string out_;
  int ops_ = 0;
};

std::string Quoted(std::string_view text) {
  std::string out;
  AppendJsonQuoted(out, text);
  return out;
}

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

}  // namespace

std::string TemplateName(const ClaimSize& size) {
  return fmt::format("toposched-neuron-{}-{}-v1", size.unit == Unit::kDevice ? "devices" : "cores",
                     size.count);
}

std::string TemplateJson(std::string_view ns, const ClaimSize& size) {
  std::string out = R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate",)";
  out += R"("metadata":{"name":)" + Quoted(TemplateName(size)) + R"(,"namespace":)" + Quoted(ns);
  out += R"(,"labels":{"app.kubernetes.io/managed-by":"toposched-admission-webhook"}},)";
  out += R"("spec":{"spec":{"devices":{"requests":[)";
  const std::string request_name = Quoted(kRequestName);
  // The attribute may be missing (another driver's device, an older plugin): "in" first, so a
  // selector never fails with a runtime error, which would fail the allocation on the node.
  auto selector = [](std::string_view attribute, int64_t count) {
    const std::string expression =
        fmt::format(R"("{0}" in device.attributes["{1}"] && device.attributes["{1}"].{0} == {2})",
                    attribute, dra::kOurAttributeDomain, count);
    return R"("selectors":[{"cel":{"expression":)" + Quoted(expression) + "}}]";
  };
  if (size.unit == Unit::kCore) {
    out += R"({"name":)" + request_name + R"(,"exactly":{"deviceClassName":)" +
           Quoted(dra::kCoreRangeClass) + R"(,"allocationMode":"ExactCount","count":1,)" +
           selector("coreCount", size.count) + "}}]}}}}";
    return out;
  }
  if (size.count == 1) {  // any one whole device is a legal set
    out += R"({"name":)" + request_name + R"(,"exactly":{"deviceClassName":)" +
           Quoted(dra::kWholeDeviceClass) + R"(,"allocationMode":"ExactCount","count":1}}]}}}})";
    return out;
  }
  out += R"({"name":)" + request_name + R"(,"firstAvailable":[)";
  out += R"({"name":)" + Quoted(kAlignedName) + R"(,"deviceClassName":)" +
         Quoted(dra::kWholeDeviceClass) +
         fmt::format(R"(,"allocationMode":"ExactCount","count":{}}},)", size.count);
  out += R"({"name":)" + Quoted(kSetName) + R"(,"deviceClassName":)" +
         Quoted(dra::kDeviceSetClass) + R"(,"allocationMode":"ExactCount","count":1,)" +
         selector("deviceCount", size.count) + "}]}],";
  out += R"("constraints":[{"requests":[)" +
         Quoted(fmt::format("{}/{}", kRequestName, kAlignedName)) + R"(],"matchAttribute":)" +
         Quoted(dra::GroupAttribute(static_cast<int>(size.count))) + "}]}}}}";
  return out;
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
  for (const kube::Container& init : pod->init_containers) {
    for (const claims::ResourceSpec& spec : specs) {
      const Ask ask = AskOf(init, spec);
      if (ask.count <= 0) continue;
      return Refuse(std::move(decision),
                    fmt::format("init container \"{}\" asks for {}: {}; toposched serves count "
                                "requests through DRA for app containers only (an init "
                                "container's claim would hold its devices for the pod's whole "
                                "life). Ask from an app container, or keep the pod on "
                                "device-plugin nodes: remove the label {} from it or its namespace",
                                init.name, ask.asked_as, ask.count, claims::kLabelNeuronDra));
    }
  }

  PatchWriter patch;
  std::vector<std::string> new_claims;  // JSON of the pod.spec.resourceClaims entries
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
    const std::string claim_ref = R"({"name":)" + Quoted(claim) + "}";
    if (shape.container_has_claims[i]) {
      patch.Add(base + "/claims/-", claim_ref);
    } else {
      patch.Add(base + "/claims", "[" + claim_ref + "]");
    }
    new_claims.push_back(R"({"name":)" + Quoted(claim) + R"(,"resourceClaimTemplateName":)" +
                         Quoted(TemplateName(size)) + "}");
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
  if (shape.has_resource_claims) {
    for (const std::string& c : new_claims) patch.Add("/spec/resourceClaims/-", c);
  } else {
    std::string list = "[";
    for (size_t i = 0; i < new_claims.size(); ++i) list += (i ? "," : "") + new_claims[i];
    patch.Add("/spec/resourceClaims", list + "]");
  }
  const std::string annotation_key(claims::kAnnotationCountRequests);
  if (shape.has_annotations) {
    patch.Add("/metadata/annotations/" + PointerToken(annotation_key), Quoted(annotation));
  } else {
    patch.Add("/metadata/annotations",
              "{" + Quoted(annotation_key) + ":" + Quoted(annotation) + "}");
  }
  decision.patch = std::move(patch).Done();
  return decision;
}

std::string ResponseJson(const Decision& decision) {
  std::string out = R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{)";
  out += R"("uid":)" + Quoted(decision.uid);
  if (!decision.allowed) {
    out += R"(,"allowed":false,"status":{"code":422,"reason":"Invalid","message":)" +
           Quoted("toposched: " + decision.message) + "}}}";
    return out;
  }
  out += R"(,"allowed":true)";
  if (!decision.patch.empty()) {
    out += R"(,"patchType":"JSONPatch","patch":)" + Quoted(kube::EncodeBase64(decision.patch));
    out += R"(,"warnings":[)";
    for (size_t i = 0; i < decision.rewrites.size(); ++i) {
      out += (i ? "," : "") + Quoted("toposched: DRA serves " + decision.rewrites[i]);
    }
    out += "]";
  }
  out += "}}";
  return out;
}

}  // namespace toposched::webhook
