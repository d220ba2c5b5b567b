#include "deviceplugin/kubelet_watch.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <spdlog/spdlog.h>
#include <sys/inotify.h>

namespace toposched::deviceplugin {

DirectoryWatch::DirectoryWatch(std::string directory) : directory_(std::move(directory)) {
  fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) spdlog::warn("inotify unavailable ({}); polling {} only", errno, directory_);
  TryWatch();
}

DirectoryWatch::~DirectoryWatch() {
  if (fd_ >= 0) ::close(fd_);
}

void DirectoryWatch::TryWatch() {
  if (fd_ < 0 || watch_ >= 0) return;
  watch_ = ::inotify_add_watch(
      fd_, directory_.c_str(),
      IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF);
}

std::vector<DirectoryWatch::Event> DirectoryWatch::Wait(std::chrono::milliseconds timeout) {
  std::vector<Event> events;
  TryWatch();
  if (fd_ < 0 || watch_ < 0) {
    std::this_thread::sleep_for(timeout);
    return events;
  }
  pollfd pfd{fd_, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return events;
  alignas(inotify_event) char buffer[16 * 1024];
  while (true) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
      offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      if (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        // The directory itself went away; watch it again once it is back.
        if (watch_ >= 0) ::inotify_rm_watch(fd_, watch_);
        watch_ = -1;
        continue;
      }
      if (event->len == 0) continue;
      Event out;
      out.name = event->name;
      out.created = (event->mask & (IN_CREATE | IN_MOVED_TO)) != 0;
      events.push_back(std::move(out));
    }
  }
  return events;
}

}  // namespace toposched::deviceplugin
