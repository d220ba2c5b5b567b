// Leader election on a Lease against the loopback fake API server, with fake clocks: taking a free
// lease, standing by while another holder renews, taking over once the lease expired on our own
// clock, losing the lease at the renew deadline when renewals fail (at once, without a round),
// losing it at once to another holder, handing it over on release, and bad input.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "kube/client.h"
#include "kube/duration.h"
#include "kube/leader_election.h"
#include "support/fake_apiserver.h"
#include "support/run_command.h"
#include "support/wait.h"

namespace toposched::kube {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr int64_t kSecond = 1000000000;

TEST(Duration, ParsesKubeSchedulerSyntax) {
  EXPECT_EQ(*ParseDuration("15s"), 15s);
  EXPECT_EQ(*ParseDuration("10s"), 10s);
  EXPECT_EQ(*ParseDuration("1m30s"), 90s);
  EXPECT_EQ(*ParseDuration("500ms"), 500ms);
  EXPECT_EQ(*ParseDuration("1.5h"), 90min);
  EXPECT_EQ(*ParseDuration("2s500ms"), 2500ms);
  EXPECT_EQ(*ParseDuration("0.25s"), 250ms);
  EXPECT_EQ(*ParseDuration("0"), 0s);
  EXPECT_EQ(*ParseDuration("7us"), 7us);
  for (const char* bad : {"", "15", "-1s", "+1s", "1x", "s", ".s", "1.5", "1s2", "99999999999h"}) {
    auto parsed = ParseDuration(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.error(), HasSubstr("invalid duration")) << bad;
  }
  EXPECT_EQ(FormatDuration(15s), "15s");
  EXPECT_EQ(FormatDuration(90s), "1m30s");
  EXPECT_EQ(FormatDuration(250ms), "250ms");
  EXPECT_EQ(FormatDuration(2500ms), "2.5s");
}

TEST(LeaderElectionConfig, KubeSchedulerRules) {
  LeaderElectionConfig c;
  c.lease_name = "x";
  c.identity = "me";
  EXPECT_TRUE(ValidateLeaderElection(c).ok());
  c.renew_deadline = 15s;
  EXPECT_THAT(ValidateLeaderElection(c).error(), HasSubstr("must be longer than"));
  c.renew_deadline = 2s;
  EXPECT_THAT(ValidateLeaderElection(c).error(), HasSubstr("1.2 x --leader-elect-retry-period"));
  c.renew_deadline = 10s;
  c.lease_name = "";
  EXPECT_THAT(ValidateLeaderElection(c).error(), HasSubstr("--leader-elect-resource-name"));
}

TEST(Lease, EncodesAndDecodes) {
  LeaseRecord r;
  r.holder = "pod-a_1";
  r.lease_duration_seconds = 15;
  r.acquire_time = FormatMicroTime(1700000000123456789);
  r.renew_time = r.acquire_time;
  r.transitions = 3;
  r.resource_version = "42";
  EXPECT_EQ(r.acquire_time, "2023-11-14T22:13:20.123456Z");
  const json j = json::parse(EncodeLease("kube-system", "k8s-neuron-scheduler", r));
  EXPECT_EQ(j["apiVersion"], "coordination.k8s.io/v1");
  EXPECT_EQ(j["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(j["spec"]["leaseTransitions"], 3);
  auto back = DecodeLease(j.dump());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->holder, "pod-a_1");
  EXPECT_EQ(back->lease_duration_seconds, 15);
  EXPECT_EQ(back->renew_time, r.renew_time);
  EXPECT_EQ(back->transitions, 3);
  EXPECT_EQ(back->resource_version, "42");

  auto bad = DecodeLease(R"({"spec":{"leaseDurationSeconds":"fifteen"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("lease.spec.leaseDurationSeconds"));
  EXPECT_FALSE(DecodeLease("[").ok());
}

// One candidate with its own fake clocks (steady and wall), against the shared fake API server.
class Candidate {
 public:
  Candidate(testing::FakeApiServer& server, const std::string& identity) {
    ClientConfig config;
    config.server = server.url();
    config.ca_pem = server.ca_pem();
    config.token = "test-token";
    config.request_timeout = 2s;
    client_ = std::move(ApiClient::Create(config)).value();
    LeaderElectionConfig le;
    le.lease_name = "k8s-neuron-scheduler";
    le.identity = identity;
    elector_ = std::make_unique<LeaderElector>(
        *client_, le, [this] { return now_.load(); },
        [this] { return int64_t{1700000000} * kSecond + now_.load(); },
        LeaderElector::Callbacks{[this] { ++started_; }, [this] { ++stopped_; }});
  }
  void At(double seconds) { now_ = static_cast<int64_t>(seconds * kSecond); }
  LeaderElector& elector() { return *elector_; }
  int started() const { return started_; }
  int stopped() const { return stopped_; }

 private:
  std::atomic<int64_t> now_{kSecond};  // not zero: zero means "never observed"
  std::atomic<int> started_{0};
  std::atomic<int> stopped_{0};
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<LeaderElector> elector_;
};

json Lease(testing::FakeApiServer& server) {
  auto text = server.GetLeaseJson("kube-system", "k8s-neuron-scheduler");
  return text ? json::parse(*text) : json();
}

std::string OtherHoldersLease(const std::string& holder, const std::string& renew) {
  return R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"k8s-neuron-scheduler","namespace":"kube-system"},"spec":{"holderIdentity":")" +
         holder + R"(","leaseDurationSeconds":15,"renewTime":")" + renew +
         R"(","leaseTransitions":4}})";
}

TEST(LeaderElector, TakesAFreeLeaseAndRenewsIt) {
  testing::FakeApiServer server;
  Candidate a(server, "a");
  EXPECT_FALSE(a.elector().IsLeader());
  EXPECT_TRUE(a.elector().Step());
  EXPECT_TRUE(a.elector().IsLeader());
  EXPECT_EQ(a.started(), 1);
  json lease = Lease(server);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  const std::string acquired = lease["spec"]["acquireTime"];
  EXPECT_EQ(
      server.RequestsMatching("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
          .size(),
      1u);

  a.At(3);
  EXPECT_TRUE(a.elector().Step());
  lease = Lease(server);
  EXPECT_EQ(lease["spec"]["acquireTime"], acquired);
  EXPECT_NE(lease["spec"]["renewTime"], acquired);
  EXPECT_EQ(a.started(), 1);
  EXPECT_EQ(a.elector().transitions(), 1u);
  // A renewal is a conditional update.
  const auto puts = server.RequestsMatching("PUT", "/apis/coordination.k8s.io/");
  ASSERT_EQ(puts.size(), 1u);
  EXPECT_FALSE(json::parse(puts[0].body)["metadata"]["resourceVersion"].get<std::string>().empty());
}

TEST(LeaderElector, StandsByWhileTheHolderRenewsAndTakesOverWhenItStops) {
  testing::FakeApiServer server;
  server.PutLease(OtherHoldersLease("old-leader", "2020-01-01T00:00:00.000000Z"));
  Candidate b(server, "b");
  b.At(1);
  EXPECT_FALSE(b.elector().Step());  // first sight of the record: its age is unknown
  EXPECT_EQ(b.elector().ObservedHolder(), "old-leader");
  b.At(10);
  // The holder renews: the 15 s start again from when b saw the change.
  server.PutLease(OtherHoldersLease("old-leader", "2020-01-01T00:00:09.000000Z"));
  EXPECT_FALSE(b.elector().Step());
  b.At(24.9);
  EXPECT_FALSE(b.elector().Step());
  EXPECT_FALSE(b.elector().IsLeader());
  b.At(25);
  EXPECT_TRUE(b.elector().Step());  // unchanged for 15 s on b's clock: expired
  const json lease = Lease(server);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 5);
  EXPECT_EQ(b.started(), 1);
}

TEST(LeaderElector, TwoCandidatesOneLeaderAndTakeoverAfterTheLeaderDies) {
  testing::FakeApiServer server;
  Candidate a(server, "a");
  Candidate b(server, "b");
  EXPECT_TRUE(a.elector().Step());
  EXPECT_FALSE(b.elector().Step());
  // a renews every 2 s; b never takes over while it does.
  for (double t = 3; t <= 41; t += 2) {
    a.At(t);
    b.At(t + 0.5);
    EXPECT_TRUE(a.elector().Step()) << t;
    EXPECT_FALSE(b.elector().Step()) << t;
  }
  // a dies (no more renewals) at 41 s; b sees the last change at 41.5 s.
  double t = 41.5;
  while (!b.elector().Step()) {
    t += 2;  // b's retry period
    b.At(t);
    ASSERT_LT(t, 80) << "b never took over";
  }
  EXPECT_GE(t - 41.5, 15);             // not before the lease duration after its last sight
  EXPECT_LT(t - 41.5, 15 + 2 + 0.01);  // and within one retry period after it
  EXPECT_EQ(Lease(server)["spec"]["holderIdentity"], "b");
  EXPECT_EQ(Lease(server)["spec"]["leaseTransitions"], 1);
  // a, back from a pause, finds b holding a fresh lease: it stops leading at once.
  a.At(60);
  EXPECT_FALSE(a.elector().Step());
  EXPECT_EQ(a.stopped(), 1);
}

TEST(LeaderElector, RenewFailuresStopLeadingAtTheRenewDeadlineWithoutARound) {
  testing::FakeApiServer server;
  Candidate a(server, "a");
  a.At(1);
  ASSERT_TRUE(a.elector().Step());
  server.InjectFailure({"", "/apis/coordination.k8s.io/", 500, 0ms, -1});
  a.At(3);
  EXPECT_TRUE(a.elector().Step());  // failed renewal, still inside the deadline
  a.At(10.99);
  EXPECT_TRUE(a.elector().IsLeader());
  a.At(11);
  // 10 s since the round that last succeeded began: the gate closes on the clock alone.
  EXPECT_FALSE(a.elector().IsLeader());
  EXPECT_EQ(a.stopped(), 0);
  EXPECT_FALSE(a.elector().Step());
  EXPECT_EQ(a.stopped(), 1);
  EXPECT_EQ(a.elector().transitions(), 2u);
  // The API server comes back: nobody else took the lease, so a takes it again.
  server.ClearFailures();
  a.At(13);
  EXPECT_TRUE(a.elector().Step());
  EXPECT_EQ(a.started(), 2);
}

TEST(LeaderElector, ALostRaceIsAConflictNotALeader) {
  testing::FakeApiServer server;
  Candidate a(server, "a");
  ASSERT_TRUE(a.elector().Step());
  // Between a's read and its write someone else updates the lease: a's PUT carries the old
  // resourceVersion and gets 409.
  server.InjectFailure({"PUT", "/apis/coordination.k8s.io/", 409, 0ms, 1});
  a.At(3);
  EXPECT_TRUE(a.elector().Step());  // still inside its deadline
  a.At(11.5);
  EXPECT_FALSE(a.elector().IsLeader());
}

TEST(LeaderElector, ReleaseHandsTheLeaseOverAtOnce) {
  testing::FakeApiServer server;
  Candidate a(server, "a");
  Candidate b(server, "b");
  ASSERT_TRUE(a.elector().Step());
  b.At(1);
  ASSERT_FALSE(b.elector().Step());
  ASSERT_TRUE(a.elector().Release().ok());
  EXPECT_FALSE(a.elector().IsLeader());
  EXPECT_EQ(a.stopped(), 1);
  const json lease = Lease(server);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 1);
  b.At(1.1);
  EXPECT_TRUE(b.elector().Step());          // no waiting for 15 s
  EXPECT_TRUE(a.elector().Release().ok());  // not the leader: nothing to do
}

TEST(LeaderElector, AnUndecodableLeaseIsNotTakenOver) {
  testing::FakeApiServer server;
  server.PutLease(
      R"({"metadata":{"name":"k8s-neuron-scheduler","namespace":"kube-system"},"spec":{"holderIdentity":7}})");
  Candidate a(server, "a");
  EXPECT_FALSE(a.elector().Step());
  a.At(100);
  EXPECT_FALSE(a.elector().Step());
  EXPECT_TRUE(server.RequestsMatching("PUT", "/apis/").empty());
}

TEST(LeaderElector, RunsOnItsOwnThreadAndReleasesOnStop) {
  testing::FakeApiServer server;
  ClientConfig config;
  config.server = server.url();
  config.ca_pem = server.ca_pem();
  config.token = "test-token";
  auto client = std::move(ApiClient::Create(config)).value();
  LeaderElectionConfig le;
  le.lease_name = "k8s-neuron-scheduler";
  le.identity = "threaded";
  le.retry_period = 20ms;
  le.renew_deadline = 1s;
  le.lease_duration = 2s;
  auto steady = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  LeaderElector elector(*client, le, steady, steady);
  elector.Start();
  ASSERT_TRUE(toposched::testing::WaitUntil([&] { return elector.IsLeader(); }, 5s, 20ms));
  toposched::testing::WaitUntil(
      [&] { return server.RequestsMatching("PUT", "/apis/").size() >= 3; }, 5s, 20ms);
  EXPECT_GE(server.RequestsMatching("PUT", "/apis/").size(), 3u);  // renewing
  elector.Stop();
  EXPECT_FALSE(elector.IsLeader());
  EXPECT_EQ(Lease(server)["spec"]["holderIdentity"], "");
}

// The flags as `toposched extender` takes them: checked before anything connects.
TEST(ExtenderCli, LeaderElectFlagsAreCheckedFirst) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {
           Case{"--leader-elect --leader-elect-lease-duration 15", "invalid duration '15'"},
           Case{"--leader-elect --leader-elect-renew-deadline 20s", "must be longer than"},
           Case{"--leader-elect=true --leader-elect-resource-name ''", "must not be empty"},
           Case{"--leader-elect --offline-nodes examples/offline-nodes.yaml",
                "cannot be used with --offline-nodes"},
       }) {
    const toposched::testing::Outcome o =
        toposched::testing::RunToposched(std::string("extender ") + c.args);
    EXPECT_EQ(o.exit_code, 2) << c.args;
    EXPECT_THAT(o.out + o.err, HasSubstr(c.message)) << c.args;
  }
}

}  // namespace
}  // namespace toposched::kube
