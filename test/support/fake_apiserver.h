// An in-process fake kube-apiserver for tests: HTTPS (Boost.Beast + Asio SSL) on 127.0.0.1 with an
// ephemeral port and a CA made at start-up, bearer-token or client-certificate auth, and the few
// API calls toposched makes: list and watch pods and nodes, get one, bind a pod, merge-patch a
// pod or a node, create events, get/create/update leases, list/get/create/update/delete
// ResourceSlices. Tests drive it: add and change objects (watchers get the events), send bookmarks,
// expire history (410), end or drop watch connections, inject failures and delays, and read back
// every request it got.
//
// One io thread serves every connection; the destructor stops it. Only loopback is used.
#ifndef TOPOSCHED_TEST_SUPPORT_FAKE_APISERVER_H_
#define TOPOSCHED_TEST_SUPPORT_FAKE_APISERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace toposched::testing {

enum class Kind { kPod, kNode };

// How a watch from an expired resourceVersion is refused.
enum class TooOldMode {
  kHttp410,     // the watch request itself answers 410 Gone
  kErrorEvent,  // 200, then one ERROR event carrying a Status with code 410
};

// How a watch list (watch=1&sendInitialEvents=true) is answered.
enum class WatchListMode {
  kServe,             // every object as ADDED, then the initial-events-end bookmark (1.34+)
  kRefuseInvalid,     // 422 "resourceVersionMatch is forbidden for watch" (1.20-1.26)
  kRefuseErrorEvent,  // 200, then an ERROR event 500 naming RequestWatchProgress (etcd < 3.4.31)
  kIgnore,            // the parameters ignored: a plain watch, never the bookmark
};

// What a write of a ResourceSlice carrying spec.sharedCounters gets (DRAPartitionableDevices).
enum class SharedCountersMode {
  kKeep,    // the gate on: stored as sent
  kDrop,    // the gate off: the field (and devices' consumesCounters) silently dropped
  kRefuse,  // a server that does not know the field: 400, strict decoding error
};

// What a write of a ResourceSlice whose devices carry taints gets (DRADeviceTaints, GA in 1.37).
enum class DeviceTaintsMode {
  kKeep,  // 1.37: stored as sent
  kDrop,  // the gate off (1.34): devices' taints silently dropped
};

struct RecordedRequest {
  std::string method;
  std::string target;  // path and query, as sent
  std::string path;
  std::string query;
  std::string authorization;
  std::string content_type;
  std::string body;
};

// The next `times` requests matching `method` (empty: any) and `path_prefix` wait `delay`, then
// answer `status` with a Status body (status 0: handled normally after the delay).
struct FailureRule {
  std::string method;
  std::string path_prefix;
  int status = 500;
  std::chrono::milliseconds delay{0};
  int times = 1;  // negative: forever
  // A write the server applies but answers `status` anyway (a 504 from a proxy or a timeout
  // after the write reached storage): a pod Binding or merge-patch is done, then the answer is
  // replaced. Other requests are not applied.
  bool apply_first = false;
  // Held, after `delay`, until ReleaseHeld(): a write that reached the server and waits there
  // (its client may die meanwhile). Released past its `?timeout=` (counted from its arrival) it
  // is answered 504 and not applied, as kube-apiserver abandons a request at that deadline.
  bool hold = false;
};

struct KubeconfigOptions {
  bool embed_ca = true;  // certificate-authority-data; else certificate-authority: ca_file
  std::string ca_file;   // used when !embed_ca
  bool use_token = true;
  std::string token;            // empty: the server's token
  bool use_token_file = false;  // tokenFile: token_file instead of token
  std::string token_file;
  bool client_certificate = false;  // client-certificate-data + client-key-data
  std::string tls_server_name;
  bool exec_user = false;  // an exec plugin user (unsupported by the client)
};

class FakeApiServer {
 public:
  struct Options {
    std::string token = "test-token";
  };

  FakeApiServer();
  explicit FakeApiServer(Options options);
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  int port() const;
  std::string url() const;  // https://127.0.0.1:PORT
  const std::string& ca_pem() const;
  const std::string& client_cert_pem() const;
  const std::string& client_key_pem() const;
  void set_token(std::string token);

  // Objects are the API's JSON. Upserts assign the next resourceVersion and send ADDED or
  // MODIFIED to matching watches; deletes send DELETED. Return the new resourceVersion.
  int64_t UpsertPod(std::string_view json);
  int64_t UpsertNode(std::string_view json);
  int64_t DeletePod(std::string_view ns, std::string_view name);
  int64_t DeleteNode(std::string_view name);
  std::optional<std::string> GetPodJson(std::string_view ns, std::string_view name) const;
  std::optional<std::string> GetNodeJson(std::string_view name) const;
  // coordination.k8s.io/v1 Leases: served for GET, POST and PUT (conditional on
  // metadata.resourceVersion, 409 when stale). PutLease stores one as another process would.
  std::optional<std::string> GetLeaseJson(std::string_view ns, std::string_view name) const;
  int64_t PutLease(std::string_view json);
  // Deletes a Lease as an operator would (kubectl delete lease); false if there was none.
  bool DeleteLease(std::string_view ns, std::string_view name);
  // A GET of exactly `path` (any query) is answered `status` with `body` as-is, before any other
  // route: an object this fake does not model (a ResourceClaim, say). A later call for the same
  // path replaces it; Unserve forgets it.
  void ServeJson(std::string path, std::string body, int status = 200);
  void Unserve(const std::string& path);
  int64_t resource_version() const;
  // resource.k8s.io/v1 ResourceSlices: listed (fieldSelector spec.nodeName, spec.driver;
  // limit/continue), read, created (409 if it exists; assigns resourceVersion and uid),
  // updated (409 on a stale metadata.resourceVersion) and deleted. PutResourceSlice stores one
  // as another writer would.
  std::optional<std::string> GetResourceSliceJson(std::string_view name) const;
  std::vector<std::string> ResourceSliceNames() const;  // sorted
  int64_t PutResourceSlice(std::string_view json);
  void set_shared_counters_mode(SharedCountersMode mode);
  // A create with ?dryRun=All is answered as a create would be and not stored.
  void set_device_taints_mode(DeviceTaintsMode mode);

  // Sends a BOOKMARK at the current resourceVersion to every open watch of `kind`.
  void SendBookmark(Kind kind);
  // Sends `line` as-is (a malformed event, say) to every open watch of `kind`.
  void SendRawWatchLine(Kind kind, std::string line);
  // Forgets the event history: a watch from an older resourceVersion is too old.
  void CompactHistory();
  void set_too_old_mode(TooOldMode mode);
  // The next `count` watches of `kind` are refused as too old, whatever their resourceVersion.
  void RejectNextWatchesAsTooOld(Kind kind, int count);
  void set_watch_list_mode(WatchListMode mode);
  // The next `count` pod LISTs (first pages) are answered 200 with `body` as-is: a stale snapshot
  // (an older resourceVersion), as a lagging cache or proxy in front of the API server would give.
  void AnswerNextPodListsWith(std::string body, int count);
  // Ends every open watch of `kind` cleanly (final chunk), as the server does at timeoutSeconds.
  void EndWatches(Kind kind);
  // Closes the connections of every open watch of `kind` abruptly, mid-stream.
  void DropWatchConnections(Kind kind);

  int open_watches(Kind kind) const;
  int watches_started(Kind kind) const;  // watch requests answered with a stream
  // Polls until open_watches(kind) >= count; false on timeout.
  bool WaitForOpenWatches(Kind kind, int count,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  int connections_accepted() const;

  void InjectFailure(FailureRule rule);
  // Requests held by a `hold` rule right now; ReleaseHeld lets every one of them go on and
  // returns once each was applied, or answered 504 past its deadline.
  int held() const;
  void ReleaseHeld();
  // Forgets every injected failure, used up or not.
  void ClearFailures();

  std::vector<RecordedRequest> requests() const;
  std::vector<RecordedRequest> RequestsMatching(std::string_view method,
                                                std::string_view path_prefix) const;

  // Writes a kubeconfig pointing at this server (context "fake") and returns `path`.
  std::string WriteKubeconfig(const std::string& path, const KubeconfigOptions& options = {}) const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Reads a file of the source tree (relative to its root), aborting if it is missing.
std::string ReadSourceFile(const std::string& relative_path);

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_FAKE_APISERVER_H_
