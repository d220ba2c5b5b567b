#include "net/connection_slots.h"

#include <algorithm>
#include <utility>

namespace toposched::net {
namespace {

constexpr int kSilent = static_cast<int>(ConnectionSlots::Phase::kSilent);
constexpr int kAnonymous = static_cast<int>(ConnectionSlots::Phase::kAnonymous);
constexpr int kHandshaking = static_cast<int>(ConnectionSlots::Phase::kHandshaking);

}  // namespace

ConnectionSlots::ConnectionSlots(int capacity, int waiting_capacity)
    : capacity_(std::max(1, capacity)), waiting_capacity_(std::max(1, waiting_capacity)) {}

ConnectionSlots::Close ConnectionSlots::ForgetLocked(std::map<Id, Entry>::iterator it) {
  if (it->second.phase == Phase::kHeld) {
    --held_;
  } else {
    by_phase_[static_cast<int>(it->second.phase)].erase(it->first);
  }
  Close close = std::move(it->second.close);
  entries_.erase(it);
  return close;
}

ConnectionSlots::Id ConnectionSlots::Wait(Close close, Close* evicted) {
  MutexLock lock(mu_);
  auto& room = by_phase_[kSilent];
  if (static_cast<int>(room.size()) >= waiting_capacity_) {
    *evicted = ForgetLocked(entries_.find(*room.begin()));
  }
  const Id id = next_id_++;
  entries_.emplace(id, Entry{Phase::kSilent, std::move(close)});
  room.insert(id);
  return id;
}

ConnectionSlots::Spoke ConnectionSlots::Speak(Id id, Close close, Close* evicted) {
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.phase != Phase::kSilent) return Spoke::kGone;
  const int taken = static_cast<int>(entries_.size() - by_phase_[kSilent].size());
  if (taken >= capacity_) {
    int from = kAnonymous;
    while (from <= kHandshaking && by_phase_[from].empty()) ++from;
    if (from > kHandshaking) {  // every slot is held
      ForgetLocked(it);
      return Spoke::kRefused;
    }
    *evicted = ForgetLocked(entries_.find(*by_phase_[from].begin()));
  }
  by_phase_[kSilent].erase(id);
  it->second = Entry{Phase::kHandshaking, std::move(close)};
  by_phase_[kHandshaking].insert(id);
  return Spoke::kAdmitted;
}

void ConnectionSlots::Enter(Id id, Phase phase) {
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.phase == phase || phase == Phase::kSilent ||
      it->second.phase == Phase::kSilent) {
    return;
  }
  if (it->second.phase == Phase::kHeld) {
    --held_;
  } else {
    by_phase_[static_cast<int>(it->second.phase)].erase(id);
  }
  it->second.phase = phase;
  if (phase == Phase::kHeld) {
    ++held_;
  } else {
    by_phase_[static_cast<int>(phase)].insert(id);
  }
}

void ConnectionSlots::Release(Id id) {
  Close close;  // destroyed after the lock is released
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  close = ForgetLocked(it);
}

int ConnectionSlots::held() const {
  MutexLock lock(mu_);
  return held_;
}

int ConnectionSlots::taken() const {
  MutexLock lock(mu_);
  return static_cast<int>(entries_.size() - by_phase_[kSilent].size());
}

int ConnectionSlots::waiting() const {
  MutexLock lock(mu_);
  return static_cast<int>(by_phase_[kSilent].size());
}

}  // namespace toposched::net
