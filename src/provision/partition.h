// Partitions of a shared pool (an IPU-POD) and their JSON form in the V-IPU-style API that
// `toposched partition-service` fakes (docs/pools.md). The service's answers are untrusted input:
// the parsers never throw and bound what they accept.
#ifndef TOPOSCHED_PROVISION_PARTITION_H_
#define TOPOSCHED_PROVISION_PARTITION_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::provision {

enum class PartitionState { kCreating, kActive, kFailed, kRemoving };
std::string_view StateName(PartitionState state);

struct Partition {
  std::string name;
  std::string pool;
  std::vector<int> ipus;  // device ids inside the pool, ascending
  PartitionState state = PartitionState::kCreating;
  std::string message;  // why it failed, when it did
};

// Partition names toposched makes: "ts-" + the pod's uid, so a restart can tell the owner.
std::string PartitionNameFor(std::string_view pod_uid);
// The owning pod's uid, or empty when the name was not made by toposched.
std::string OwnerOf(std::string_view partition_name);
// Names go into URL paths: letters, digits, '-', '.', '_' only, 1..128 characters.
bool ValidPartitionName(std::string_view name);

// {"name":..,"pool":..,"ipus":[..],"state":"creating|active|failed|removing","message":..}
std::string EncodePartition(const Partition& partition);
// {"partitions":[...]}
std::string EncodePartitionList(const std::vector<Partition>& partitions);

Result<Partition> ParsePartition(std::string_view json);
Result<std::vector<Partition>> ParsePartitionList(std::string_view json);
// The error text a service put in {"error":"..."}, or the start of the body.
std::string ErrorText(std::string_view body);

}  // namespace toposched::provision

#endif  // TOPOSCHED_PROVISION_PARTITION_H_
