// libFuzzer target for the admission webhook's reader (webhook::Decide), which reads whatever
// reaches POST /mutate-pods: deciding never crashes, an error has a message, and a decision is
// coherent (a patch exactly when a claim is added, each size within bounds, a refusal says why).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "webhook/count_requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace toposched::webhook;  // NOLINT(google-build-using-namespace): a fuzz harness
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto decision = Decide(text);
  if (!decision.ok()) {
    if (decision.error().empty()) std::abort();
    return 0;
  }
  const Decision& d = *decision;
  if (d.uid.empty()) std::abort();
  if (!d.allowed && (d.message.empty() || !d.patch.empty() || !d.templates.empty())) std::abort();
  if (d.patch.empty() != d.templates.empty()) std::abort();
  if (!d.patch.empty() && (d.patch.front() != '[' || d.patch.back() != ']')) std::abort();
  for (const ClaimSize& s : d.templates) {
    if (s.count < 1 || s.count > kMaxCount) std::abort();
    if (TemplateJson(d.ns, s).empty() || TemplateName(s).empty()) std::abort();
  }
  if (ResponseJson(d).empty()) std::abort();
  return 0;
}
