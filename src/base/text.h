#pragma once

// Small text helpers every module shares, so that each rule has one spelling: what white space
// is, what a decimal number is, and how a secret is read from a file.

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched {

// ASCII white space, the one idea of it: space, tab, newline, carriage return, vertical tab,
// form feed. A CRLF file's '\r' goes with its line end.
constexpr bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

constexpr std::string_view TrimSpace(std::string_view text) {
  while (!text.empty() && IsAsciiSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsAsciiSpace(text.back())) text.remove_suffix(1);
  return text;
}

// A decimal integer in [min, max] written as digits only: no sign, no white space, no leading '+',
// nothing after it (the form Kubernetes objects, sysfs and our flags write counts and ids in).
// nullopt otherwise, including overflow; each caller words its own error.
constexpr std::optional<int64_t> ParseDecimal(std::string_view text, int64_t min, int64_t max) {
  if (text.empty() || text.size() > 18) return std::nullopt;  // 18 digits cannot overflow
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value < min || value > max) return std::nullopt;
  return value;
}

// Whether a token can go into an HTTP header as it is: no control characters, which would split or
// corrupt the header.
constexpr bool IsTokenSafe(std::string_view token) {
  for (char c : token) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// A bearer token from a file (a mounted secret): the whole file, surrounding white space dropped
// (so a CRLF or a trailing newline never reaches the Authorization header), refused when empty or
// not IsTokenSafe.
inline Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read token file " + path};
  std::ostringstream text;
  text << in.rdbuf();
  std::string token(TrimSpace(text.str()));
  if (token.empty()) return Error{"token file " + path + " is empty"};
  if (!IsTokenSafe(token)) return Error{"token file " + path + " holds control characters"};
  return token;
}

}  // namespace toposched
