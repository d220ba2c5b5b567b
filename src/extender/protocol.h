// kube-scheduler's extender v1 wire format (k8s.io/kube-scheduler/extender/v1): decoding the
// four verbs' arguments and encoding their results with the exact Go field names. Pure: no I/O.
// Decoders take untrusted bytes and return errors, never throw.
#ifndef TOPOSCHED_EXTENDER_PROTOCOL_H_
#define TOPOSCHED_EXTENDER_PROTOCOL_H_

#include <simdjson.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/objects.h"

namespace toposched::extender {

// ExtenderArgs, sent to filter and prioritize.
struct ExtenderArgs {
  kube::Pod pod;
  // NodeNames when the scheduler is nodeCacheCapable, else full Node objects in Nodes.
  std::optional<std::vector<std::string>> node_names;
  std::optional<std::vector<kube::Node>> nodes;

  // The candidate names, whichever form they came in (no copy in the NodeNames form).
  const std::vector<std::string>& CandidateNames() const;

 private:
  mutable std::vector<std::string> names_from_nodes_;
};

struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};

struct Victims {
  std::vector<std::string> pod_uids;
  int64_t num_pdb_violations = 0;
};

// ExtenderPreemptionArgs: candidates from NodeNameToMetaVictims (names-only) or
// NodeNameToVictims (full pods; only their UIDs are kept).
struct PreemptionArgs {
  kube::Pod pod;
  std::map<std::string, Victims> node_victims;
};

// `body` must come from a buffer with simdjson::SIMDJSON_PADDING readable bytes past its end.
Result<ExtenderArgs> DecodeExtenderArgs(simdjson::padded_string_view body);
Result<BindingArgs> DecodeBindingArgs(simdjson::padded_string_view body);
Result<PreemptionArgs> DecodePreemptionArgs(simdjson::padded_string_view body);

// Views into the request's names: the ExtenderArgs must outlive it.
struct FilterResult {
  bool node_names_form = true;  // answer NodeNames (names-only) or Nodes
  std::vector<std::string_view> passed;
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> failed_unresolvable;
  std::string error;
};
std::string EncodeFilterResult(const FilterResult& result);

struct HostPriority {
  std::string_view host;  // into the request's node names, which outlive the answer's encoding
  int64_t score = 0;
};
std::string EncodeHostPriorityList(const std::vector<HostPriority>& priorities);

// Filter's, prioritize's and bind's answers are written by hand: they are on every pod's path
// (bench/extender_bench.cc, BM_Encode*, measures what that saves over base/json_writer.h).
std::string EncodeBindingResult(std::string_view error);

std::string EncodePreemptionResult(const std::map<std::string, Victims>& node_victims);

// {"Error": message} for filter; used when the whole call fails.
std::string EncodeFilterError(std::string_view message);

// {"Error": message}: the body of a call refused whole before its verb ran (a standby, a
// malformed request, a full bind queue).
std::string EncodeErrorAnswer(std::string_view message);

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_PROTOCOL_H_
