#include "net/connection_slots.h"

#include <utility>

namespace toposched::net {

std::optional<ConnectionSlots::Id> ConnectionSlots::Take(std::function<void()> close,
                                                         std::function<void()>* evicted) {
  MutexLock lock(mu_);
  if (static_cast<int>(phase_.size()) >= capacity_) {
    auto from = evictable_.begin();
    while (from != evictable_.end() && from->empty()) ++from;
    if (from == evictable_.end()) return std::nullopt;  // every slot is held
    auto oldest = from->begin();
    *evicted = std::move(oldest->second);
    phase_.erase(oldest->first);
    from->erase(oldest);
  }
  const Id id = next_id_++;
  phase_.emplace(id, Phase::kSilent);
  evictable_[static_cast<int>(Phase::kSilent)].emplace(id, std::move(close));
  return id;
}

std::function<void()> ConnectionSlots::LeavePhaseLocked(Id id, Phase phase) {
  if (phase == Phase::kHeld) {
    --held_;
    return {};
  }
  auto& from = evictable_[static_cast<int>(phase)];
  auto entry = from.find(id);
  std::function<void()> close = std::move(entry->second);
  from.erase(entry);
  return close;
}

void ConnectionSlots::Enter(Id id, Phase phase) {
  MutexLock lock(mu_);
  auto it = phase_.find(id);
  if (it == phase_.end() || it->second == phase) return;
  std::function<void()> close = LeavePhaseLocked(id, it->second);
  it->second = phase;
  if (phase == Phase::kHeld) {
    ++held_;  // never taken back: its close is no longer needed
  } else {
    evictable_[static_cast<int>(phase)].emplace(id, std::move(close));
  }
}

void ConnectionSlots::Release(Id id) {
  std::function<void()> close;  // destroyed after the lock is released
  MutexLock lock(mu_);
  auto it = phase_.find(id);
  if (it == phase_.end()) return;
  close = LeavePhaseLocked(id, it->second);
  phase_.erase(it);
}

int ConnectionSlots::held() const {
  MutexLock lock(mu_);
  return held_;
}

int ConnectionSlots::taken() const {
  MutexLock lock(mu_);
  return static_cast<int>(phase_.size());
}

}  // namespace toposched::net
