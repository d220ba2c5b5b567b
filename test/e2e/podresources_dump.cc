// Prints what kubelet's PodResources List says, one JSON object per line, for the e2e scenarios'
// invariant checks (modeswitch.sh): device-plugin devices ({"kind":"devices"}) and DRA devices
// ({"kind":"dra"}) of every container kubelet runs or is admitting. Reads through the same client
// the device plugin uses (nodeagent::PodResourcesClient), so what it prints is what the plugin
// sees.
//   podresources_dump /path/to/pod-resources/kubelet.sock
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "base/json_escape.h"
#include "nodeagent/pod_resources.h"

int main(int argc, char** argv) {
  using toposched::JsonQuote;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s KUBELET_POD_RESOURCES_SOCKET\n", argv[0]);
    return 2;
  }
  toposched::nodeagent::PodResourcesClient client(argv[1]);
  auto listed = client.List();
  if (!listed.ok()) {
    std::fprintf(stderr, "PodResources List on %s: %s\n", argv[1], listed.error().c_str());
    return 1;
  }
  for (const auto& item : *listed) {
    const std::string pod = JsonQuote(item.ns + "/" + item.pod);
    const std::string container = JsonQuote(item.container);
    if (!item.resource.empty()) {
      std::string ids;
      for (const std::string& id : item.device_ids) ids += (ids.empty() ? "" : ",") + JsonQuote(id);
      fmt::print(
          "{{\"kind\":\"devices\",\"pod\":{},\"container\":{},\"resource\":{},\"ids\":[{}]}}\n",
          pod, container, JsonQuote(item.resource), ids);
    }
    for (const auto& dra : item.dra_devices) {
      fmt::print(
          "{{\"kind\":\"dra\",\"pod\":{},\"container\":{},\"claim\":{},\"driver\":{},\"pool\":{},"
          "\"device\":{}}}\n",
          pod, container, JsonQuote(dra.claim), JsonQuote(dra.driver), JsonQuote(dra.pool),
          JsonQuote(dra.device));
    }
  }
  return 0;
}
