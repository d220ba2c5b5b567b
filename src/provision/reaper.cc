#include "provision/reaper.h"

#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>

namespace toposched::provision {

Reaper::Reaper(Provisioner& provisioner, std::chrono::milliseconds retry)
    : provisioner_(provisioner), retry_(retry), thread_([this] { Run(); }) {}

Reaper::~Reaper() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void Reaper::Remove(const std::string& name, std::function<void()> on_gone) {
  {
    MutexLock lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const Item& item) { return item.name == name; });
    if (it != queue_.end()) {
      it->on_gone.push_back(std::move(on_gone));
      return;
    }
    queue_.push_back({name, {std::move(on_gone)}, std::chrono::steady_clock::now()});
  }
  cv_.NotifyAll();
}

size_t Reaper::Pending() const {
  MutexLock lock(mu_);
  return queue_.size() + busy_;
}

void Reaper::Run() {
  while (std::optional<Item> item = NextDue()) {
    auto removed = provisioner_.RemoveAndWait(item->name, provisioner_.options().remove_timeout);
    if (removed.ok()) {
      spdlog::info("partition {} removed; its devices are free", item->name);
      for (auto& fn : item->on_gone) fn();
    }
    MutexLock lock(mu_);
    --busy_;
    if (!removed.ok()) {
      spdlog::warn("removing partition {}: {}; retrying in {} ms", item->name, removed.error(),
                   retry_.count());
      item->not_before = std::chrono::steady_clock::now() + retry_;
      queue_.push_back(std::move(*item));
    }
  }
}

std::optional<Reaper::Item> Reaper::NextDue() {
  MutexLock lock(mu_);
  while (!stop_) {
    // Only Remove() adds to the queue while this thread waits; it wakes us when it does.
    const size_t queued = queue_.size();
    const auto stopped_or_added = [&]()
                                      TS_REQUIRES(mu_) { return stop_ || queue_.size() != queued; };
    if (queue_.empty()) {
      cv_.Wait(mu_, stopped_or_added);
      continue;
    }
    auto next = std::min_element(queue_.begin(), queue_.end(), [](const Item& a, const Item& b) {
      return a.not_before < b.not_before;
    });
    if (next->not_before > std::chrono::steady_clock::now()) {
      cv_.WaitUntil(mu_, next->not_before, stopped_or_added);
      continue;
    }
    Item item = std::move(*next);
    queue_.erase(next);
    ++busy_;
    return item;
  }
  return std::nullopt;
}

}  // namespace toposched::provision
