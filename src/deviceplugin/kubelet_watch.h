// Watches kubelet's device-plugin directory with inotify: a restarting kubelet deletes every
// plugin socket there and creates a new kubelet.sock, and the plugin must then serve again and
// re-register.
#ifndef TOPOSCHED_DEVICEPLUGIN_KUBELET_WATCH_H_
#define TOPOSCHED_DEVICEPLUGIN_KUBELET_WATCH_H_

#include <chrono>
#include <string>
#include <vector>

namespace toposched::deviceplugin {

class DirectoryWatch {
 public:
  struct Event {
    std::string name;      // file name inside the directory
    bool created = false;  // created or moved in; else deleted or moved out
  };

  explicit DirectoryWatch(std::string directory);
  ~DirectoryWatch();
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  // Waits up to `timeout` for changes. When the directory is missing (or was removed and
  // re-created), it keeps trying to watch it and reports `watching() == false` meanwhile; callers
  // also poll, so nothing depends on inotify alone.
  std::vector<Event> Wait(std::chrono::milliseconds timeout);
  bool watching() const { return watch_ >= 0; }

 private:
  void TryWatch();

  const std::string directory_;
  int fd_ = -1;
  int watch_ = -1;
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_KUBELET_WATCH_H_
