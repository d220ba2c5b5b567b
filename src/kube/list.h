// One-shot lists of every pod or node, page by page, for a reader that keeps no watch (the device
// plugin's pods on its node, `kubectl neuron`). The informers list through their own loop, which
// also restarts expired pages and decodes item by item; this is the plain form for a reader that
// answers and exits.
#ifndef TOPOSCHED_KUBE_LIST_H_
#define TOPOSCHED_KUBE_LIST_H_

#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/client.h"
#include "kube/objects.h"

namespace toposched::kube {

// GET `collection` (e.g. "/api/v1/pods") with `query` (e.g. "fieldSelector=..."; may be empty),
// every page of `page_size`. A non-200 answer or an item that does not decode is an error naming
// the request and the server's message.
Result<std::vector<Pod>> ListPods(ApiClient& client, std::string_view collection,
                                  std::string_view query = {}, int page_size = 500);
Result<std::vector<Node>> ListNodes(ApiClient& client, std::string_view query = {},
                                    int page_size = 500);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_LIST_H_
