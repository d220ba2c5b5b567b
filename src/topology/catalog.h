// The instance-type catalog: what each kind of node has (devices, cores, links) and which device
// sets are legal on it. It is data (catalog/instance-types.yaml), parsed here from text; reading
// the file is the caller's job, so this library does no I/O.
#ifndef TOPOSCHED_TOPOLOGY_CATALOG_H_
#define TOPOSCHED_TOPOLOGY_CATALOG_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::topology {

// The largest node the allocator handles: the Neuron driver supports 64 devices per host.
inline constexpr int kMaxDevices = 64;
// 64 devices x 8 logical cores (Trn2 at LNC=1).
inline constexpr int kMaxCores = 512;

enum class LegalSetRule {
  kContiguous,  // N consecutive device ids, no wrap
  kAligned,     // N in `sizes`; ids [k*N, (k+1)*N)
  kAny,         // any N devices
};

std::string_view RuleName(LegalSetRule rule);

struct LncSetting {
  int physical_cores_per_device = 0;
  std::vector<int> allowed;  // e.g. {1, 2}
  int default_lnc = 0;
};

struct InstanceType {
  std::string name;
  int devices = 0;
  int cores_per_device = 0;  // at the default LNC when `lnc` is set
  bool has_lnc = false;
  LncSetting lnc;
  LegalSetRule rule = LegalSetRule::kContiguous;
  std::vector<int> sizes;                   // kAligned only, ascending
  std::vector<std::vector<int>> adjacency;  // per device, in driver order (may be empty lists)
  std::string source;

  // NeuronCores a device has in hardware, whatever the LNC.
  int physical_cores_per_device() const {
    return has_lnc ? lnc.physical_cores_per_device : cores_per_device;
  }
};

// Holds every instance type by name. Immutable after Parse; safe to share between threads.
class Catalog {
 public:
  // Parses catalog YAML. `source_name` (a file path, or "<embedded>") prefixes every error, which
  // also carries the line and column of the offending entry.
  static Result<Catalog> Parse(std::string_view yaml_text, std::string_view source_name);
  // The catalog compiled into the binary from catalog/instance-types.yaml.
  static const Catalog& Embedded();

  // nullptr when unknown.
  const InstanceType* Find(std::string_view name) const;
  // An error naming the type and saying how to add it.
  static std::string UnknownTypeMessage(std::string_view name);
  const std::map<std::string, InstanceType, std::less<>>& types() const { return types_; }

 private:
  std::map<std::string, InstanceType, std::less<>> types_;
};

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_CATALOG_H_
