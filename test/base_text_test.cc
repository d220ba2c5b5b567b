// base/text.h: the one idea of white space, of a decimal number and of a token file, which six
// Trims, ten integer parsers and two bare getlines used to spell each their own way.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/text.h"
#include "support/temp_dir.h"

namespace toposched {
namespace {

using ::testing::HasSubstr;

TEST(TrimSpace, DropsEveryAsciiSpaceAtBothEndsOnly) {
  EXPECT_EQ(TrimSpace(" \t\r\n\v\fa b\r\n"), "a b");
  EXPECT_EQ(TrimSpace("\r\n"), "");
  EXPECT_EQ(TrimSpace(""), "");
  EXPECT_EQ(TrimSpace("x"), "x");
}

TEST(ParseDecimal, DigitsOnlyWithinTheBounds) {
  EXPECT_EQ(ParseDecimal("0", 0, 10), 0);
  EXPECT_EQ(ParseDecimal("007", 0, 10), 7);
  EXPECT_EQ(ParseDecimal("4096", 1, 4096), 4096);
  EXPECT_EQ(ParseDecimal("999999999999999999", 0, INT64_MAX), 999'999'999'999'999'999);
  for (const char* bad :
       {"", "+1", "-1", " 1", "1 ", "1x", "0x10", "1e3", "1.0", "4097", "9999999999999999999"}) {
    EXPECT_EQ(ParseDecimal(bad, 0, 4096), std::nullopt) << bad;
  }
  EXPECT_EQ(ParseDecimal("0", 1, 10), std::nullopt);
}

TEST(ReadTokenFile, DropsTheLineEndAndRefusesWhatCannotBeAHeader) {
  const testing::TempDir dir;
  EXPECT_EQ(ReadTokenFile(dir.WriteFile("crlf", "abc.def\r\n")).value(), "abc.def");
  EXPECT_EQ(ReadTokenFile(dir.WriteFile("plain", "abc")).value(), "abc");
  EXPECT_THAT(ReadTokenFile(dir.WriteFile("empty", " \n")).error(), HasSubstr("is empty"));
  EXPECT_THAT(ReadTokenFile(dir.WriteFile("two", "a\nb")).error(), HasSubstr("control characters"));
  EXPECT_THAT(ReadTokenFile(dir / "missing").error(), HasSubstr("cannot read token file"));
}

}  // namespace
}  // namespace toposched
