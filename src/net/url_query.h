// The path and query of a request target ("/v1/why?pod=team-a%2Ftrain-0"), percent-decoded.
// Targets come from any client that reaches the server: bad escapes and oversized queries are
// errors, never crashes (fuzz/url_query_fuzz.cc).
#ifndef TOPOSCHED_NET_URL_QUERY_H_
#define TOPOSCHED_NET_URL_QUERY_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace toposched::net {

struct UrlQuery {
  std::string path;                                         // decoded
  std::vector<std::pair<std::string, std::string>> params;  // in order; a key without '=' has ""

  // The last value given for `key`, if any.
  std::optional<std::string> Get(std::string_view key) const;
};

inline constexpr size_t kMaxQueryParams = 32;

// Splits and decodes; '+' in the query is a space. Errors name what is wrong.
Result<UrlQuery> ParseTarget(std::string_view target);

// A query parameter's value percent-encoded (the inverse of ParseTarget's decoding): letters,
// digits and -._~/ stay, everything else is %XX.
std::string UrlEncode(std::string_view value);

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_URL_QUERY_H_
