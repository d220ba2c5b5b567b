// Minimal JSON string quoting for the CLI's --json output (the values we print are ids, names and
// messages; parsing JSON lives with the code that receives it).
#ifndef TOPOSCHED_BASE_JSON_ESCAPE_H_
#define TOPOSCHED_BASE_JSON_ESCAPE_H_

#include <cstdio>
#include <string>
#include <string_view>

namespace toposched {

// Appends `s` to `out` as a quoted JSON string. Runs that need no escaping (nearly all of a node
// name or a reason) are copied in one append: filter answers hold thousands of names.
inline void AppendJsonQuoted(std::string& out, std::string_view s) {
  out += '"';
  size_t run = 0;  // start of the pending run of characters copied as they are
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
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
      default: {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
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
