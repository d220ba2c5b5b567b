#include "base/json_escape.h"

#include <gtest/gtest.h>

namespace toposched {
namespace {

TEST(JsonQuoteTest, PlainTextIsCopiedAsItIs) {
  EXPECT_EQ(JsonQuote(""), R"("")");
  EXPECT_EQ(JsonQuote("ip-10-0-1-2.ec2.internal"), R"("ip-10-0-1-2.ec2.internal")");
  EXPECT_EQ(JsonQuote("ünïcode ok"), "\"ünïcode ok\"");
}

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote(R"(say "hi")"), R"("say \"hi\"")");
  EXPECT_EQ(JsonQuote(R"(a\b)"), R"("a\\b")");
  EXPECT_EQ(JsonQuote("l1\nl2\r\tx"), R"("l1\nl2\r\tx")");
  EXPECT_EQ(JsonQuote(std::string_view("\x01z\x1f", 3)), R"("\u0001z\u001f")");
  EXPECT_EQ(JsonQuote(std::string_view("\0", 1)), R"("\u0000")");
  EXPECT_EQ(JsonQuote("\"\""), R"("\"\"")");
}

TEST(JsonQuoteTest, AppendsAfterWhatIsThere) {
  std::string out = "[";
  AppendJsonQuoted(out, "x\"y");
  out += ',';
  AppendJsonQuoted(out, "z");
  EXPECT_EQ(out, R"(["x\"y","z")");
}

}  // namespace
}  // namespace toposched
