// Decoders from Kubernetes API JSON to the typed views in kube/objects.h, with simdjson On-Demand.
//
// Input is untrusted: every failure is a Result error naming the JSON path of the bad value (e.g.
// "spec.containers[1].resources.requests: expected an object, got a string"); nothing throws.
// Missing or null fields decode as empty, because the scheduler's cached pods omit kind and
// apiVersion and the API omits empty fields. Only the fields objects.h holds are read; the rest
// (images, conditions, managedFields, ...) is skipped without being materialised. Only extended
// resources (names with a '/') are kept in ResourceCounts; cpu, memory and the like are skipped.
//
// Document-level decoders take a simdjson::padded_string (no copy: use it for large lists) or any
// text (copied into padded memory first). They share one parser per thread, so they are safe to
// call from any number of threads.
#ifndef TOPOSCHED_KUBE_DECODE_H_
#define TOPOSCHED_KUBE_DECODE_H_

#include <simdjson.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/result.h"
#include "kube/objects.h"

namespace toposched::kube {

Result<Pod> DecodePod(const simdjson::padded_string& json);
Result<Node> DecodeNode(const simdjson::padded_string& json);
// PodList / NodeList: items plus metadata.resourceVersion and metadata.continue.
Result<ObjectList<Pod>> DecodePodList(const simdjson::padded_string& json);
Result<ObjectList<Node>> DecodeNodeList(const simdjson::padded_string& json);
// One watch event ({"type":...,"object":...}). ERROR events fill error_code and error_message
// from the Status object; BOOKMARK events fill resource_version; the others fill object and
// resource_version (the object's).
Result<WatchEvent<Pod>> DecodePodWatchEvent(const simdjson::padded_string& line);
Result<WatchEvent<Node>> DecodeNodeWatchEvent(const simdjson::padded_string& line);

// Any other text (std::string_view, std::string, a literal) is copied into padded memory first.
template <typename Text>
concept UnpaddedJsonText = std::is_convertible_v<const Text&, std::string_view> &&
    !std::is_same_v<Text, simdjson::padded_string>;

template <UnpaddedJsonText Text>
Result<Pod> DecodePod(const Text& json) {
  return DecodePod(simdjson::padded_string(std::string_view(json)));
}
template <UnpaddedJsonText Text>
Result<Node> DecodeNode(const Text& json) {
  return DecodeNode(simdjson::padded_string(std::string_view(json)));
}
template <UnpaddedJsonText Text>
Result<ObjectList<Pod>> DecodePodList(const Text& json) {
  return DecodePodList(simdjson::padded_string(std::string_view(json)));
}
template <UnpaddedJsonText Text>
Result<ObjectList<Node>> DecodeNodeList(const Text& json) {
  return DecodeNodeList(simdjson::padded_string(std::string_view(json)));
}
template <UnpaddedJsonText Text>
Result<WatchEvent<Pod>> DecodePodWatchEvent(const Text& line) {
  return DecodePodWatchEvent(simdjson::padded_string(std::string_view(line)));
}
template <UnpaddedJsonText Text>
Result<WatchEvent<Node>> DecodeNodeWatchEvent(const Text& line) {
  return DecodeNodeWatchEvent(simdjson::padded_string(std::string_view(line)));
}

// Value-level forms for objects embedded in a larger payload the caller is iterating (e.g. the
// extender's ExtenderArgs). `where` prefixes error paths (e.g. "pod" gives "pod.spec...").
// The value is consumed. A Pod or Node must be an object; null is an error.
Result<Pod> DecodePod(simdjson::ondemand::value& value, std::string_view where = {});
Result<Node> DecodeNode(simdjson::ondemand::value& value, std::string_view where = {});
// A NodeList object ({"metadata":...,"items":[...]}); null gives an empty list.
Result<std::vector<Node>> DecodeNodeListItems(simdjson::ondemand::value& value,
                                              std::string_view where = {});

// The instance type a node's labels declare: node.kubernetes.io/instance-type, else the older
// beta.kubernetes.io/instance-type, else empty.
// The node labels toposched reads (the instance-type labels, and every key under
// toposched.io/); decoding keeps only these, since a filter with full Node objects decodes
// 5,000 label maps per call.
bool IsNodeLabelWeRead(std::string_view key);
// Keys under toposched.io/ (the node annotations toposched reads).
bool IsOwnKey(std::string_view key);
// The pod labels toposched reads: the keys under training.kubeflow.org/ (the MPI operator's),
// leaderworkerset.sigs.k8s.io/ and toposched.io/, which name a pod's gang (claims/gang.h).
bool IsPodLabelWeRead(std::string_view key);
std::string InstanceTypeFromLabels(const std::map<std::string, std::string, std::less<>>& labels);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_DECODE_H_
