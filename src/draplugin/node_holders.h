// The Neuron units that containers outside DRA hold on this node, from kubelet's PodResources:
// the devices it assigned under the device plugin's resources (aws.amazon.com/neuron and its
// alias aws.amazon.com/neurondevice, aws.amazon.com/neuroncore; claims/resources.h). A node
// labelled for DRA while device-plugin pods still run keeps those pods' devices busy: the DRA
// plugin must neither offer them nor prepare a claim on them until the pods are gone.
//
// Fails closed: while kubelet cannot be asked (no socket yet, an error, an id that names no unit
// of this node), prepares are refused and the plugin is not ready; what is withheld from the
// slices is what was held at the last answer, or every device if there never was one.
#ifndef TOPOSCHED_DRAPLUGIN_NODE_HOLDERS_H_
#define TOPOSCHED_DRAPLUGIN_NODE_HOLDERS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "draplugin/prepare.h"
#include "nodeagent/pod_source.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// One container's units of one resource outside DRA.
struct Holder {
  std::string ns;
  std::string pod;
  std::string container;
  std::string resource;  // as kubelet lists it
  std::vector<std::string> ids;
  topology::CoreBits cores;          // every logical core it holds (a device: all of its cores)
  topology::DeviceMask devices = 0;  // every device it touches
  // "container trainer of pod ml/dp-pod (aws.amazon.com/neuron neuron0,neuron1)"
  std::string Describe() const;
};

// kubelet's list as holders on a node of `shape`: device ids "neuronN" hold device N; core ids
// "neuroncoreN" hold logical core N at the node's LNC (numbered as the device plugin numbers
// them, nodeagent/device_ids.h). Items of other resources are skipped. An id of our resources
// that names no unit of this node is an error, since which device it holds cannot be told.
Result<std::vector<Holder>> HoldersOf(const topology::NodeShape& shape,
                                      const std::vector<nodeagent::AssignedDevices>& assigned);

// What is known of the holders at one moment.
struct HolderView {
  bool checked = true;  // false: kubelet's answer is missing; `error` says why
  std::string error;
  std::vector<Holder> holders;  // at the last answer
  // Devices to leave out of the slices: every device a holder touches (a core holder keeps its
  // whole device out: the offers are per device), or all devices before any answer.
  topology::DeviceMask withheld = 0;
};

// OkStatus when no unit the claim holds is held outside DRA (admin-access devices hold nothing).
// Otherwise an error naming the claim's device and the pod and container that hold it; one that
// says the claim cannot be checked when `view` is not checked.
Status CheckClaimFree(const topology::NodeShape& shape, const HolderView& view,
                      const PreparedClaim& claim);

// Asks kubelet and keeps the last view. Thread-safe; its lock is a leaf.
class NodeHolders {
 public:
  // `kubelet` null: no check, nothing is ever held. `source` names it in logs (the socket).
  NodeHolders(const topology::NodeShape& shape, std::unique_ptr<nodeagent::KubeletView> kubelet,
              std::string source);

  bool enabled() const { return kubelet_ != nullptr; }
  // Asks kubelet now. Also whether the view's withheld devices or its checked state changed since
  // the last Refresh. Changes are logged.
  std::pair<HolderView, bool> Refresh() TS_EXCLUDES(mutex_, refresh_mutex_);
  HolderView Current() const TS_EXCLUDES(mutex_);

 private:
  const topology::NodeShape& shape_;
  const std::unique_ptr<nodeagent::KubeletView> kubelet_;
  const std::string source_;
  // Held across one ask, so that views replace each other in the order they were taken.
  Mutex refresh_mutex_;
  mutable Mutex mutex_;
  HolderView view_ TS_GUARDED_BY(mutex_);
  bool answered_ TS_GUARDED_BY(mutex_) = false;  // kubelet has answered once
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_NODE_HOLDERS_H_
