// Quantities (kube/quantity.h) and the allocation annotations (claims/allocation_record.h).
#include <cstdint>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/allocation_record.h"
#include "kube/quantity.h"

namespace toposched::kube {
namespace {

using claims::AllocationRecord;
using claims::AllocationRecordJson;
using claims::ContainerIds;
using claims::ParseAllocationRecord;
using claims::ParseAllocTime;

using ::testing::HasSubstr;

TEST(KubeQuantityTest, WholeNumbersInEveryNotation) {
  struct Case {
    const char* text;
    int64_t value;
  };
  const Case cases[] = {
      {"0", 0},
      {"4", 4},
      {"16", 16},
      {"+3", 3},
      {"1k", 1000},
      {"2000m", 2},
      {"3000000u", 3},
      {"5000000000n", 5},
      {"1Ki", 1024},
      {"0.5Ki", 512},
      {"1Mi", 1048576},
      {"2M", 2000000},
      {"1e3", 1000},
      {"1E2", 100},
      {"1.0", 1},
      {"007", 7},
      {"1.5k", 1500},
      {"0.000m", 0},
      {"7Ei", int64_t{7} << 60},
      {"9223372036854775807", std::numeric_limits<int64_t>::max()},
      {"9223372036854775807000m", std::numeric_limits<int64_t>::max()},
  };
  for (const Case& c : cases) {
    Result<int64_t> value = ParseQuantity(c.text);
    ASSERT_TRUE(value.ok()) << c.text << ": " << value.error();
    EXPECT_EQ(*value, c.value) << c.text;
  }
}

TEST(KubeQuantityTest, RejectsFractionsNegativesJunkAndOverflow) {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"500m", "not a whole number"},
      {"1.5", "not a whole number"},
      {"12e-1", "not a whole number"},
      {"1n", "not a whole number"},
      {"-1", "negative"},
      {"-0", "negative"},
      {"", "empty"},
      {"abc", "no digits"},
      {"4x", "unknown suffix"},
      {"4 ", "unknown suffix"},
      {" 4", "no digits"},
      {"1Ki2", "unknown suffix"},
      {"1ki", "unknown suffix"},
      {".", "no digits"},
      {"1e", "unknown suffix"},
      {"1e+", "unknown suffix"},
      {"1e999999", "unknown suffix"},
      {"8Ei", "out of range"},
      {"9223372036854775808", "out of range"},
      {"99999999999999999999", "out of range"},
      {"1e19", "out of range"},
      {"1..2", "unknown suffix"},
  };
  for (const Case& c : cases) {
    Result<int64_t> value = ParseQuantity(c.text);
    ASSERT_FALSE(value.ok()) << c.text << " gave " << *value;
    EXPECT_THAT(value.error(), HasSubstr(c.reason)) << c.text;
  }
  // Long junk is quoted only in part.
  Result<int64_t> long_junk = ParseQuantity(std::string(5000, 'z'));
  ASSERT_FALSE(long_junk.ok());
  EXPECT_LT(long_junk.error().size(), 120u);
}

AllocationRecord SampleRecord() {
  AllocationRecord record;
  record.node = "ip-10-0-12-34.us-west-2.compute.internal";
  record.instance_type = "trn1.32xlarge";
  record.containers = {{"train", "aws.amazon.com/neuron", {4, 5, 6, 7}},
                       {"log-shipper", "aws.amazon.com/neuroncore", {16}}};
  return record;
}

TEST(KubeAllocationRecordTest, RoundTripsIncludingCharactersThatNeedEscaping) {
  AllocationRecord record = SampleRecord();
  record.containers.push_back({"we\"ird\\name\n", "example.com/x", {}});
  Result<AllocationRecord> parsed = ParseAllocationRecord(AllocationRecordJson(record));
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(*parsed, record);

  Result<AllocationRecord> empty =
      ParseAllocationRecord(R"({"node":"n","containers":[],"futureField":{"x":[1]}})");
  ASSERT_TRUE(empty.ok()) << empty.error();
  EXPECT_EQ(empty->node, "n");
  EXPECT_EQ(empty->instance_type, "");
  EXPECT_TRUE(empty->containers.empty());
}

TEST(KubeAllocationRecordTest, ParsingIsStrict) {
  struct Case {
    const char* json;
    const char* reason;
  };
  const Case cases[] = {
      {"", "invalid JSON"},
      {"{", "invalid JSON"},
      {"[]", "expected an object"},
      {R"({"containers":[]})", "missing \"node\""},
      {R"({"node":"n"})", "missing \"containers\""},
      {R"({"node":null,"containers":[]})", "node: expected a string"},
      {R"({"node":"n","containers":{}})", "containers: expected an array"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":[-1]}]})",
       "containers[0].ids[0]: id out of range"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":[70000]}]})",
       "id out of range"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":[1.5]}]})",
       "expected an integer id"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":["1"]}]})",
       "expected an integer id"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":[1,1]}]})", "duplicate id 1"},
      {R"({"node":"n","containers":[{"name":"c","ids":[1]}]})", "missing \"resource\""},
      {R"({"node":"n","containers":[{"resource":"r","ids":[1]}]})", "missing \"name\""},
      {R"({"node":"n","containers":[{"name":"c","resource":"r"}]})", "missing \"ids\""},
      {R"({"node":"n","containers":[null]})", "containers[0]: expected an object"},
      {R"({"node":"n","containers":[]} junk)", "invalid JSON"},
      {R"({"node":"n","containers":[{"name":"c","resource":"r","ids":[99999999999999999999]}]})",
       "expected an integer id"},
  };
  for (const Case& c : cases) {
    Result<AllocationRecord> parsed = ParseAllocationRecord(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_THAT(parsed.error(), HasSubstr(c.reason)) << c.json;
    EXPECT_THAT(parsed.error(), HasSubstr("allocation record")) << c.json;
  }
}

TEST(KubeAllocationRecordTest, AllocTime) {
  Result<int64_t> time = ParseAllocTime("1743574052764891534");
  ASSERT_TRUE(time.ok()) << time.error();
  EXPECT_EQ(*time, 1743574052764891534);
  EXPECT_EQ(*ParseAllocTime("0"), 0);
  EXPECT_EQ(*ParseAllocTime("9223372036854775807"), std::numeric_limits<int64_t>::max());
  for (const char* bad :
       {"", "-1", "12a", " 1", "1.0", "9223372036854775808", "99999999999999999999"}) {
    EXPECT_FALSE(ParseAllocTime(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace toposched::kube
