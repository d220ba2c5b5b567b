// Minimal JSON string quoting for the CLI's --json output (the values we print are ids, names and
// messages; parsing JSON lives with the code that receives it).
#ifndef TOPOSCHED_BASE_JSON_ESCAPE_H_
#define TOPOSCHED_BASE_JSON_ESCAPE_H_

#include <cstdio>
#include <string>
#include <string_view>

namespace toposched {

// Appends `s` to `out` as a quoted JSON string.
inline void AppendJsonQuoted(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Returns `s` as a quoted JSON string.
inline std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  AppendJsonQuoted(out, s);
  return out;
}

}  // namespace toposched

#endif  // TOPOSCHED_BASE_JSON_ESCAPE_H_
