// A node's place in an AWS UltraServer (Trn2: four trn2u.48xlarge joined by NeuronLink; Trn3:
// through switches), read from the labels AWS's device plugin puts on the node. A multi-node job
// must land inside one UltraServer, or one 2-node half of it, one pod per node.
#ifndef TOPOSCHED_CLAIMS_ULTRASERVER_H_
#define TOPOSCHED_CLAIMS_ULTRASERVER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace toposched::claims {

struct UltraServerPlace {
  // The UltraServer (4-node config) and the node's index in it, 0..3; empty / -1 when unlabelled.
  std::string server_id_4;
  int node_id_4 = -1;
  // The 2-node half and the node's index in it, 0..1; empty / -1 when unlabelled.
  std::string server_id_2;
  int node_id_2 = -1;
  // The node configs the node supports (ultraserver-mode), ascending: a subset of {1, 2, 4}.
  std::vector<int> node_configs;

  // True when a job spanning `nodes` nodes (1, 2 or 4) can use this node as one of its members:
  // the mode lists the config and, for 2 or 4, the node has that config's server and node id.
  bool Supports(int nodes) const;
  // The group a `nodes`-node job's members share on this node ("" for 1 or when unsupported).
  const std::string& GroupId(int nodes) const;
  // The node's rank inside that group (node id), or -1.
  int NodeId(int nodes) const;
};

// Reads the place from a node's labels. No UltraServer label at all: nullopt (an ordinary node).
// A malformed label (an unknown config in the mode, a node id out of range, an id without its
// server id or the reverse, AWS's placeholder server id of zeros) is an error naming the label.
Result<std::optional<UltraServerPlace>> UltraServerPlaceOf(
    const std::map<std::string, std::string, std::less<>>& labels);

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_ULTRASERVER_H_
