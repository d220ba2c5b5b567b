// Bind-time provisioning pieces: the partition JSON (untrusted answers), the fake service, the
// create/wait/remove steps with failures, timeouts and garbage, the background reaper, and the
// HTTP client against the fake served over loopback.
#include <atomic>
#include <future>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "net/http_server.h"
#include "pools_fixtures.h"
#include "provision/partition.h"
#include "provision/reaper.h"
#include "provision/service.h"
#include "support/wait.h"

namespace toposched::provision {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(PartitionJsonTest, RoundTripsAndNamesOwners) {
  Partition p{"ts-uid-1", "pod-a", {4, 5, 6, 7}, PartitionState::kActive, ""};
  auto back = ParsePartition(EncodePartition(p));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->name, "ts-uid-1");
  EXPECT_EQ(back->pool, "pod-a");
  EXPECT_THAT(back->ipus, ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(back->state, PartitionState::kActive);
  EXPECT_EQ(OwnerOf(PartitionNameFor("abc")), "abc");
  EXPECT_EQ(OwnerOf("someone-elses"), "");
  auto list = ParsePartitionList(EncodePartitionList({p, p}));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
}

TEST(PartitionJsonTest, GarbageIsAClearErrorNeverACrash) {
  for (const char* bad :
       {"", "{", "null", "[]", "{\"name\":5,\"state\":\"active\"}", "{\"name\":\"a\"}",
        "{\"name\":\"a\",\"state\":\"dancing\"}", "{\"name\":\"../etc\",\"state\":\"active\"}",
        "{\"name\":\"a\",\"state\":\"active\",\"ipus\":[-1]}",
        "{\"name\":\"a\",\"state\":\"active\",\"ipus\":\"0-3\"}"}) {
    auto p = ParsePartition(bad);
    EXPECT_FALSE(p.ok()) << bad;
  }
  EXPECT_FALSE(ParsePartitionList("{\"partitions\":{}}").ok());
  EXPECT_FALSE(ParsePartitionList("{\"partitions\":[{\"name\":\"x\"}]}").ok());
  EXPECT_THAT(ParsePartition("<html>").error(), HasSubstr("malformed JSON"));
}

class ProvisionerTest : public ::testing::Test {
 protected:
  ProvisionerTest()
      : fake_(FakeServiceOptions{50ms, 20ms, 0, "", 1}, testing::SteadyNowNs),
        service_(fake_),
        provisioner_(service_, ProvisionOptions{500ms, 5ms, 500ms}, testing::SteadyNowNs,
                     testing::RealSleep()) {}

  Partition Want(const std::string& name) { return {name, "pod-a", {0, 1, 2, 3}, {}, ""}; }

  FakePartitionService fake_;
  testing::InProcessService service_;
  Provisioner provisioner_;
};

TEST_F(ProvisionerTest, CreatesAndWaitsUntilActive) {
  bool left = true;
  ASSERT_TRUE(provisioner_.CreateAndWait(Want("ts-a"), &left).ok());
  EXPECT_FALSE(left);
  auto all = fake_.Snapshot();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, PartitionState::kActive);
  ASSERT_TRUE(provisioner_.RemoveAndWait("ts-a", 500ms).ok());
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ProvisionerTest, FailureRemovesWhatWasMade) {
  fake_.SetFailureRate(1.0);
  bool left = true;
  auto s = provisioner_.CreateAndWait(Want("ts-a"), &left);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("failed"));
  EXPECT_FALSE(left);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ProvisionerTest, TimeoutRemovesWhatWasMade) {
  fake_.SetLatency(10s);
  bool left = true;
  auto s = provisioner_.CreateAndWait(Want("ts-a"), &left);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("not active after 500 ms"));
  EXPECT_FALSE(left);
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ProvisionerTest, OverlapIsRefusedByTheService) {
  bool left = false;
  ASSERT_TRUE(provisioner_.CreateAndWait(Want("ts-a"), &left).ok());
  auto s = provisioner_.CreateAndWait(Want("ts-b"), &left);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error(), HasSubstr("is in partition ts-a"));
  EXPECT_EQ(fake_.Snapshot().size(), 1u);  // ts-a untouched
}

TEST_F(ProvisionerTest, GarbageAnswersAreErrorsAndLeaveNothingConfirmed) {
  fake_.SetGarbage(true);
  bool left = false;
  auto s = provisioner_.CreateAndWait(Want("ts-a"), &left);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(left);  // nothing could be confirmed gone: the caller keeps the ids held
  fake_.SetGarbage(false);
  EXPECT_TRUE(provisioner_.RemoveAndWait("ts-a", 500ms).ok());
}

TEST_F(ProvisionerTest, RemovalRetriesUntilTheServiceSaysGone) {
  bool left = false;
  ASSERT_TRUE(provisioner_.CreateAndWait(Want("ts-a"), &left).ok());
  fake_.SetRemoveRefusals(5);
  ASSERT_TRUE(provisioner_.RemoveAndWait("ts-a", 500ms).ok());
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST_F(ProvisionerTest, ReaperRunsTheCallbackOnlyOnceGone) {
  bool left = false;
  ASSERT_TRUE(provisioner_.CreateAndWait(Want("ts-a"), &left).ok());
  fake_.SetGarbage(true);  // the first attempts cannot be confirmed
  std::atomic<int> gone{0};
  {
    Reaper reaper(provisioner_, 20ms);
    const int before = fake_.requests();
    reaper.Remove("ts-a", [&] { ++gone; });
    // Three answers the reaper could not read: it has tried and retried, and must not have
    // called back.
    ASSERT_TRUE(testing::WaitUntil([&] { return fake_.requests() >= before + 3; }, 5s));
    EXPECT_EQ(gone.load(), 0);
    EXPECT_EQ(reaper.Pending(), 1u);
    fake_.SetGarbage(false);
    testing::WaitUntil([&] { return gone.load() != 0; }, 2s);
    EXPECT_EQ(gone.load(), 1);
    EXPECT_EQ(reaper.Pending(), 0u);
  }
  EXPECT_TRUE(fake_.Snapshot().empty());
}

TEST(HttpServiceTest, TalksToTheFakeOverLoopbackWithAToken) {
  FakePartitionService fake(FakeServiceOptions{20ms, 10ms, 0, "s3cret", 1}, testing::SteadyNowNs);
  net::HttpServerOptions http;
  http.address = "127.0.0.1";
  http.port = 0;
  auto server = net::HttpServer::Start(http, [&](net::HttpRequest&& r, net::Responder respond) {
    auto a = fake.Handle(r.method, r.target, r.body, r.authorization);
    respond({a.status, "application/json", a.body});
  });
  ASSERT_TRUE(server.ok()) << server.error();
  const std::string url = fmt::format("http://127.0.0.1:{}", (*server)->port());

  auto wrong = MakeHttpService({url, "nope", "", 2000ms});
  ASSERT_TRUE(wrong.ok());
  auto refused = (*wrong)->List();
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("credentials"));

  auto client = MakeHttpService({url, "s3cret", "", 2000ms});
  ASSERT_TRUE(client.ok());
  Provisioner provisioner(**client, ProvisionOptions{2000ms, 5ms, 2000ms}, testing::SteadyNowNs,
                          testing::RealSleep());
  bool left = false;
  ASSERT_TRUE(provisioner.CreateAndWait({"ts-h", "pod-a", {8, 9}, {}, ""}, &left).ok());
  auto listed = (*client)->List();
  ASSERT_TRUE(listed.ok()) << listed.error();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_THAT((*listed)[0].ipus, ElementsAre(8, 9));
  ASSERT_TRUE(provisioner.RemoveAndWait("ts-h", 2000ms).ok());
  EXPECT_TRUE((*client)->List()->empty());
  fake.SetGarbage(true);
  EXPECT_THAT((*client)->List().error(), HasSubstr("malformed JSON"));
  (*server)->Stop();
  // A service that is not there: a clear error naming it, within the timeout.
  auto gone = (*client)->Get("ts-h");
  ASSERT_FALSE(gone.ok());
  EXPECT_THAT(gone.error(), HasSubstr(url));
  EXPECT_FALSE(MakeHttpService({"ftp://x", "", "", 1000ms}).ok());
}

// The service holds the request (its responder is kept, not called) until the client has given up:
// the client must time out by itself. Then the held request is answered and the server stopped.
TEST(HttpServiceTest, ASlowServiceTimesOut) {
  net::HttpServerOptions http;
  http.address = "127.0.0.1";
  http.port = 0;
  std::promise<net::Responder> held;
  std::atomic<bool> first{true};
  auto server = net::HttpServer::Start(http, [&](net::HttpRequest&&, net::Responder respond) {
    if (first.exchange(false)) {
      held.set_value(std::move(respond));
    } else {
      respond({503, "application/json", "{}"});
    }
  });
  ASSERT_TRUE(server.ok()) << server.error();
  auto client =
      MakeHttpService({fmt::format("http://127.0.0.1:{}", (*server)->port()), "", "", 200ms});
  ASSERT_TRUE(client.ok());
  auto listed = (*client)->List();
  EXPECT_FALSE(listed.ok());
  std::future<net::Responder> responder = held.get_future();
  ASSERT_EQ(responder.wait_for(10s), std::future_status::ready) << "the request never arrived";
  responder.get()({200, "application/json", "{\"partitions\":[]}"});  // to a closed connection
  (*server)->Stop();
}

}  // namespace
}  // namespace toposched::provision
