// Shared accelerator pools (docs/pools.md): a set of devices with a legal-set rule that one or
// more nodes reach. A Neuron node is its own private pool and needs no definition here; an
// IPU-POD is one pool shared by every node labelled `toposched.io/ipu-pool: <name>`. Definitions
// come from a pools file (YAML text, parsed here; reading the file is the caller's job).
#ifndef TOPOSCHED_TOPOLOGY_POOLS_H_
#define TOPOSCHED_TOPOLOGY_POOLS_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "topology/catalog.h"

namespace toposched::topology {

// The node label that puts a node on a shared pool.
inline constexpr std::string_view kPoolLabel = "toposched.io/ipu-pool";

struct PoolDef {
  std::string name;
  std::string kind;  // a catalog entry with rule `aligned`, e.g. ipu-pod16
  int size = 0;      // devices: a power of two up to kMaxDevices (64, also V-IPU's largest)
  // The shape the allocator sees: the kind with `devices` = size and the sizes that fit.
  std::shared_ptr<const InstanceType> shape_type;
};

// Every defined pool by name. Immutable after Parse; safe to share between threads.
class PoolSet {
 public:
  // Parses
  //   pools:
  //     - name: pod-a
  //       kind: ipu-pod16
  //       size: 16        # optional: the kind's device count
  // Errors name `source_name`, the pool and what to change.
  static Result<PoolSet> Parse(std::string_view yaml_text, std::string_view source_name,
                               const Catalog& catalog);

  const PoolDef* Find(std::string_view name) const;
  const std::map<std::string, PoolDef, std::less<>>& pools() const { return pools_; }
  bool empty() const { return pools_.empty(); }
  // "pod-a, pod-b" (or "none"), for error messages.
  std::string Names() const;
  // Why a node naming `pool` cannot use it.
  std::string UnknownPoolMessage(std::string_view node, std::string_view pool) const;

 private:
  std::map<std::string, PoolDef, std::less<>> pools_;
};

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_POOLS_H_
