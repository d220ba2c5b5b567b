// A small Kubernetes API client over net::HttpClient (HTTP/1.1, TLS, bearer token or client
// certificate), and the pod writes toposched makes: Binding with annotations, annotation
// merge-patch, Events.
#ifndef TOPOSCHED_KUBE_CLIENT_H_
#define TOPOSCHED_KUBE_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "kube/kubeconfig.h"
#include "kube/objects.h"
#include "net/http_client.h"

namespace toposched::kube {

struct HttpResponse {
  long status = 0;  // NOLINT(google-runtime-int): libcurl's type for the status
  std::string body;
};

// Thread-safe: any number of threads may call it at once. Each call borrows a connection from
// net::HttpClient's small pool (HTTP keep-alive), so back-to-back requests skip the TCP and TLS
// handshakes.
//
// A non-2xx answer is not an error here: the caller gets the status and decides. Errors are
// transport failures (connect, TLS, timeout), carrying curl's message.
class ApiClient {
 public:
  static Result<std::unique_ptr<ApiClient>> Create(ClientConfig config);
  static Result<std::unique_ptr<ApiClient>> FromKubeconfig(const std::string& path);
  static Result<std::unique_ptr<ApiClient>> InCluster(const InClusterOptions& options = {});
  // Flag, then $KUBECONFIG, then in-cluster, then ~/.kube/config (see ConfigFromEnvironment).
  static Result<std::unique_ptr<ApiClient>> FromEnvironment(const std::string& kubeconfig_flag);

  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // `path` starts with '/' and may carry a query ("/api/v1/pods?limit=500").
  Result<HttpResponse> Get(std::string_view path);
  // `timeout` > 0 cuts this request sooner than the client's request timeout. `unsent`
  // (optional): on a transport error, whether no byte of the request reached the server
  // (net::HttpClientRequest::unsent); ClassifyWrite reads it.
  Result<HttpResponse> Post(std::string_view path, std::string_view body,
                            std::string_view content_type = "application/json",
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                            bool* unsent = nullptr);
  // A whole-object update; metadata.resourceVersion in `body` makes it conditional (409 if stale).
  Result<HttpResponse> Put(std::string_view path, std::string_view body);
  Result<HttpResponse> Patch(std::string_view path, std::string_view body,
                             std::string_view content_type = "application/merge-patch+json");
  // Deletes the object at `path` (404 is an answer: the object is gone already).
  Result<HttpResponse> Delete(std::string_view path);

  // Streams a watch response line by line (the '\n' is not included; empty lines are skipped).
  // Returns the HTTP status once the server ends the stream, on_line returns false, `stop`
  // becomes true (noticed within ~50 ms) or `max_duration` (if non-zero) passes. For a non-2xx
  // status no line is delivered. Only transport failures are errors.
  Result<long> Watch(std::string_view path,  // NOLINT(google-runtime-int)
                     const std::function<bool(std::string_view line)>& on_line,
                     const std::atomic<bool>& stop,
                     std::chrono::milliseconds max_duration = std::chrono::milliseconds(0));

  const ClientConfig& config() const { return config_; }

 private:
  struct Request;

  explicit ApiClient(ClientConfig config);
  Result<HttpResponse> Send(const Request& request);
  Result<HttpResponse> SendOnce(const Request& request, const std::string& token);
  // The bearer token to send; re-reads the token file when the reload period has passed or
  // `force_reload` (after a 401). Empty when there is none.
  std::string Token(bool force_reload) TS_EXCLUDES(token_mutex_);

  const ClientConfig config_;
  std::string url_base_;  // scheme://host:port/prefix, with tls_server_name as the host if set
  std::unique_ptr<net::HttpClient> http_;

  Mutex token_mutex_;
  std::string token_ TS_GUARDED_BY(token_mutex_);
  std::chrono::steady_clock::time_point token_read_at_ TS_GUARDED_BY(token_mutex_);
};

// Percent-encodes one path segment or query value (names are DNS labels, but be safe).
std::string EscapeUrlComponent(std::string_view text);

// The message of a Kubernetes Status object in `body`, else the start of the body itself.
std::string StatusMessage(std::string_view body);

// The fence of a write (docs/extender.md, "Leadership and fencing"): how long the write may take
// if it is sent now, or an error when it must not be sent. Evaluated right before sending.
using WriteFence = std::function<Result<std::chrono::milliseconds>()>;

// What the answer to a write proves about whether the API server applied it. The one home of
// this rule (issue 18): callers keep what the write was for until the outcome is known.
enum class WriteOutcome {
  kApplied,     // a 2xx answer
  kNotApplied,  // refused with a 4xx (but 408), or never sent (DNS, connect, TLS handshake)
  kUnknown,     // sent, then no definite answer: a timeout, a 5xx (500, 503, 504 from a proxy
                // that may have applied it), a 408, a connection reset or TLS error mid-reply
};

struct WriteResult {
  WriteOutcome outcome = WriteOutcome::kApplied;
  long http_status = 0;  // NOLINT(google-runtime-int): 0 when no answer came
  std::string error;     // what failed; empty when applied

  bool ok() const { return outcome == WriteOutcome::kApplied; }
  bool unknown() const { return outcome == WriteOutcome::kUnknown; }
  // 409: the write conflicts with the object as it is now (for a Binding: the pod is bound
  // already, perhaps by this very write retried or applied late, or its uid changed).
  bool conflict() const { return http_status == 409; }
  Status ToStatus() const { return ok() ? OkStatus() : Status(Error{error}); }
};

// Classifies a write's answer. `what` names the write in the error; `unsent` is what the client
// reported for a transport error (ApiClient::Post).
WriteResult ClassifyWrite(std::string_view what, const Result<HttpResponse>& response, bool unsent);

// POST /api/v1/namespaces/NS/pods/NAME/binding, classified (see WriteOutcome). The Binding's
// metadata carries the pod's uid as a precondition and `annotations` (see BindPod). A fence that
// refuses means the Binding is not sent (kNotApplied).
WriteResult WriteBinding(ApiClient& client, std::string_view ns, std::string_view name,
                         std::string_view uid, std::string_view node,
                         const std::map<std::string, std::string>& annotations,
                         const WriteFence& fence = nullptr);

// GET /api/v1/namespaces/NS/pods/NAME: the pod, or nullopt when it does not exist (404). Any
// other answer, or no answer, is an error (the pod's state is not known).
Result<std::optional<Pod>> GetPod(ApiClient& client, std::string_view ns, std::string_view name);

// POST /api/v1/namespaces/NS/pods/NAME/binding. The Binding's metadata carries the pod's uid as a
// precondition (a re-created pod of the same name is never bound) and `annotations`, which the
// API server merges into the pod's in the same write. 409 (already bound, or uid mismatch), 404
// and other statuses become errors that include the server's message. With a `fence`, the
// request is cut at its budget by the client and, through `?timeout=`, by the API server; a
// refused fence sends nothing.
Status BindPod(ApiClient& client, std::string_view ns, std::string_view name, std::string_view uid,
               std::string_view node, const std::map<std::string, std::string>& annotations,
               const WriteFence& fence = nullptr);

// JSON merge-patch of metadata.annotations: a value sets the key, nullopt deletes it, and keys not
// named are left alone.
Status PatchPodAnnotations(ApiClient& client, std::string_view ns, std::string_view name,
                           const std::map<std::string, std::optional<std::string>>& annotations);

// JSON merge-patch of one label of Node `node`: a value sets it, nullopt deletes it.
Status PatchNodeLabel(ApiClient& client, std::string_view node, std::string_view key,
                      const std::optional<std::string>& value);

// JSON merge-patch of Node `node`'s annotations: a value sets the key, nullopt deletes it.
Status PatchNodeAnnotations(ApiClient& client, std::string_view node,
                            const std::map<std::string, std::optional<std::string>>& annotations);

// A condition of a pod's status, as SetPodCondition writes it.
struct PodCondition {
  std::string type;
  std::string status;  // "True" or "False"
  std::string reason;
  std::string message;
};

// Sets one condition on the pod's status (a strategic merge by type; the pod's uid is a
// precondition). Other conditions stay.
Status SetPodCondition(ApiClient& client, const Pod& pod, const PodCondition& condition);

// Asks the Eviction API (policy/v1) to evict the pod, uid as a precondition: PodDisruptionBudgets
// are honoured by the API server (its 429 is an error saying a budget blocks it now). A pod that
// is gone already is not an error.
Status EvictPod(ApiClient& client, const Pod& pod);

// The wall clock now as RFC 3339 in UTC, to the second ("2026-11-29T12:00:00Z").
std::string Rfc3339Now();

// Creates a core/v1 Event about `pod` in its namespace. `type` is "Normal" or "Warning".
Status PostPodEvent(ApiClient& client, const Pod& pod, std::string_view type,
                    std::string_view reason, std::string_view message, std::string_view component);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_CLIENT_H_
