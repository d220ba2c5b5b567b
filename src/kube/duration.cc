#include "kube/duration.h"

#include <cstdint>
#include <limits>

#include <fmt/format.h>

namespace toposched::kube {

namespace {

// Nanoseconds per unit, longest names first so "ms" is not read as "m".
struct Unit {
  std::string_view name;
  int64_t ns;
};
constexpr Unit kUnits[] = {
    {"ns", 1},       {"us", 1000},      {"\xC2\xB5s", 1000},  // µs
    {"ms", 1000000}, {"s", 1000000000}, {"m", 60LL * 1000000000}, {"h", 3600LL * 1000000000}};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error{
        fmt::format("invalid duration '{}': {} (write it like 15s, 1m30s or 500ms)", text, why)};
  };
  if (text.empty()) return bad("empty");
  if (text == "0") return std::chrono::nanoseconds(0);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    int64_t whole = 0;
    bool overflow = false;
    while (i < text.size() && IsDigit(text[i])) {
      if (whole > (kMax - 9) / 10) overflow = true;
      if (!overflow) whole = whole * 10 + (text[i] - '0');
      ++i;
    }
    std::string_view fraction;
    if (i < text.size() && text[i] == '.') {
      const size_t f = ++i;
      while (i < text.size() && IsDigit(text[i])) ++i;
      fraction = text.substr(f, i - f);
    }
    if (i == start || (i == start + 1 && text[start] == '.')) {
      return bad(text[start] == '-' || text[start] == '+' ? "no sign allowed"
                                                          : "expected a number");
    }
    const Unit* unit = nullptr;
    for (const Unit& u : kUnits) {
      if (text.substr(i, u.name.size()) == u.name &&
          (unit == nullptr || u.name.size() > unit->name.size())) {
        unit = &u;
      }
    }
    if (unit == nullptr) return bad("missing or unknown unit (ns, us, ms, s, m, h)");
    i += unit->name.size();
    if (overflow || whole > kMax / unit->ns) return bad("too large");
    int64_t value = whole * unit->ns;
    // The fraction, digit by digit, in nanoseconds of this unit.
    int64_t scale = unit->ns;
    for (char c : fraction) {
      scale /= 10;
      if (scale == 0) break;
      value += (c - '0') * scale;
    }
    if (value > kMax - total) return bad("too large");
    total += value;
  }
  return std::chrono::nanoseconds(total);
}

std::string FormatDuration(std::chrono::nanoseconds duration) {
  int64_t ns = duration.count();
  if (ns == 0) return "0s";
  std::string out = ns < 0 ? "-" : "";
  if (ns < 0) ns = -ns;
  if (ns < 1000000000) {
    if (ns % 1000000 == 0) return out + fmt::format("{}ms", ns / 1000000);
    if (ns % 1000 == 0) return out + fmt::format("{}us", ns / 1000);
    return out + fmt::format("{}ns", ns);
  }
  const int64_t hours = ns / (3600LL * 1000000000);
  ns %= 3600LL * 1000000000;
  const int64_t minutes = ns / (60LL * 1000000000);
  ns %= 60LL * 1000000000;
  if (hours > 0) out += fmt::format("{}h", hours);
  if (hours > 0 || minutes > 0) out += fmt::format("{}m", minutes);
  if (ns % 1000000000 == 0) return out + fmt::format("{}s", ns / 1000000000);
  std::string seconds = fmt::format("{}.{:09d}", ns / 1000000000, ns % 1000000000);
  while (seconds.back() == '0') seconds.pop_back();
  return out + seconds + "s";
}

}  // namespace toposched::kube
