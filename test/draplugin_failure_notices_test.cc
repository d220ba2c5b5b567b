// Which claims' pods hear of a failed device (NoticesDue), and the consumers a ResourceClaim
// names (status.reservedFor), which are the pods told.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "draplugin/failure_notices.h"
#include "draplugin/resource_claim.h"

namespace toposched::draplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

PreparedClaim ClaimOn(const std::string& uid, topology::DeviceMask devices) {
  PreparedClaim claim;
  claim.uid = uid;
  claim.ns = "default";
  claim.name = "claim-" + uid;
  claim.held.devices = devices;
  return claim;
}

std::vector<std::pair<std::string, topology::DeviceMask>> Due(
    const std::map<std::string, PreparedClaim>& prepared, topology::DeviceMask unhealthy,
    const std::map<std::string, topology::DeviceMask>& told) {
  std::vector<std::pair<std::string, topology::DeviceMask>> out;
  for (const NoticeDue& notice : NoticesDue(prepared, unhealthy, told)) {
    out.emplace_back(notice.claim->uid, notice.failed);
  }
  return out;
}

TEST(FailureNoticesTest, OnlyClaimsWhoseFailedDevicesChangedAreDue) {
  const std::map<std::string, PreparedClaim> prepared = {
      {"a", ClaimOn("a", 0b0011)}, {"b", ClaimOn("b", 0b1100)}, {"c", ClaimOn("c", 0b110000)}};
  // Nothing failed, nothing told: nobody.
  EXPECT_TRUE(Due(prepared, 0, {}).empty());
  // Device 2 fails: only b, which holds 2-3.
  EXPECT_THAT(Due(prepared, 0b0100, {}),
              ElementsAre(std::pair<std::string, uint64_t>{"b", 0b0100}));
  // Told already: nothing more. Device 3 fails too: b again, with both.
  EXPECT_TRUE(Due(prepared, 0b0100, {{"b", 0b0100}}).empty());
  EXPECT_THAT(Due(prepared, 0b1100, {{"b", 0b0100}}),
              ElementsAre(std::pair<std::string, uint64_t>{"b", 0b1100}));
  // Both back: b hears that (failed 0); a device no claim holds changes nothing.
  EXPECT_THAT(Due(prepared, 0b1000000, {{"b", 0b1100}}),
              ElementsAre(std::pair<std::string, uint64_t>{"b", 0}));
}

TEST(FailureNoticesTest, AClaimHoldingNothingIsNeverDue) {
  // Admin access (monitoring) holds no unit: its pod loses nothing when the device fails.
  const std::map<std::string, PreparedClaim> prepared = {{"m", ClaimOn("m", 0)}};
  EXPECT_TRUE(Due(prepared, ~topology::DeviceMask{0}, {}).empty());
}

TEST(ResourceClaimTest, ReservedForNamesThePodsThatUseTheClaim) {
  auto claim = DecodeResourceClaim(R"({"metadata":{"uid":"u1","namespace":"ml","name":"c"},
    "status":{"reservedFor":[{"resource":"pods","name":"trainer-0","uid":"p0"},
                             {"apiGroup":"example.com","resource":"jobs","name":"j","uid":"j1"}]}})");
  ASSERT_TRUE(claim.ok()) << claim.error();
  ASSERT_EQ(claim->reserved_for.size(), 2u);
  EXPECT_EQ(claim->reserved_for[0], (ClaimConsumer{"", "pods", "trainer-0", "p0"}));
  EXPECT_EQ(claim->reserved_for[1].api_group, "example.com");
  // A consumer without a name cannot be told: a clear error with its path.
  auto bad = DecodeResourceClaim(
      R"({"metadata":{"uid":"u1"},"status":{"reservedFor":[{"resource":"pods","uid":"p0"}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("reservedFor[0].name: missing"));
  auto not_a_list = DecodeResourceClaim(R"({"metadata":{"uid":"u1"},"status":{"reservedFor":7}})");
  EXPECT_FALSE(not_a_list.ok());
}

}  // namespace
}  // namespace toposched::draplugin
