// A model of kubelet's device manager around the real device plugin's AllocationService, for
// tests that need kubelet's side of admission without a kubelet: what matters for "no device
// given twice" is modelled, nothing else.
//
// What the real kubelet does, and this model does too:
// - it admits one pod at a time (in the order its pod sources deliver them: creation order after a
//   restart or a burst), and for each container in its order (init containers first) and each
//   device-plugin resource the container asks for, it computes the available ids (healthy ids
//   minus what it assigned to live containers), calls GetPreferredAllocation(available,
//   must_include = {}, size), takes the preferred ids that are available and fills up from the
//   lowest available ids, then calls Allocate(ids). Neither call names the pod.
// - it records the ids it chose (its checkpoint, which PodResources reports), whatever the plugin
//   mounts; the container gets what Allocate's response mounts (here: Grant::ids).
// - an Allocate error (or too few available ids) rejects the pod (UnexpectedAdmissionError): the
//   pod fails and the ids kubelet assigned to its earlier containers are free again.
// - when a pod ends (deleted, or Succeeded/Failed) its containers stop and kubelet's ids are free.
// - its PodResources List (nodeagent::KubeletView) reports every pod it runs and the pod it is
//   admitting (a pod with no ids yet is one item with an empty container), with the ids it booked
//   for each container; it books each Allocate before it admits the next container.
// - prepared DRA claims (PrepareDra) are listed as their containers' dynamic_resources.
// Header-only: its users link toposched_deviceplugin themselves.
#ifndef TOPOSCHED_TEST_SUPPORT_KUBELET_MODEL_H_
#define TOPOSCHED_TEST_SUPPORT_KUBELET_MODEL_H_

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/result.h"
#include "deviceplugin/allocation.h"
#include "kube/objects.h"
#include "nodeagent/device_ids.h"
#include "nodeagent/pod_source.h"
#include "topology/id_ranges.h"

namespace toposched::testing {

class KubeletModel : public nodeagent::KubeletView {
 public:
  // One running container's share of one resource.
  struct ContainerGrant {
    std::string pod_uid;
    std::string pod_key;  // namespace/name
    std::string container;
    std::string resource;
    topology::Unit unit = topology::Unit::kDevice;
    std::vector<int> kubelet_ids;  // what kubelet assigned (its checkpoint, PodResources)
    std::vector<int> granted_ids;  // what the plugin's Allocate gave the container (the truth)
  };

  // `units` per resource of `plugin.options().resources`: how many ids kubelet sees advertised
  // (the device plugin's ListAndWatch), all healthy.
  KubeletModel(std::string node, deviceplugin::AllocationService& plugin, int devices, int cores)
      : node_(std::move(node)), plugin_(plugin), devices_(devices), cores_(cores) {}

  // Admits `pod` (bound to this node). `follow_preference` false: kubelet takes its own lowest
  // available ids instead of the plugin's preference (a plugin that does not offer
  // GetPreferredAllocation, or one kubelet's topology manager overrules). Error: the pod was
  // rejected; nothing of it stays assigned.
  Result<std::vector<ContainerGrant>> Admit(const kube::Pod& pod, bool follow_preference = true) {
    // kubelet's pod manager knows the pod from here on (PodResources lists it).
    admitting_ = pod;
    pending_.clear();
    std::vector<ContainerGrant>& granted = pending_;
    for (const auto* list : {&pod.init_containers, &pod.containers}) {
      for (const kube::Container& container : *list) {
        for (const claims::ResourceSpec& spec : plugin_.options().resources) {
          const int size = static_cast<int>(deviceplugin::AsksWithAliases(container, spec));
          if (size <= 0) continue;
          std::vector<int> available = Available(spec, granted);
          if (static_cast<int>(available.size()) < size) {
            admitting_.reset();
            pending_.clear();
            return Error{
                fmt::format("kubelet on {}: pod {} container {} asks for {} {} but only "
                            "{} are available",
                            node_, pod.Key(), container.name, size, spec.name, available.size())};
          }
          std::vector<int> chosen;
          if (follow_preference) {
            for (int id : plugin_.Prefer(spec, available, {}, size)) {
              if (static_cast<int>(chosen.size()) < size &&
                  std::binary_search(available.begin(), available.end(), id) &&
                  std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
                chosen.push_back(id);
              }
            }
          }
          for (int id : available) {
            if (static_cast<int>(chosen.size()) >= size) break;
            if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
          }
          std::sort(chosen.begin(), chosen.end());
          auto grant = plugin_.Allocate(spec, chosen);
          if (!grant.ok()) {
            admitting_.reset();
            pending_.clear();
            return Error{fmt::format("kubelet on {}: Allocate for pod {} container {} ({} {}): {}",
                                     node_, pod.Key(), container.name,
                                     topology::FormatIdRanges(chosen), spec.name, grant.error())};
          }
          granted.push_back(
              {pod.uid, pod.Key(), container.name, spec.name, spec.unit, chosen, grant->ids});
        }
      }
    }
    for (ContainerGrant& g : granted) running_.push_back(std::move(g));
    pending_.clear();
    admitting_.reset();
    admitted_.insert(pod.uid);
    pods_[pod.uid] = {pod.ns, pod.name};
    return Running(pod.uid);
  }

  // The pod's containers stopped (pod deleted or ended).
  void Remove(const std::string& uid) {
    std::erase_if(running_, [&](const ContainerGrant& g) { return g.pod_uid == uid; });
    admitted_.erase(uid);
    pods_.erase(uid);
  }

  // PodResources List: every admitted pod's containers with the ids kubelet booked, and the pod
  // being admitted (its containers booked so far, or one item with no container).
  Result<std::vector<nodeagent::AssignedDevices>> List() override {
    std::vector<nodeagent::AssignedDevices> out;
    std::set<std::string> listed;
    auto add = [&](const std::string& ns, const std::string& name, const ContainerGrant& g) {
      out.push_back(
          {ns, name, g.container, g.resource, nodeagent::UnitIds(g.unit, g.kubelet_ids), {}});
      listed.insert(g.pod_uid);
    };
    for (const ContainerGrant& g : running_) {
      const auto& [ns, name] = pods_.at(g.pod_uid);
      add(ns, name, g);
    }
    if (admitting_) {
      for (const ContainerGrant& g : pending_) add(admitting_->ns, admitting_->name, g);
    }
    for (const auto& [uid, key] : pods_) {
      if (listed.count(uid) == 0) out.push_back({key.first, key.second, "", "", {}, {}});
    }
    if (admitting_ && listed.count(admitting_->uid) == 0) {
      out.push_back({admitting_->ns, admitting_->name, "", "", {}, {}});
    }
    for (const auto& [claim, item] : dra_) out.push_back(item);
    return out;
  }

  // A DRA claim prepared for a container that now runs: kubelet lists its devices as that
  // container's `dynamic_resources` (an item with no resource) until the claim is unprepared.
  void PrepareDra(const std::string& claim_uid, nodeagent::AssignedDevices item) {
    dra_[claim_uid] = std::move(item);
  }
  void UnprepareDra(const std::string& claim_uid) { dra_.erase(claim_uid); }

  bool Admitted(const std::string& uid) const { return admitted_.count(uid) != 0; }
  const std::string& node() const { return node_; }
  const std::vector<ContainerGrant>& running() const { return running_; }
  std::vector<ContainerGrant> Running(const std::string& uid) const {
    std::vector<ContainerGrant> out;
    for (const ContainerGrant& g : running_) {
      if (g.pod_uid == uid) out.push_back(g);
    }
    return out;
  }

 private:
  // Ids of the resource kubelet has not assigned to a live container (nor to `pending`, the
  // pod's earlier containers), ascending.
  std::vector<int> Available(const claims::ResourceSpec& spec,
                             const std::vector<ContainerGrant>& pending) const {
    const int units = spec.unit == topology::Unit::kDevice ? devices_ : cores_;
    std::set<int> used;
    for (const auto* list : {&running_, &pending}) {
      for (const ContainerGrant& g : *list) {
        if (g.resource == spec.name) used.insert(g.kubelet_ids.begin(), g.kubelet_ids.end());
      }
    }
    std::vector<int> out;
    for (int id = 0; id < units; ++id) {
      if (used.count(id) == 0) out.push_back(id);
    }
    return out;
  }

  std::string node_;
  deviceplugin::AllocationService& plugin_;
  int devices_;
  int cores_;
  std::vector<ContainerGrant> running_;
  std::set<std::string> admitted_;
  std::map<std::string, std::pair<std::string, std::string>> pods_;  // uid -> (namespace, name)
  std::optional<kube::Pod> admitting_;                               // the pod Admit is on
  std::vector<ContainerGrant> pending_;                              // its containers booked so far
  std::map<std::string, nodeagent::AssignedDevices> dra_;            // prepared claims by claim uid
};

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_KUBELET_MODEL_H_
