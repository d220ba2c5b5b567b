// The ResourceClaimTemplates the count-request rewrite names (count_requests.h) must exist in the
// pod's namespace before the pod does: the resourceclaim controller makes the pod's claim from
// it. Created on demand, once per namespace and size, and remembered for a while (a template
// deleted by hand is made again at the next pod after that). Thread-safe.
#ifndef TOPOSCHED_WEBHOOK_TEMPLATE_STORE_H_
#define TOPOSCHED_WEBHOOK_TEMPLATE_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "webhook/count_requests.h"

namespace toposched::webhook {

// POSTs `body` to `path` on the API server: the HTTP status and the body of the answer, or a
// transport error.
struct CreateAnswer {
  long status = 0;  // NOLINT(google-runtime-int): libcurl's type
  std::string body;
};
using CreateFunction =
    std::function<Result<CreateAnswer>(std::string_view path, std::string_view body)>;

struct TemplateStoreStats {
  uint64_t created = 0;  // 201
  uint64_t existed = 0;  // 409 AlreadyExists
  uint64_t failed = 0;   // any other answer, or no answer
  uint64_t cached = 0;   // known to exist: no call
};

class TemplateStore {
 public:
  // `remember`: how long a template known to exist is not asked for again.
  TemplateStore(CreateFunction create, std::chrono::nanoseconds remember);

  // Makes sure each template of `sizes` exists in `ns`; `now` is a steady clock reading. The
  // error names the template and what the API server said.
  Status Ensure(std::string_view ns, const std::vector<ClaimSize>& sizes,
                std::chrono::nanoseconds now) TS_EXCLUDES(mutex_);
  TemplateStoreStats stats() const TS_EXCLUDES(mutex_);

 private:
  const CreateFunction create_;
  const std::chrono::nanoseconds remember_;
  mutable Mutex mutex_;
  // "ns/name" -> when it was last known to exist.
  std::map<std::string, std::chrono::nanoseconds, std::less<>> known_ TS_GUARDED_BY(mutex_);
  TemplateStoreStats stats_ TS_GUARDED_BY(mutex_);
};

}  // namespace toposched::webhook

#endif  // TOPOSCHED_WEBHOOK_TEMPLATE_STORE_H_
