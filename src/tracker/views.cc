// Read-only views of the tracker's state for operators (the extender's fleet view): copies taken
// under the shared lock, so nothing a view does afterwards touches the tracker.
#include <algorithm>

#include "tracker/gang_seats.h"
#include "tracker/tracker.h"

namespace toposched::tracker {

std::vector<NodeView> Tracker::NodeViews(std::span<const std::string> names, bool holders) const {
  ReaderLock lock(mu_);
  std::vector<NodeView> views;
  views.reserve(names.size());
  for (const std::string& name : names) {
    const NodeEntry* entry = FindNode(name);
    if (entry == nullptr) continue;
    const PoolState& pool = entry->pool();
    NodeView& view = views.emplace_back();
    view.info = entry->info;
    view.shape = pool.shape;
    view.error = pool.error;
    view.usage = pool.usage;
    view.gang = entry->gang;
    if (!holders) continue;
    view.holders.reserve(pool.pods.size());
    for (const std::string& uid : pool.pods) {
      auto it = holds_.find(uid);
      if (it == holds_.end()) continue;
      view.holders.push_back(HolderView{uid, it->second.pod_name, IsGangSeatKey(uid),
                                        it->second.state, it->second.allocation.containers});
    }
    std::sort(view.holders.begin(), view.holders.end(),
              [](const HolderView& a, const HolderView& b) { return a.uid < b.uid; });
  }
  return views;
}

topology::SlotCosts Tracker::Costs() const {
  ReaderLock lock(mu_);
  return CostsLocked();
}

}  // namespace toposched::tracker
