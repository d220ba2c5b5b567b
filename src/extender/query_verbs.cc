// Filter, prioritize and preempt: questions kube-scheduler asks, answered from the tracker
// without changing what is held (filter only remembers the pod and its demand).
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/gang.h"
#include "claims/keys.h"
#include "extender/service.h"

namespace toposched::extender {

std::string NotOfferedReason(std::string_view node, std::string_view dra_held) {
  if (dra_held.empty()) {
    return fmt::format(
        "node {} is managed by the DRA driver (label {}={}): pods get its devices through "
        "ResourceClaims",
        node, claims::kLabelNeuronManagement, claims::kNeuronManagementDra);
  }
  return fmt::format(
      "node {} still runs DRA claims of neuron.aws.com ({} devices, label {}): its devices are "
      "offered once they end",
      node, dra_held, claims::kLabelDraClaimsHeld);
}

std::string ExtenderService::Filter(const ExtenderArgs& args) {
  FilterResult result;
  result.node_names_form = args.node_names.has_value();
  const std::vector<std::string>& names = args.CandidateNames();
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok()) {
    for (const auto& n : names) result.failed_unresolvable[n] = requests.error();
    return EncodeFilterResult(result);
  }
  if (!requests->spec.AsksForAnything()) {
    result.passed.assign(names.begin(), names.end());  // not ours: every node passes untouched
    return EncodeFilterResult(result);
  }
  if (!requests->gang_error.empty()) {
    // Unresolvable: only a change to the pod's keys helps.
    for (const auto& n : names) result.failed_unresolvable[n] = requests->gang_error;
    return EncodeFilterResult(result);
  }
  if (!Ready()) {
    // Resolvable, so kube-scheduler retries the pod once we know what is taken.
    for (const auto& n : names) result.failed[n] = std::string(kNotReadyReason);
    return EncodeFilterResult(result);
  }
  result.passed.reserve(names.size());
  if (args.nodes) {
    for (const auto& node : *args.nodes) LearnNode(node);
  }
  // A PodGroup (or Workload group) whose policy is basic is no gang: its pod is placed alone,
  // with the gang's id dropped from its spec. Single pods are not copied.
  std::optional<PodRequests> resolved;
  if (requests->gang) {
    resolved = WithGangSize(*requests, /*may_ask=*/true);
    if (resolved->gang) {
      RememberPod(*requests);
      return FilterGangMember(*resolved, names, result);
    }
  }
  // Unresolvable: preemption must not evict pods to start a pod that waits on purpose.
  if (std::string held = HoldBackReason(resolved ? *resolved : *requests); !held.empty()) {
    for (const auto& n : names) result.failed_unresolvable[n] = held;
    metrics_.CountHeldBack();
    RememberPod(std::move(requests).value());
    return EncodeFilterResult(result);
  }
  // The call's nodes not offered (read before the tracker's lock): the DRA claims' count, or
  // empty when the DRA driver manages the node. Only the call's names, not the cluster's.
  std::unordered_map<std::string, std::string> not_offered;
  {
    ReaderLock lock(mu_);
    if (!not_offered_.empty()) {
      for (const auto& name : names) {
        auto it = not_offered_.find(name);
        if (it != not_offered_.end()) not_offered.emplace(name, it->second.dra_held);
      }
    }
  }
  auto record = [&](const std::string& name, tracker::FitResult&& fit) {
    if (auto held = not_offered.find(name); held != not_offered.end()) {
      result.failed[name] = NotOfferedReason(name, held->second);
    } else if (fit.fits) {
      result.passed.push_back(name);
    } else if (fit.unresolvable) {
      result.failed_unresolvable[name] = std::move(fit.reason);
    } else {
      result.failed[name] = std::move(fit.reason);
    }
  };
  const tracker::PodSpec& spec = resolved ? resolved->spec : requests->spec;
  if (options_.filter_best_only) {
    FilterBest(spec, names, not_offered, result, record);
  } else {
    tracker_.ForEachFit(
        spec, names, [&](size_t i, tracker::FitResult&& fit) { record(names[i], std::move(fit)); });
  }
  RememberPod(std::move(requests).value());
  return EncodeFilterResult(result);
}

void ExtenderService::FilterBest(
    const tracker::PodSpec& spec, const std::vector<std::string>& names,
    const std::unordered_map<std::string, std::string>& not_offered, FilterResult& result,
    const std::function<void(const std::string&, tracker::FitResult&&)>& record) const {
  // The call's nodes not offered are not ranked (the names are copied only when there are some).
  std::vector<std::string> offered;
  std::vector<size_t> offered_at;  // offered[j] is names[offered_at[j]]
  std::span<const std::string> ranked = names;
  const bool some_not_offered = !not_offered.empty();
  if (some_not_offered) {
    offered.reserve(names.size());
    offered_at.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      if (not_offered.contains(names[i])) continue;
      offered.push_back(names[i]);
      offered_at.push_back(i);
    }
    ranked = offered;
  }
  tracker::Ranking ranking = tracker_.Rank(spec, ranked);
  if (ranking.best >= 0) {
    // The other nodes are left out of both lists: to kube-scheduler they are simply not
    // feasible, and their reasons would only be shown if the pod stayed Pending. The answer
    // points into the request's names, which outlive its encoding.
    const auto best = static_cast<size_t>(ranking.best);
    result.passed.push_back(names[some_not_offered ? offered_at[best] : best]);
    return;
  }
  // Nothing fits: every node's reason, for the pod's events and for preemption.
  size_t j = 0;
  for (const auto& n : names) {
    if (not_offered.contains(n)) {
      record(n, {});
      continue;
    }
    tracker::FitResult& fit = ranking.fits[j++];
    // Rank refuses a node a gang holds even where its barrier names no reason.
    if (fit.reason.empty()) fit.reason = fmt::format("node {} is held for a gang", n);
    record(n, std::move(fit));
  }
}

std::string ExtenderService::Prioritize(const ExtenderArgs& args) {
  const std::vector<std::string>& names = args.CandidateNames();
  std::vector<HostPriority> priorities;
  priorities.reserve(names.size());
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) {
    for (const auto& n : names) priorities.push_back({n, 0});
    return EncodeHostPriorityList(priorities);
  }
  if (args.nodes) {
    for (const auto& node : *args.nodes) LearnNode(node);
  }
  requests = WithGangSize(std::move(requests).value(), /*may_ask=*/false);
  if (requests->gang) {
    // A seated member has one node: its seat.
    const auto gang = tracker_.FindGang(requests->gang->id);
    const int rank = gang ? gang->RankOf(requests->spec.uid) : -1;
    const std::string* seat = rank >= 0 ? &gang->ranks[static_cast<size_t>(rank)].node : nullptr;
    for (const auto& n : names) priorities.push_back({n, seat != nullptr && *seat == n ? 10 : 0});
    return EncodeHostPriorityList(priorities);
  }
  // The simulator's node choice, scored: 10 for the one node the policy picks (bind then takes
  // the same set there), 1-9 for the rest that fit, 0 for the others.
  const tracker::Ranking ranking = tracker_.Rank(requests->spec, names);
  for (size_t i = 0; i < names.size(); ++i) priorities.push_back({names[i], ranking.scores[i]});
  return EncodeHostPriorityList(priorities);
}

std::string ExtenderService::Preempt(const PreemptionArgs& args) {
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) {
    return EncodePreemptionResult(args.node_victims);  // not ours to judge
  }
  std::map<std::string, Victims> out;
  if (!Ready()) return EncodePreemptionResult(out);  // no victims for ids we cannot see yet
  requests = WithGangSize(std::move(requests).value(), /*may_ask=*/false);
  if (requests->gang) {
    // A gang needs whole groups of nodes; victims on one node cannot free them
    // (docs/ultraserver.md).
    spdlog::info("preempt {}: gang members do not preempt", requests->spec.name);
    return EncodePreemptionResult(out);
  }
  for (const auto& [node, victims] : args.node_victims) {
    // Victims holding none of our ids were chosen for other resources (cpu, memory): keep them.
    // Among those holding ids, keep only the fewest that free a legal set.
    std::vector<std::string> holders;
    std::vector<std::string> others;
    bool gang_victim = false;
    for (const auto& uid : victims.pod_uids) {
      auto hold = tracker_.Find(uid);
      (hold && hold->allocation.node == node ? holders : others).push_back(uid);
      ReaderLock lock(mu_);
      auto it = pods_.find(uid);
      if (it != pods_.end() && it->second.gang) {
        // A member of a basic PodGroup (size 0) is no gang's.
        const auto size = gang_sizes_.find(it->second.gang->id);
        gang_victim = gang_victim || size == gang_sizes_.end() || size->second > 0;
      }
    }
    // Evicting one member of a gang would break the whole job: such nodes are not offered.
    if (gang_victim) {
      spdlog::debug("preempt {}: dropping node {}: a victim is a gang member", requests->spec.name,
                    node);
      continue;
    }
    auto fewest = tracker_.FewestVictims(requests->spec, node, holders);
    if (!fewest.ok()) {
      spdlog::debug("preempt {}: dropping node {}: {}", requests->spec.name, node, fewest.error());
      continue;
    }
    Victims kept{std::move(others), victims.num_pdb_violations};
    kept.pod_uids.insert(kept.pod_uids.end(), fewest->begin(), fewest->end());
    out[node] = std::move(kept);
  }
  return EncodePreemptionResult(out);
}

}  // namespace toposched::extender
