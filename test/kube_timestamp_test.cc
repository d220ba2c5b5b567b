// RFC 3339 timestamps both ways (kube/timestamp.h): what we write and what the API server sends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/timestamp.h"

namespace toposched::kube {
namespace {

using ::testing::HasSubstr;

// The Lease's and the conditions' time format: UTC to the second, leap days included.
TEST(Timestamp, FormatsRfc3339InUtc) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(1795953600), "2026-11-29T12:00:00Z");
  EXPECT_EQ(FormatRfc3339(1835481599), "2028-02-29T23:59:59Z");
  // Four digits of year however small (found by timestamp_fuzz: strftime wrote "226").
  EXPECT_EQ(FormatRfc3339(ParseRfc3339("0226-05-29T12:00:20Z").value()), "0226-05-29T12:00:20Z");
  EXPECT_EQ(FormatRfc3339(ParseRfc3339("0000-01-01T00:00:00Z").value()), "0000-01-01T00:00:00Z");
}

TEST(Timestamp, ParsesWhatTheApiServerWrites) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z").value(), 0);
  EXPECT_EQ(ParseRfc3339("2026-11-29T12:00:00Z").value(), 1795953600);
  EXPECT_EQ(ParseRfc3339("2028-02-29T23:59:59Z").value(), 1835481599);
  EXPECT_EQ(ParseRfc3339("2000-03-01T00:00:00Z").value(), 951868800);   // after a 400-year leap
  EXPECT_EQ(ParseRfc3339("2100-03-01T00:00:00Z").value(), 4107542400);  // 2100 has no Feb 29
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:59:59Z").value(), -1);
}

TEST(Timestamp, ParsesFractionsOffsetsAndLowerCase) {
  EXPECT_EQ(ParseRfc3339("2026-11-29T12:00:00.999999Z").value(), 1795953600);
  EXPECT_EQ(ParseRfc3339("2026-11-29T13:30:00+01:30").value(), 1795953600);
  EXPECT_EQ(ParseRfc3339("2026-11-29T07:00:00-05:00").value(), 1795953600);
  EXPECT_EQ(ParseRfc3339("2026-11-29t12:00:00z").value(), 1795953600);
  EXPECT_EQ(ParseRfc3339("2016-12-31T23:59:60Z").value(), 1483228800);  // a leap second
}

TEST(Timestamp, RoundTripsEveryDayOfFourHundredYears) {
  for (int64_t t = -2208988800; t < 10413792000; t += 86400 + 3661) {
    ASSERT_EQ(ParseRfc3339(FormatRfc3339(t)).value(), t) << FormatRfc3339(t);
  }
}

TEST(Timestamp, RefusesWhatIsNotRfc3339) {
  EXPECT_THAT(ParseRfc3339("").error(), HasSubstr("too short"));
  EXPECT_THAT(ParseRfc3339("2026-11-29 12:00:00Z").error(), HasSubstr("not in that form"));
  EXPECT_THAT(ParseRfc3339("2026-13-01T00:00:00Z").error(), HasSubstr("no such month"));
  EXPECT_THAT(ParseRfc3339("2026-02-29T00:00:00Z").error(), HasSubstr("no such day"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T24:00:00Z").error(), HasSubstr("no such time"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T12:00:00").error(), HasSubstr("too short"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T12:00:00.Z").error(), HasSubstr("without digits"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T12:00:00+1:00").error(), HasSubstr("offset"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T12:00:00ZZ").error(), HasSubstr("after the time zone"));
  EXPECT_THAT(ParseRfc3339("2026-11-29T12:00:00.5").error(), HasSubstr("no time zone"));
  EXPECT_THAT(ParseRfc3339("+026-11-29T12:00:00Z").error(), HasSubstr("not in that form"));
}

}  // namespace
}  // namespace toposched::kube
