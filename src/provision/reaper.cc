#include "provision/reaper.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace toposched::provision {

Reaper::Reaper(Provisioner& provisioner, std::chrono::milliseconds retry)
    : provisioner_(provisioner), retry_(retry), thread_([this] { Run(); }) {}

Reaper::~Reaper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Reaper::Remove(const std::string& name, std::function<void()> on_gone) {
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const Item& item) { return item.name == name; });
    if (it != queue_.end()) {
      it->on_gone.push_back(std::move(on_gone));
      return;
    }
    queue_.push_back({name, {std::move(on_gone)}, std::chrono::steady_clock::now()});
  }
  cv_.notify_all();
}

size_t Reaper::Pending() const {
  std::lock_guard lock(mu_);
  return queue_.size() + busy_;
}

void Reaper::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto next = std::min_element(queue_.begin(), queue_.end(), [](const Item& a, const Item& b) {
      return a.not_before < b.not_before;
    });
    if (next->not_before > std::chrono::steady_clock::now()) {
      cv_.wait_until(lock, next->not_before);
      continue;
    }
    Item item = std::move(*next);
    queue_.erase(next);
    ++busy_;
    lock.unlock();
    auto removed = provisioner_.RemoveAndWait(item.name, provisioner_.options().remove_timeout);
    if (removed.ok()) {
      spdlog::info("partition {} removed; its devices are free", item.name);
      for (auto& fn : item.on_gone) fn();
    }
    lock.lock();
    --busy_;
    if (!removed.ok()) {
      spdlog::warn("removing partition {}: {}; retrying in {} ms", item.name, removed.error(),
                   retry_.count());
      item.not_before = std::chrono::steady_clock::now() + retry_;
      queue_.push_back(std::move(item));
    }
  }
}

}  // namespace toposched::provision
