#include "kube/timestamp.h"

#include <ctime>

#include <fmt/format.h>

namespace toposched::kube {

std::string FormatRfc3339(int64_t unix_seconds) {
  const auto time = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  gmtime_r(&time, &utc);
  // Not strftime's %Y: glibc writes year 226 as "226", which is not RFC 3339's four digits.
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

namespace {

// `n` decimal digits at `at`, or -1.
int Digits(std::string_view text, size_t at, size_t n) {
  if (at + n > text.size()) return -1;
  int value = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

bool IsLeap(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeap(year) ? 29 : kDays[month - 1];
}

// Days from 1970-01-01 to the date (proleptic Gregorian): whole years, then months, then days.
int64_t DaysSinceEpoch(int year, int month, int day) {
  // Leap days before `y` counted from year 0 (which is a leap year).
  auto leaps_before = [](int64_t y) {
    return y <= 0 ? 0 : (y + 3) / 4 - (y + 99) / 100 + (y + 399) / 400;
  };
  int64_t days = (int64_t{year} - 1970) * 365 + leaps_before(year) - leaps_before(1970);
  for (int m = 1; m < month; ++m) days += DaysInMonth(year, m);
  return days + day - 1;
}

}  // namespace

Result<int64_t> ParseRfc3339(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error{fmt::format("timestamp \"{}\" is not RFC 3339 (YYYY-MM-DDTHH:MM:SSZ): {}",
                             text.substr(0, 64), why)};
  };
  if (text.size() < 20) return bad("too short");
  const int year = Digits(text, 0, 4);
  const int month = Digits(text, 5, 2);
  const int day = Digits(text, 8, 2);
  const int hour = Digits(text, 11, 2);
  const int minute = Digits(text, 14, 2);
  const int second = Digits(text, 17, 2);
  if (year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0 || text[4] != '-' ||
      text[7] != '-' || (text[10] != 'T' && text[10] != 't') || text[13] != ':' ||
      text[16] != ':') {
    return bad("the date and time are not in that form");
  }
  if (month < 1 || month > 12) return bad("no such month");
  if (day < 1 || day > DaysInMonth(year, month)) return bad("no such day in that month");
  if (hour > 23 || minute > 59 || second > 60) return bad("no such time of day");
  size_t at = 19;
  if (text[at] == '.') {
    const size_t first = ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == first) return bad("a '.' without digits after it");
  }
  int64_t offset_s = 0;
  if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) {
    ++at;
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    const int oh = Digits(text, at + 1, 2);
    const int om = Digits(text, at + 4, 2);
    if (oh < 0 || om < 0 || text[at + 3] != ':' || oh > 23 || om > 59) {
      return bad("the offset is not +HH:MM or -HH:MM");
    }
    offset_s = (text[at] == '+' ? 1 : -1) * (int64_t{oh} * 3600 + int64_t{om} * 60);
    at += 6;
  } else {
    return bad("no time zone ('Z' or an offset such as +01:00)");
  }
  if (at != text.size()) return bad("text after the time zone");
  return DaysSinceEpoch(year, month, day) * 86400 + int64_t{hour} * 3600 + int64_t{minute} * 60 +
         second - offset_s;
}

}  // namespace toposched::kube
