#include "kube/quantity.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace toposched::kube {
namespace {

// __extension__ keeps -Wpedantic quiet about the GCC/Clang 128-bit integer.
__extension__ using Uint128 = unsigned __int128;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

Error Bad(std::string_view text, std::string_view why) {
  // Quote at most a bounded prefix: the text may come from an untrusted payload.
  constexpr size_t kMaxShown = 40;
  std::string shown(text.substr(0, kMaxShown));
  if (text.size() > kMaxShown) shown += "...";
  return Error{fmt::format("invalid quantity \"{}\": {}", shown, why)};
}

struct Suffix {
  int decimal_exponent = 0;  // value *= 10^decimal_exponent
  int binary_exponent = 0;   // value *= 2^binary_exponent
};

// Returns false when `s` is not a suffix the API accepts.
bool ParseSuffix(std::string_view s, Suffix& out) {
  if (s.empty()) return true;
  if (s.size() == 2 && s[1] == 'i') {
    static constexpr std::string_view kBinary = "KMGTPE";
    const size_t k = kBinary.find(s[0]);
    if (k == std::string_view::npos) return false;
    out.binary_exponent = 10 * static_cast<int>(k + 1);
    return true;
  }
  if (s.size() == 1) {
    static constexpr struct {
      char suffix;
      int exponent;
    } kDecimal[] = {{'n', -9}, {'u', -6}, {'m', -3}, {'k', 3}, {'M', 6},
                    {'G', 9},  {'T', 12}, {'P', 15}, {'E', 18}};
    for (const auto& decimal : kDecimal) {
      if (s[0] == decimal.suffix) {
        out.decimal_exponent = decimal.exponent;
        return true;
      }
    }
    return false;
  }
  if (s[0] == 'e' || s[0] == 'E') {
    std::string_view digits = s.substr(1);
    bool negative = false;
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
    // Five digits are far beyond any exponent that can yield an int64; more is junk.
    if (digits.empty() || digits.size() > 5) return false;
    int exponent = 0;
    for (char c : digits) {
      if (!IsDigit(c)) return false;
      exponent = exponent * 10 + (c - '0');
    }
    out.decimal_exponent = negative ? -exponent : exponent;
    return true;
  }
  return false;
}

}  // namespace

Result<int64_t> ParseQuantity(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  std::string_view rest = text;
  if (rest[0] == '-') return Bad(text, "negative");
  if (rest[0] == '+') rest.remove_prefix(1);

  // Split the number into integer and fraction digits.
  size_t pos = 0;
  while (pos < rest.size() && IsDigit(rest[pos])) ++pos;
  std::string_view integer_digits = rest.substr(0, pos);
  std::string_view fraction_digits;
  if (pos < rest.size() && rest[pos] == '.') {
    const size_t start = ++pos;
    while (pos < rest.size() && IsDigit(rest[pos])) ++pos;
    fraction_digits = rest.substr(start, pos - start);
  }
  if (integer_digits.empty() && fraction_digits.empty()) return Bad(text, "no digits");

  Suffix suffix;
  if (!ParseSuffix(rest.substr(pos), suffix)) return Bad(text, "unknown suffix");

  // value = mantissa * 10^exponent10 * 2^binary_exponent, with the mantissa's leading and
  // trailing zeros removed so its digit count says whether it can fit at all.
  std::string mantissa;
  mantissa.reserve(integer_digits.size() + fraction_digits.size());
  mantissa.append(integer_digits).append(fraction_digits);
  int64_t exponent10 = suffix.decimal_exponent - static_cast<int64_t>(fraction_digits.size());
  const size_t first = mantissa.find_first_not_of('0');
  if (first == std::string::npos) return int64_t{0};
  const size_t last = mantissa.find_last_not_of('0');
  exponent10 += static_cast<int64_t>(mantissa.size() - 1 - last);
  const std::string_view significant = std::string_view(mantissa).substr(first, last - first + 1);
  // Whole int64 values have at most 19 significant digits here.
  if (significant.size() > 19) return Bad(text, "out of range or not a whole number");

  Uint128 value = 0;
  for (char c : significant) value = value * 10 + static_cast<unsigned>(c - '0');
  value <<= suffix.binary_exponent;  // < 2^64 * 2^60: fits
  constexpr auto kMax = static_cast<Uint128>(std::numeric_limits<int64_t>::max());
  if (exponent10 >= 0) {
    for (int64_t i = 0; i < exponent10; ++i) {
      value *= 10;
      if (value > kMax) return Bad(text, "out of range");
    }
  } else {
    // `value` < 10^38, so dividing by more than 10^38 cannot leave a whole number.
    if (exponent10 < -38) return Bad(text, "not a whole number");
    for (int64_t i = 0; i < -exponent10; ++i) {
      if (value % 10 != 0) return Bad(text, "not a whole number");
      value /= 10;
    }
  }
  if (value > kMax) return Bad(text, "out of range");
  return static_cast<int64_t>(value);
}

}  // namespace toposched::kube
