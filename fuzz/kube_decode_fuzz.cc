// libFuzzer target for the Kubernetes JSON decoders (kube/decode.h): any input must give a value
// or an error, never a crash, a hang or a sanitizer report.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/decode.h"

namespace {

using namespace toposched::kube;  // NOLINT(google-build-using-namespace): a fuzz harness

void CheckCounts(const ResourceCounts& counts) {
  for (const auto& [name, count] : counts) {
    if (count < 0 || name.find('/') == std::string::npos) std::abort();
  }
}

void CheckPod(const Pod& pod) {
  for (const Container& container : pod.containers) {
    CheckCounts(container.requests);
    CheckCounts(container.limits);
    if (container.sidecar) std::abort();  // only init containers can be sidecars
  }
  for (const Container& container : pod.init_containers) {
    CheckCounts(container.requests);
    CheckCounts(container.limits);
  }
}

void CheckNode(const Node& node) {
  CheckCounts(node.capacity);
  CheckCounts(node.allocatable);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const simdjson::padded_string padded(text);

  if (auto pod = DecodePod(padded); pod.ok()) CheckPod(*pod);
  if (auto node = DecodeNode(padded); node.ok()) CheckNode(*node);
  if (auto pods = DecodePodList(padded); pods.ok()) {
    for (const Pod& pod : pods->items) CheckPod(pod);
  }
  if (auto nodes = DecodeNodeList(padded); nodes.ok()) {
    for (const Node& node : nodes->items) CheckNode(node);
  }
  if (auto event = DecodePodWatchEvent(padded); event.ok()) CheckPod(event->object);
  if (auto event = DecodeNodeWatchEvent(padded); event.ok()) CheckNode(event->object);

  // The value-level forms, on a parser the caller owns (as the extender does).
  static simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  simdjson::ondemand::value value;
  if (parser.iterate(padded).get(document) == simdjson::SUCCESS &&
      document.get_value().get(value) == simdjson::SUCCESS) {
    if (auto nodes = DecodeNodeListItems(value, "nodes"); nodes.ok()) {
      for (const Node& node : *nodes) CheckNode(node);
    }
  }
  if (parser.iterate(padded).get(document) == simdjson::SUCCESS &&
      document.get_value().get(value) == simdjson::SUCCESS) {
    if (auto pod = DecodePod(value, "pod"); pod.ok()) CheckPod(*pod);
  }
  return 0;
}
