#include "net/url_query.h"

#include <cctype>

#include <fmt/format.h>

namespace toposched::net {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> Decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int hi = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return Error{fmt::format("bad percent escape at offset {} (want %XX, two hex digits)", i)};
      }
      const char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return Error{"a percent escape decodes to a NUL byte"};
      out.push_back(decoded);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Error{fmt::format("a control byte (0x{:02x}) at offset {}", static_cast<int>(c), i)};
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> UrlQuery::Get(std::string_view key) const {
  std::optional<std::string> value;
  for (const auto& [k, v] : params) {
    if (k == key) value = v;
  }
  return value;
}

Result<UrlQuery> ParseTarget(std::string_view target) {
  UrlQuery query;
  const size_t mark = target.find('?');
  auto path = Decode(target.substr(0, mark), /*plus_is_space=*/false);
  if (!path.ok()) return Error{"path: " + path.error()};
  query.path = std::move(path).value();
  if (mark == std::string_view::npos) return query;
  std::string_view rest = target.substr(mark + 1);
  rest = rest.substr(0, rest.find('#'));
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    if (query.params.size() == kMaxQueryParams) {
      return Error{fmt::format("more than {} query parameters", kMaxQueryParams)};
    }
    const size_t eq = pair.find('=');
    auto key = Decode(pair.substr(0, eq), true);
    if (!key.ok()) return Error{"query: " + key.error()};
    auto value =
        Decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!value.ok()) return Error{fmt::format("query parameter '{}': {}", *key, value.error())};
    query.params.emplace_back(std::move(key).value(), std::move(value).value());
  }
  return query;
}

std::string UrlEncode(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (const unsigned char c : value) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace toposched::net
