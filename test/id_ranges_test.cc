// Id lists in the compact "0-3,8" form.
#include "topology/id_ranges.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace toposched::topology {
namespace {

using ::testing::HasSubstr;

struct ParseCase {
  const char* text;
  int limit;
  std::vector<int> ids;
};

TEST(IdRanges, ParsesListsAndRanges) {
  const ParseCase cases[] = {
      {"0-3,8", 16, {0, 1, 2, 3, 8}},
      {"8,0-3", 16, {0, 1, 2, 3, 8}},  // sorted on the way out
      {"5", 16, {5}},
      {"0", 1, {0}},
      {"15", 16, {15}},
      {"0-15", 16, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
      {"3-3", 16, {3}},
      {"1,3,5", 16, {1, 3, 5}},
      {"10-11,0-1", 12, {0, 1, 10, 11}},
      {"", 16, {}},
      {"   ", 16, {}},
      {"\t", 16, {}},
      {" 0 - 3 , 8 ", 16, {0, 1, 2, 3, 8}},
      {"\t1,\t2\t", 16, {1, 2}},
      {"007", 16, {7}},
      {"511", 512, {511}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string("'") + c.text + "'");
    auto parsed = ParseIdRanges(c.text, c.limit);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed.value(), c.ids);
  }
}

struct ErrorCase {
  const char* text;
  int limit;
  const char* message;  // a part of the error
};

TEST(IdRanges, RefusesMalformedInputQuotingThePart) {
  const ErrorCase cases[] = {
      {"3-1", 16, "range '3-1' runs backwards"},
      {"0-3,2", 16, "id 2 is listed twice"},
      {"1,1", 16, "id 1 is listed twice"},
      {"0-3,3-5", 16, "id 3 is listed twice"},
      {"16", 16, "id 16 is out of range: ids go from 0 to 15"},
      {"12-16", 16, "id 16 is out of range"},
      {"0", 0, "out of range"},
      {"a", 16, "'a' is not an id or a range like 0-3"},
      {"1,x", 16, "'x' is not an id"},
      {"1;2", 16, "'1;2' is not an id"},
      {"-1", 16, "'-1' is not an id"},
      {"-3-1", 16, "is not an id"},
      {"1-", 16, "'1-' is not an id"},
      {"-", 16, "'-' is not an id"},
      {"0-3-5", 16, "'0-3-5' is not an id"},
      {"1,", 16, "'' is not an id"},
      {",1", 16, "'' is not an id"},
      {"1,,2", 16, "'' is not an id"},
      {"+1", 16, "'+1' is not an id"},
      {"1.5", 16, "'1.5' is not an id"},
      {"0x1", 16, "'0x1' is not an id"},
      {"1 2", 16, "'1 2' is not an id"},
      {"99999999999", 16, "is not an id"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string("'") + c.text + "'");
    auto parsed = ParseIdRanges(c.text, c.limit);
    ASSERT_FALSE(parsed.ok()) << "parsed to " << parsed.value().size() << " ids";
    EXPECT_THAT(parsed.error(), HasSubstr(c.message));
  }
}

TEST(IdRanges, FormatsRanges) {
  struct FormatCase {
    std::vector<int> ids;
    const char* text;
  };
  const FormatCase cases[] = {
      {{0, 1, 2, 3, 8}, "0-3,8"},
      {{8, 3, 2, 1, 0}, "0-3,8"},
      {{}, "none"},
      {{5}, "5"},
      {{4, 5}, "4-5"},
      {{0, 2, 4}, "0,2,4"},
      {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, "0-15"},
      {{1, 2, 10, 11, 12, 20}, "1-2,10-12,20"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(FormatIdRanges(c.ids), c.text);
  }
}

TEST(IdRanges, FormatsPlainLists) {
  EXPECT_EQ(FormatIdList({0, 1, 2}), "0,1,2");
  EXPECT_EQ(FormatIdList({7}), "7");
  EXPECT_EQ(FormatIdList({}), "");
  EXPECT_EQ(FormatIdList({3, 1}), "3,1");  // as given: the annotation keeps the order
}

TEST(IdRanges, FormatThenParseRoundTrips) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 500; ++trial) {
    const int limit = 1 + static_cast<int>(rng() % 128);
    std::set<int> chosen;
    const int n = static_cast<int>(rng() % static_cast<unsigned>(limit + 1));
    for (int i = 0; i < n; ++i)
      chosen.insert(static_cast<int>(rng() % static_cast<unsigned>(limit)));
    const std::vector<int> ids(chosen.begin(), chosen.end());
    const std::string ranges = FormatIdRanges(ids);
    SCOPED_TRACE(ranges);
    auto back = ParseIdRanges(ids.empty() ? "" : ranges, limit);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value(), ids);
    auto list = ParseIdRanges(FormatIdList(ids), limit);
    ASSERT_TRUE(list.ok()) << list.error();
    EXPECT_EQ(list.value(), ids);
    // Ranges are maximal: no two adjacent ids are written as separate items.
    int items = ids.empty() ? 0 : 1;
    for (size_t i = 1; i < ids.size(); ++i) items += ids[i] != ids[i - 1] + 1 ? 1 : 0;
    const auto commas = static_cast<int>(std::count(ranges.begin(), ranges.end(), ','));
    EXPECT_EQ(ids.empty() ? 0 : commas + 1, items);
  }
}

TEST(IdRanges, SplitsGroupsInTheOrderWritten) {
  // An init container's 8, an app's 4-7, an init reusing 4: order kept, repeats across groups.
  auto groups = SplitIdGroups("8,4,5,6,7,4", {1, 4, 1}, 16);
  ASSERT_TRUE(groups.ok()) << groups.error();
  EXPECT_EQ(*groups, (std::vector<std::vector<int>>{{8}, {4, 5, 6, 7}, {4}}));
  auto ranges = SplitIdGroups("9-11, 0", {3, 1}, 16);
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ(*ranges, (std::vector<std::vector<int>>{{9, 10, 11}, {0}}));
  EXPECT_TRUE(SplitIdGroups("", {}, 16).ok());
  EXPECT_FALSE(SplitIdGroups("1,1", {2}, 16).ok());           // twice in one container
  EXPECT_FALSE(SplitIdGroups("1,2,3", {2}, 16).ok());         // more than asked
  EXPECT_FALSE(SplitIdGroups("1", {2}, 16).ok());             // fewer
  EXPECT_FALSE(SplitIdGroups("16", {1}, 16).ok());            // out of range
  EXPECT_FALSE(SplitIdGroups("0-511,0-511", {2}, 512).ok());  // expands past what was asked
  auto bad = SplitIdGroups("1,x", {2}, 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("'x'"), std::string::npos) << bad.error();
}

}  // namespace
}  // namespace toposched::topology
