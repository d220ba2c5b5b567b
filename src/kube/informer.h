// List-then-watch informers for pods and nodes, on their own thread.
//
// With InformerOptions::watch_list the informer first asks for a watch list: one watch that
// streams every object (sendInitialEvents=true) up to a bookmark marked k8s.io/initial-events-end,
// a consistent snapshot the API server serves from its watch cache instead of a paginated LIST
// from etcd (Kubernetes 1.27+ with the WatchList feature, on by default from 1.34). The set goes to
// on_replace at that bookmark and the same stream goes on as the watch. A server that refuses it
// (1.20-1.26: "resourceVersionMatch is forbidden for watch"; the WatchList gate off; an etcd
// without progress notifications: an ERROR event naming RequestWatchProgress) or ends the stream
// before the bookmark is asked with LIST+WATCH from then on (logged once, counted).
//
// Otherwise the informer lists the collection (paginated), hands the whole set to on_replace, then
// watches from the list's resourceVersion with bookmarks, calling on_upsert / on_delete per event.
// When the server ends a watch it resumes from the last resourceVersion seen; when history is gone
// (410, as an HTTP status or an ERROR event) it lists again and calls on_replace; other failures
// reconnect after a capped exponential backoff. Objects that fail to decode are logged (with their
// namespace/name when it can be read), counted and skipped, in a list as in a watch: one bad
// object never fails a list (a relist that failed on it forever would freeze the informer on its
// last list). A DELETED event whose object does not decode still deletes it by name and uid.
// Handlers run on the informer's thread, one at a time.
#ifndef TOPOSCHED_KUBE_INFORMER_H_
#define TOPOSCHED_KUBE_INFORMER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "kube/client.h"
#include "kube/objects.h"

namespace toposched::kube {

struct InformerOptions {
  std::string field_selector;  // e.g. "spec.nodeName=node-1" for a device plugin
  std::string label_selector;
  int page_size = 500;
  // The server ends each watch after a random time in [t, 2t), which spreads reconnections of
  // many clients; the client gives up 30 s after that if the server did not.
  std::chrono::seconds watch_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds min_backoff{200};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  // Ask for a watch list first (see above); false: paginated LIST then WATCH only.
  bool watch_list = false;
};

template <typename T>
struct InformerHandlers {
  // After every (re)list. The list is the handler's: it may move the objects out (the extender
  // frees each pod once read, so a large list and the state built from it are not in memory
  // at once).
  std::function<void(std::vector<T>&& all)> on_replace;
  std::function<void(const T& object)> on_upsert;  // ADDED, MODIFIED
  std::function<void(const T& object)> on_delete;  // DELETED
  // Just before each list's first page is requested: what the consumer learns after this point
  // is newer than the list (the extender's relist merge, tracker::RebuildScope).
  std::function<void()> on_list_start{};
  // An object skipped because it does not decode: its "namespace/name" (or name; empty when not
  // even that can be read) and why. For a metric; the informer logs it already.
  std::function<void(const std::string& key, const std::string& error)> on_skip{};
};

// A snapshot of the informer's counters, for metrics.
struct InformerCounters {
  uint64_t lists = 0;               // completed lists, the first one included
  uint64_t relists = 0;             // completed lists after the first (410 Gone, ...)
  uint64_t watches = 0;             // watch requests opened
  uint64_t watch_restarts = 0;      // watch requests after the first
  uint64_t events = 0;              // watch events handled (bookmarks included)
  uint64_t decode_errors = 0;       // list pages or events that failed to decode
  uint64_t skipped = 0;             // objects skipped in lists and watches: they did not decode
  uint64_t request_errors = 0;      // transport failures and unexpected HTTP statuses
  uint64_t watch_lists = 0;         // lists (in `lists`) delivered from a watch list's stream
  bool watch_list_refused = false;  // the server refused a watch list: LIST+WATCH since
};

template <typename T>
class Informer {
 public:
  // `collection_path` is the API path of the collection, e.g. "/api/v1/pods". The client must
  // outlive the informer.
  Informer(ApiClient& client, std::string collection_path, InformerHandlers<T> handlers,
           InformerOptions options = {});
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Starts the thread; does nothing if it is running.
  void Start();
  // Ends the current request promptly (within ~50 ms) and joins the thread.
  void Stop();

  // True once the first list has been delivered to on_replace.
  bool Synced() const { return synced_.load(); }
  // Ends the watch under way and lists again (every list is a consistent read: no resourceVersion,
  // so a LIST is answered from etcd and a watch list from a cache made to catch up with etcd
  // first, never from a cache that may lag). Returns a ticket:
  // RelistsDelivered() >= ticket once a list *sent after this call* has been delivered to
  // on_replace; a list already under way when it is called does not count. A new leader calls it
  // and serves only once its ticket is delivered (docs/extender.md, "Leadership and fencing").
  uint64_t Relist();
  uint64_t RelistsDelivered() const { return relists_delivered_.load(); }
  // Waits until Synced() or the timeout passes; returns Synced().
  bool WaitForSync(std::chrono::milliseconds timeout);
  // Waits until the handlers have been given a list, event or bookmark at least as new as
  // `resource_version`, or the timeout passes; true when they have. An object that came from
  // another client's watch (kube-scheduler's pod in a filter call) can be newer than what this
  // informer has delivered: waiting lets the caller see what that client had seen. A
  // resourceVersion that is not a number is not waited for (true): they are opaque to clients, and
  // comparing them relies on etcd's being increasing integers, which every API server gives.
  bool WaitForResourceVersion(std::string_view resource_version, std::chrono::milliseconds timeout);
  // The newest resourceVersion delivered to the handlers (0 before the first list).
  uint64_t DeliveredResourceVersion() const { return delivered_rv_.load(); }
  InformerCounters counters() const;

 private:
  // kRefused: a watch list the server does not serve (ask with LIST from then on).
  enum class WatchEnd { kClosed, kGone, kFailed, kRefused };

  void Run();
  // Lists every page and calls on_replace; returns the list's resourceVersion. `seen` is the
  // newest resourceVersion already delivered (empty at the start): a list older than it is not
  // delivered but refused as an error (see kMaxStaleLists in informer.cc).
  Result<std::string> ListAll(const std::string& seen);
  // A page that failed to decode as a whole, item by item: the items that decode, the list's
  // metadata, and each one that does not skipped (counted, logged, on_skip). An error only when
  // the page is not a list at all.
  Result<ObjectList<T>> DecodePageByItem(const std::string& body, const std::string& why);
  void Skip(const std::string& key, const std::string& error, std::string_view where);
  // After the handlers took something at `resource_version`: moves delivered_rv_ on, wakes waiters.
  void Delivered(std::string_view resource_version);
  // Watches from `resource_version` (moved on with every event). With `watch_list`: a watch list
  // instead, whose initial set goes to on_replace at its end bookmark (then *watch_list is set to
  // false: listed), answering the relist requests up to `requested`.
  WatchEnd WatchFrom(std::string& resource_version, bool* watch_list = nullptr,
                     uint64_t requested = 0);
  // Hands a complete list (a LIST's pages or a watch list's initial events) to on_replace, unless
  // it is older than `seen` (then an error). Marks the informer synced.
  Result<std::string> DeliverList(std::vector<T>&& all, std::string resource_version,
                                  const std::string& seen);
  std::string Selectors() const;
  // Sleeps unless Stop() is called first.
  void Sleep(std::chrono::milliseconds duration);
  std::chrono::milliseconds NextBackoff();

  ApiClient& client_;
  const std::string collection_path_;
  const InformerHandlers<T> handlers_;
  const InformerOptions options_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> end_watch_{false};  // ends the current watch (Stop, Relist)
  std::atomic<uint64_t> relists_requested_{0};
  std::atomic<uint64_t> relists_delivered_{0};
  std::atomic<bool> synced_{false};
  std::atomic<uint64_t> delivered_rv_{0};
  std::atomic<int> rv_waiters_{
      0};        // WaitForResourceVersion callers: only then is a delivery notified
  Mutex mutex_;  // guards the waits below
  CondVar wake_;
  std::chrono::milliseconds backoff_{0};
  int stale_lists_in_a_row_ = 0;  // the Run thread's only
  bool use_watch_list_ = false;   // the Run thread's only: options_.watch_list until refused
  std::atomic<bool> watch_list_refused_{false};
  std::atomic<uint64_t> watch_lists_{0};
  uint64_t random_state_;

  std::atomic<uint64_t> lists_{0};
  std::atomic<uint64_t> watches_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> decode_errors_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> request_errors_{0};
};

extern template class Informer<Pod>;
extern template class Informer<Node>;

using PodInformer = Informer<Pod>;
using NodeInformer = Informer<Node>;

inline constexpr const char* kPodsPath = "/api/v1/pods";
inline constexpr const char* kNodesPath = "/api/v1/nodes";

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_INFORMER_H_
