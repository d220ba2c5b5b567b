#include "kube/informer.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kube/decode.h"

namespace toposched::kube {

namespace {

// Lists refused in a row for being older than what was seen, before one is taken anyway: an
// etcd restored from a backup really goes back in time, and the informer must not stall there.
constexpr int kMaxStaleLists = 5;

// etcd's revision as the API server spells a resourceVersion (a decimal integer); nullopt for
// anything else. resourceVersions are opaque to clients in general; the API server's are etcd
// revisions, and only two such are ever compared.
std::optional<uint64_t> RevisionOf(std::string_view resource_version) {
  uint64_t value = 0;
  if (resource_version.empty()) return std::nullopt;
  const char* last = resource_version.data() + resource_version.size();
  const auto [end, error] = std::from_chars(resource_version.data(), last, value);
  if (error != std::errc() || end != last) return std::nullopt;
  return value;
}

// Whether resourceVersion `listed` is older than `seen`; anything not a revision is not older.
bool OlderResourceVersion(std::string_view listed, std::string_view seen) {
  const std::optional<uint64_t> a = RevisionOf(listed);
  const std::optional<uint64_t> b = RevisionOf(seen);
  return a && b && *a < *b;
}

// A list whose continue token keeps expiring is restarted this many times before the informer
// backs off and tries again later.
constexpr int kMaxListRestarts = 3;
// A watch that ends sooner than this without any event counts as a failure, so a server or proxy
// that closes watches at once does not make the informer spin.
constexpr auto kMinHealthyWatch = std::chrono::seconds(1);

Result<ObjectList<Pod>> DecodeList(const simdjson::padded_string& json, const Pod*) {
  return DecodePodList(json);
}
Result<ObjectList<Node>> DecodeList(const simdjson::padded_string& json, const Node*) {
  return DecodeNodeList(json);
}
Result<WatchEvent<Pod>> DecodeEvent(const simdjson::padded_string& json, const Pod*) {
  return DecodePodWatchEvent(json);
}
Result<WatchEvent<Node>> DecodeEvent(const simdjson::padded_string& json, const Node*) {
  return DecodeNodeWatchEvent(json);
}

Result<Pod> DecodeObject(const simdjson::padded_string& json, const Pod*) {
  return DecodePod(json);
}
Result<Node> DecodeObject(const simdjson::padded_string& json, const Node*) {
  return DecodeNode(json);
}

// What an object that does not decode can still tell: its namespace/name (or name) and uid.
struct Identity {
  std::string ns;
  std::string name;
  std::string uid;
  std::string Key() const { return ns.empty() ? name : ns + "/" + name; }
};
Identity IdentityOf(simdjson::dom::element object) {
  Identity id;
  simdjson::dom::element meta;
  if (object["metadata"].get(meta) != simdjson::SUCCESS) return id;
  std::string_view text;
  if (meta["name"].get(text) == simdjson::SUCCESS) id.name = std::string(text);
  if (meta["namespace"].get(text) == simdjson::SUCCESS) id.ns = std::string(text);
  if (meta["uid"].get(text) == simdjson::SUCCESS) id.uid = std::string(text);
  return id;
}
// The object a DELETED event means, when only its identity could be read.
Pod FromIdentity(const Identity& id, const Pod*) {
  Pod pod;
  pod.ns = id.ns;
  pod.name = id.name;
  pod.uid = id.uid;
  return pod;
}
Node FromIdentity(const Identity& id, const Node*) {
  Node node;
  node.name = id.name;
  return node;
}

// What a watch list's initial events are keyed by until they are handed over as one list.
std::string KeyOf(const Pod& pod) { return pod.ns + "/" + pod.name; }
std::string KeyOf(const Node& node) { return node.name; }

// The bookmark that ends a watch list's initial events carries this annotation (any other
// bookmark is only a resourceVersion). Bookmarks are rare: parsing the line again is cheap.
bool EndsInitialEvents(const simdjson::padded_string& line) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  std::string_view value;
  return parser.parse(line).get(root) == simdjson::SUCCESS &&
         root.at_pointer("/object/metadata/annotations/k8s.io~1initial-events-end").get(value) ==
             simdjson::SUCCESS &&
         value == "true";
}

// An ERROR event that answers a watch list with "not served": a 1.27+ server with the WatchList
// gate off names sendInitialEvents; a cache without progress notifications from etcd names
// RequestWatchProgress ("a watch stream was requested by the client but the required storage
// feature RequestWatchProgress is disabled", a 500).
bool RefusesWatchList(int code, std::string_view message) {
  return code == 400 || code == 422 || message.find("RequestWatchProgress") != std::string::npos ||
         message.find("sendInitialEvents") != std::string::npos;
}

std::string_view KindName(const Pod*) { return "pods"; }
std::string_view KindName(const Node*) { return "nodes"; }

// Keeps log lines short when a watch line is huge or binary junk.
std::string Excerpt(std::string_view text) {
  constexpr size_t kMax = 160;
  std::string out(text.substr(0, kMax));
  if (text.size() > kMax) out += "...";
  return out;
}

uint64_t NextRandom(uint64_t& state) {
  // splitmix64: plenty for jitter, and no shared state between informers.
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

template <typename T>
Informer<T>::Informer(ApiClient& client, std::string collection_path, InformerHandlers<T> handlers,
                      InformerOptions options)
    : client_(client),
      collection_path_(std::move(collection_path)),
      handlers_(std::move(handlers)),
      options_(std::move(options)),
      random_state_(
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          reinterpret_cast<uintptr_t>(this)) {}

template <typename T>
Informer<T>::~Informer() {
  Stop();
}

template <typename T>
void Informer<T>::Start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { Run(); });
}

template <typename T>
void Informer<T>::Stop() {
  {
    MutexLock lock(mutex_);
    stop_.store(true);
  }
  end_watch_.store(true);
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

template <typename T>
uint64_t Informer<T>::Relist() {
  const uint64_t ticket = relists_requested_.fetch_add(1) + 1;
  end_watch_.store(true);
  return ticket;
}

template <typename T>
bool Informer<T>::WaitForSync(std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  wake_.WaitFor(mutex_, timeout, [this] { return synced_.load() || stop_.load(); });
  return synced_.load();
}

template <typename T>
void Informer<T>::Delivered(std::string_view resource_version) {
  const std::optional<uint64_t> revision = RevisionOf(resource_version);
  if (!revision) return;
  uint64_t seen = delivered_rv_.load();
  while (*revision > seen && !delivered_rv_.compare_exchange_weak(seen, *revision)) {
  }
  if (rv_waiters_.load() > 0) {
    MutexLock lock(mutex_);
    wake_.NotifyAll();
  }
}

template <typename T>
bool Informer<T>::WaitForResourceVersion(std::string_view resource_version,
                                         std::chrono::milliseconds timeout) {
  const std::optional<uint64_t> wanted = RevisionOf(resource_version);
  if (!wanted || delivered_rv_.load() >= *wanted) return true;
  rv_waiters_.fetch_add(1);
  bool reached = false;
  {
    MutexLock lock(mutex_);
    reached = wake_.WaitFor(mutex_, timeout, [this, &wanted] {
      return delivered_rv_.load() >= *wanted || stop_.load();
    });
  }
  rv_waiters_.fetch_sub(1);
  return reached && delivered_rv_.load() >= *wanted;
}

template <typename T>
InformerCounters Informer<T>::counters() const {
  InformerCounters counters;
  counters.lists = lists_.load();
  counters.relists = counters.lists > 0 ? counters.lists - 1 : 0;
  counters.watches = watches_.load();
  counters.watch_restarts = counters.watches > 0 ? counters.watches - 1 : 0;
  counters.events = events_.load();
  counters.decode_errors = decode_errors_.load();
  counters.skipped = skipped_.load();
  counters.request_errors = request_errors_.load();
  counters.watch_lists = watch_lists_.load();
  counters.watch_list_refused = watch_list_refused_.load();
  return counters;
}

template <typename T>
void Informer<T>::Sleep(std::chrono::milliseconds duration) {
  MutexLock lock(mutex_);
  wake_.WaitFor(mutex_, duration, [this] { return stop_.load(); });
}

template <typename T>
std::chrono::milliseconds Informer<T>::NextBackoff() {
  backoff_ =
      backoff_.count() == 0 ? options_.min_backoff : std::min(backoff_ * 2, options_.max_backoff);
  // Up to +25% jitter so that many clients do not retry in lockstep.
  const auto jitter_range = static_cast<uint64_t>(backoff_.count() / 4 + 1);
  return backoff_ + std::chrono::milliseconds(NextRandom(random_state_) % jitter_range);
}

template <typename T>
std::string Informer<T>::Selectors() const {
  std::string query;
  if (!options_.field_selector.empty()) {
    query += "&fieldSelector=" + EscapeUrlComponent(options_.field_selector);
  }
  if (!options_.label_selector.empty()) {
    query += "&labelSelector=" + EscapeUrlComponent(options_.label_selector);
  }
  return query;
}

template <typename T>
void Informer<T>::Run() {
  const std::string_view kind = KindName(static_cast<const T*>(nullptr));
  bool need_list = true;
  std::string resource_version;
  use_watch_list_ = options_.watch_list;
  while (!stop_.load()) {
    if (need_list && use_watch_list_) {
      // Cleared before the relist requests are read, so a Relist() after this ends the stream.
      end_watch_.store(false);
      const uint64_t requested = relists_requested_.load();
      if (handlers_.on_list_start) handlers_.on_list_start();
      bool listing = true;
      const WatchEnd end = WatchFrom(resource_version, &listing, requested);
      if (stop_.load()) break;
      if (!listing) need_list = false;
      switch (end) {
        case WatchEnd::kRefused:
          use_watch_list_ = false;  // and list at once
          watch_list_refused_.store(true);
          break;
        case WatchEnd::kClosed:
          break;
        case WatchEnd::kGone:
          need_list = true;
          break;
        case WatchEnd::kFailed:
          Sleep(NextBackoff());
          break;
      }
      continue;
    }
    if (need_list) {
      // The relist requests this list answers: those made before it is sent.
      const uint64_t requested = relists_requested_.load();
      Result<std::string> listed = ListAll(resource_version);
      if (stop_.load()) break;
      if (!listed.ok()) {
        const auto wait = NextBackoff();
        spdlog::warn("informer {}: list failed, retrying in {} ms: {}", kind, wait.count(),
                     listed.error());
        Sleep(wait);
        continue;
      }
      resource_version = std::move(*listed);
      need_list = false;
      backoff_ = std::chrono::milliseconds(0);
      relists_delivered_.store(requested);
    }
    // Cleared before the check, so a Relist() after the check ends the watch below.
    end_watch_.store(false);
    if (stop_.load()) break;
    if (relists_requested_.load() > relists_delivered_.load()) {
      spdlog::info("informer {}: listing again on request", kind);
      need_list = true;
      continue;
    }
    switch (WatchFrom(resource_version)) {
      case WatchEnd::kClosed:
        break;  // resume at once from the last resourceVersion
      case WatchEnd::kGone:
        spdlog::info("informer {}: resourceVersion {} is too old, listing again", kind,
                     resource_version);
        need_list = true;
        break;
      case WatchEnd::kFailed:
      case WatchEnd::kRefused:  // only a watch list is refused
        Sleep(NextBackoff());
        break;
    }
  }
}

template <typename T>
void Informer<T>::Skip(const std::string& key, const std::string& error, std::string_view where) {
  skipped_.fetch_add(1);
  spdlog::warn("informer {}: skipping {} in a {}: it does not decode: {}",
               KindName(static_cast<const T*>(nullptr)), key.empty() ? "an object" : key, where,
               error);
  if (handlers_.on_skip) handlers_.on_skip(key, error);
}

template <typename T>
Result<ObjectList<T>> Informer<T>::DecodePageByItem(const std::string& body,
                                                    const std::string& why) {
  const T* tag = nullptr;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::array items;
  if (parser.parse(body).get(root) != simdjson::SUCCESS ||
      root["items"].get(items) != simdjson::SUCCESS) {
    return Error{why};  // not a list at all: the page fails
  }
  ObjectList<T> list;
  simdjson::dom::element meta;
  if (root["metadata"].get(meta) == simdjson::SUCCESS) {
    std::string_view text;
    if (meta["resourceVersion"].get(text) == simdjson::SUCCESS) {
      list.resource_version = std::string(text);
    }
    if (meta["continue"].get(text) == simdjson::SUCCESS) list.continue_token = std::string(text);
  }
  std::vector<std::pair<std::string, std::string>> bad;
  for (simdjson::dom::element item : items) {
    Result<T> decoded = DecodeObject(simdjson::padded_string(simdjson::minify(item)), tag);
    if (decoded.ok()) {
      list.items.push_back(std::move(decoded).value());
    } else {
      bad.emplace_back(IdentityOf(item).Key(), decoded.error());
    }
  }
  // Every item decodes: the page's own fields are what failed, and a list without them (its
  // resourceVersion) cannot be watched from.
  if (bad.empty()) return Error{why};
  for (const auto& [key, error] : bad) Skip(key, error, "list");
  return list;
}

template <typename T>
Result<std::string> Informer<T>::ListAll(const std::string& seen) {
  const T* tag = nullptr;
  std::vector<T> all;
  std::string continue_token;
  std::string resource_version;
  int restarts = 0;
  if (handlers_.on_list_start) handlers_.on_list_start();
  while (!stop_.load()) {
    std::string path =
        fmt::format("{}?limit={}{}", collection_path_, options_.page_size, Selectors());
    if (!continue_token.empty()) path += "&continue=" + EscapeUrlComponent(continue_token);
    Result<HttpResponse> response = client_.Get(path);
    if (!response.ok()) {
      request_errors_.fetch_add(1);
      return Error{response.error()};
    }
    if (response->status == 410 && !continue_token.empty() && restarts < kMaxListRestarts) {
      // The continue token expired between pages: the snapshot is gone, start over.
      ++restarts;
      all.clear();
      continue_token.clear();
      continue;
    }
    if (response->status != 200) {
      request_errors_.fetch_add(1);
      return Error{fmt::format("GET {}: HTTP {}: {}", path, response->status,
                               StatusMessage(response->body))};
    }
    Result<ObjectList<T>> page = DecodeList(simdjson::padded_string(response->body), tag);
    if (!page.ok()) {
      // One object the decoder refuses must not fail every list: decode item by item.
      decode_errors_.fetch_add(1);
      page = DecodePageByItem(response->body, fmt::format("GET {}: {}", path, page.error()));
      if (!page.ok()) return Error{page.error()};
    }
    if (all.empty()) {
      all = std::move(page->items);
    } else {
      std::move(page->items.begin(), page->items.end(), std::back_inserter(all));
    }
    resource_version = std::move(page->resource_version);
    if (page->continue_token.empty()) break;
    continue_token = std::move(page->continue_token);
  }
  if (stop_.load()) return Error{"stopped"};
  return DeliverList(std::move(all), std::move(resource_version), seen);
}

template <typename T>
Result<std::string> Informer<T>::DeliverList(std::vector<T>&& all, std::string resource_version,
                                             const std::string& seen) {
  // A quorum list is never older than what the watch delivered; one that is comes from a lagging
  // cache or proxy, and would take back objects changed since (a pod bound meanwhile: its hold
  // dropped, its devices given again; issue 18, row 3). List again instead.
  if (OlderResourceVersion(resource_version, seen) && stale_lists_in_a_row_ < kMaxStaleLists) {
    ++stale_lists_in_a_row_;
    request_errors_.fetch_add(1);
    return Error{fmt::format(
        "the list's resourceVersion {} is older than {}, already seen: a stale snapshot, not "
        "delivered",
        resource_version, seen)};
  }
  stale_lists_in_a_row_ = 0;
  if (handlers_.on_replace) handlers_.on_replace(std::move(all));
  Delivered(resource_version);
  lists_.fetch_add(1);
  if (!synced_.load()) {
    {
      MutexLock lock(mutex_);
      synced_.store(true);
    }
    wake_.NotifyAll();
  }
  return resource_version;
}

template <typename T>
typename Informer<T>::WatchEnd Informer<T>::WatchFrom(std::string& resource_version,
                                                      bool* watch_list, uint64_t requested) {
  const T* tag = nullptr;
  const std::string_view kind = KindName(tag);
  const auto timeout =
      options_.watch_timeout +
      std::chrono::seconds(NextRandom(random_state_) % static_cast<uint64_t>(std::max<int64_t>(
                                                           1, options_.watch_timeout.count())));
  // A watch list names no resourceVersion: its initial events are a consistent read (the API
  // server makes its cache catch up with etcd first), as fresh as a quorum LIST.
  const bool listing_requested = watch_list != nullptr && *watch_list;
  const std::string path =
      listing_requested
          ? fmt::format(
                "{}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&"
                "allowWatchBookmarks=true&timeoutSeconds={}{}",
                collection_path_, timeout.count(), Selectors())
          : fmt::format(
                "{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={}{}",
                collection_path_, EscapeUrlComponent(resource_version), timeout.count(),
                Selectors());
  watches_.fetch_add(1);
  const std::string seen = resource_version;  // what a watch list must not be older than
  bool listing = listing_requested;           // until the initial events end
  std::map<std::string, T> initial;           // a watch list's objects until then

  bool gone = false;
  bool error_event = false;
  bool stale = false;
  std::string refusal;  // why the server does not serve a watch list
  uint64_t handled = 0;
  simdjson::padded_string padded;
  auto on_line = [&](std::string_view line) {
    padded = simdjson::padded_string(line);
    Result<WatchEvent<T>> event = DecodeEvent(padded, tag);
    if (!event.ok()) {
      decode_errors_.fetch_add(1);
      // Name what is skipped when the line is JSON at all; a deletion is still a deletion.
      simdjson::dom::parser parser;
      simdjson::dom::element root;
      simdjson::dom::element object;
      std::string_view type;
      if (parser.parse(padded).get(root) == simdjson::SUCCESS &&
          root["object"].get(object) == simdjson::SUCCESS) {
        const Identity id = IdentityOf(object);
        Skip(id.Key(), fmt::format("{} (event: {})", event.error(), Excerpt(line)), "watch");
        if (root["type"].get(type) == simdjson::SUCCESS && type == "DELETED" && !id.name.empty()) {
          const T deleted = FromIdentity(id, tag);
          if (listing) {
            initial.erase(KeyOf(deleted));
          } else if (handlers_.on_delete) {
            handlers_.on_delete(deleted);
          }
        }
      } else {
        Skip({}, fmt::format("{} (event: {})", event.error(), Excerpt(line)), "watch");
      }
      return true;
    }
    events_.fetch_add(1);
    ++handled;
    // A watch list's resourceVersion counts only once its initial events are all in.
    if (!listing && event->type != WatchEventType::kError && !event->resource_version.empty()) {
      resource_version = event->resource_version;
    }
    if (listing) {
      switch (event->type) {
        case WatchEventType::kAdded:
        case WatchEventType::kModified:
          initial.insert_or_assign(KeyOf(event->object), std::move(event->object));
          return true;
        case WatchEventType::kDeleted:
          initial.erase(KeyOf(event->object));
          return true;
        case WatchEventType::kBookmark: {
          if (!EndsInitialEvents(padded)) return true;
          if (event->resource_version.empty()) {
            spdlog::warn("informer {}: a watch list ended without a resourceVersion", kind);
            stale = true;
            return false;
          }
          std::vector<T> all;
          all.reserve(initial.size());
          for (auto& [key, object] : initial) all.push_back(std::move(object));
          initial.clear();
          const size_t count = all.size();  // the list is the handler's once delivered
          Result<std::string> delivered =
              DeliverList(std::move(all), event->resource_version, seen);
          if (!delivered.ok()) {
            spdlog::warn("informer {}: watch list not delivered: {}", kind, delivered.error());
            stale = true;
            return false;
          }
          resource_version = event->resource_version;
          listing = false;
          *watch_list = false;
          watch_lists_.fetch_add(1);
          relists_delivered_.store(requested);
          backoff_ = std::chrono::milliseconds(0);
          spdlog::log(watch_lists_.load() == 1 ? spdlog::level::info : spdlog::level::debug,
                      "informer {}: {} objects from a watch list at resourceVersion {}", kind,
                      count, resource_version);
          return true;
        }
        case WatchEventType::kError:
          break;  // below
      }
    }
    switch (event->type) {
      case WatchEventType::kAdded:
      case WatchEventType::kModified:
        if (handlers_.on_upsert) handlers_.on_upsert(event->object);
        Delivered(event->resource_version);
        return true;
      case WatchEventType::kDeleted:
        if (handlers_.on_delete) handlers_.on_delete(event->object);
        Delivered(event->resource_version);
        return true;
      case WatchEventType::kBookmark:
        Delivered(event->resource_version);
        return true;
      case WatchEventType::kError:
        if (event->error_code == 410) {
          gone = true;
        } else if (listing && RefusesWatchList(event->error_code, event->error_message)) {
          refusal = fmt::format("ERROR event {}: {}", event->error_code, event->error_message);
        } else {
          error_event = true;
          spdlog::warn("informer {}: watch error {}: {}", kind, event->error_code,
                       event->error_message);
        }
        return false;
    }
    return true;
  };

  const auto started = std::chrono::steady_clock::now();
  Result<long> status =  // NOLINT(google-runtime-int)
      client_.Watch(path, on_line, end_watch_, timeout + std::chrono::seconds(30));
  if (!status.ok()) {
    if (stop_.load() || end_watch_.load()) return WatchEnd::kClosed;
    request_errors_.fetch_add(1);
    spdlog::warn("informer {}: watch failed: {}", kind, status.error());
    return WatchEnd::kFailed;
  }
  if (stop_.load() || end_watch_.load()) return WatchEnd::kClosed;  // stopped, or a relist
  if (*status == 410 || gone) return WatchEnd::kGone;
  if (stale) return WatchEnd::kFailed;
  if (listing) {
    // 1.20-1.26 answer 422 ("resourceVersionMatch is forbidden for watch"), as does a server with
    // the WatchList gate off; a stream that ends before its initial events did (200, no bookmark)
    // is one the server did not make a watch list of.
    if (refusal.empty() && (*status == 400 || *status == 422)) {
      refusal = fmt::format("HTTP {}", *status);
    } else if (refusal.empty() && *status == 200 && !error_event) {
      refusal = fmt::format(
          "the stream ended after {} events without the bookmark that ends its "
          "initial events",
          handled);
    }
    if (!refusal.empty()) {
      spdlog::warn(
          "informer {}: the API server does not serve watch lists ({}); listing with "
          "LIST and WATCH from now on",
          kind, refusal);
      return WatchEnd::kRefused;
    }
  }
  if (*status != 200 || error_event) {
    if (*status != 200) {
      request_errors_.fetch_add(1);
      spdlog::warn("informer {}: watch answered HTTP {}{}", kind, *status,
                   *status == 401 || *status == 403
                       ? " (not allowed: the account's role must grant watch on this resource; "
                         "see deploy/*-rbac.yaml)"
                       : "");
    }
    return WatchEnd::kFailed;
  }
  if (handled == 0 && std::chrono::steady_clock::now() - started < kMinHealthyWatch &&
      !stop_.load()) {
    return WatchEnd::kFailed;
  }
  backoff_ = std::chrono::milliseconds(0);
  return WatchEnd::kClosed;
}

template class Informer<Pod>;
template class Informer<Node>;

}  // namespace toposched::kube
