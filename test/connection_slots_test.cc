// The HTTP server's slot table: which connection is closed to make room for a newer one, and when
// a connection that speaks is refused.
#include "net/connection_slots.h"

#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "net/open_file_limit.h"

namespace toposched::net {
namespace {

using Phase = ConnectionSlots::Phase;

class SlotsTest : public ::testing::Test {
 protected:
  // A new connection named `name`, in the waiting room. Who lost a place is in closed_.
  ConnectionSlots::Id Open(const std::string& name) {
    ConnectionSlots::Close evicted;
    const auto id = slots_.Wait([this, name] { closed_.push_back(name + " (waiting)"); }, &evicted);
    if (evicted) evicted();
    return id;
  }
  // `id`, named `name`, sent its first bytes: true when it got a slot.
  bool Speak(ConnectionSlots::Id id, const std::string& name) {
    ConnectionSlots::Close evicted;
    last_ = slots_.Speak(
        id, [this, name] { closed_.push_back(name); }, &evicted);
    if (evicted) evicted();
    return last_ == ConnectionSlots::Spoke::kAdmitted;
  }
  // A connection that spoke at once; its id, or 0 when refused.
  ConnectionSlots::Id Connect(const std::string& name) {
    const auto id = Open(name);
    return Speak(id, name) ? id : 0;
  }

  ConnectionSlots slots_{3, 2};
  std::vector<std::string> closed_;
  ConnectionSlots::Spoke last_ = ConnectionSlots::Spoke::kAdmitted;  // of the last Speak
};

TEST_F(SlotsTest, TheWaitingRoomClosesItsOldestAndCostsNoSlot) {
  const auto held = Connect("held");
  slots_.Enter(held, Phase::kHeld);
  const auto a = Open("a");
  Open("b");
  EXPECT_TRUE(closed_.empty());
  Open("c");
  EXPECT_EQ(closed_, std::vector<std::string>({"a (waiting)"}));
  EXPECT_EQ(slots_.waiting(), 2);
  EXPECT_EQ(slots_.taken(), 1);
  // a lost its place: when its bytes come anyway, it gets no slot.
  EXPECT_FALSE(Speak(a, "a"));
  EXPECT_EQ(last_, ConnectionSlots::Spoke::kGone);
  EXPECT_EQ(slots_.taken(), 1);
}

TEST_F(SlotsTest, AnonymousThenHandshakingThenOldestGivesUpItsSlot) {
  const auto handshaking = Connect("handshaking");
  const auto anonymous_old = Connect("anonymous-old");
  const auto anonymous_new = Connect("anonymous-new");
  slots_.Enter(anonymous_old, Phase::kAnonymous);
  slots_.Enter(anonymous_new, Phase::kAnonymous);
  ASSERT_NE(handshaking, 0u);
  // Anonymous first, oldest first.
  const auto x = Connect("x");
  ASSERT_NE(x, 0u);
  EXPECT_EQ(closed_, std::vector<std::string>({"anonymous-old"}));
  slots_.Enter(x, Phase::kHeld);
  ASSERT_NE(Connect("y"), 0u);
  EXPECT_EQ(closed_, std::vector<std::string>({"anonymous-old", "anonymous-new"}));
  // Then the one in its handshake (y is handshaking too, but newer).
  ASSERT_NE(Connect("z"), 0u);
  EXPECT_EQ(closed_, std::vector<std::string>({"anonymous-old", "anonymous-new", "handshaking"}));
  EXPECT_EQ(slots_.taken(), 3);
  EXPECT_EQ(slots_.held(), 1);
}

TEST_F(SlotsTest, HeldSlotsAreNeverTakenBackAndASpeakingConnectionIsThenRefused) {
  for (const char* name : {"x", "y", "z"}) {
    const auto id = Connect(name);
    ASSERT_NE(id, 0u);
    slots_.Enter(id, Phase::kHeld);
  }
  const auto late = Open("late");
  EXPECT_EQ(slots_.waiting(), 1) << "waiting needs no slot";
  EXPECT_FALSE(Speak(late, "late"));
  EXPECT_EQ(last_, ConnectionSlots::Spoke::kRefused);
  EXPECT_EQ(slots_.waiting(), 0) << "a refused connection is forgotten";
  EXPECT_TRUE(closed_.empty());
  EXPECT_EQ(slots_.held(), 3);
}

TEST_F(SlotsTest, AHeldAnonymousSlotBecomesEvictableAgainAfterItsAnswer) {
  const auto probe = Connect("probe");
  slots_.Enter(probe, Phase::kAnonymous);
  slots_.Enter(probe, Phase::kHeld);  // its request is answered
  ASSERT_NE(Connect("a"), 0u);
  ASSERT_NE(Connect("b"), 0u);
  const auto c = Open("c");
  slots_.Enter(c, Phase::kHeld);  // still waiting: a slot comes only with Speak
  EXPECT_EQ(slots_.held(), 1);
  slots_.Enter(probe, Phase::kAnonymous);  // answered; waits for its next request
  ASSERT_NE(Connect("d"), 0u);
  EXPECT_EQ(closed_, std::vector<std::string>({"probe"}));
}

TEST_F(SlotsTest, AClosedOrEvictedConnectionFreesItsSlotOnce) {
  const auto a = Connect("a");
  const auto b = Connect("b");
  const auto c = Connect("c");
  slots_.Enter(b, Phase::kHeld);
  slots_.Enter(c, Phase::kHeld);
  ASSERT_NE(Connect("d"), 0u);  // takes a's slot (a is handshaking)
  EXPECT_EQ(closed_, std::vector<std::string>({"a"}));
  // a's own close comes later: its slot is already d's, so nothing changes.
  slots_.Release(a);
  slots_.Enter(a, Phase::kHeld);
  EXPECT_EQ(slots_.taken(), 3);
  EXPECT_EQ(slots_.held(), 2);
  slots_.Release(b);
  EXPECT_EQ(slots_.held(), 1);
  ASSERT_NE(Connect("e"), 0u);  // a free slot: nobody closed
  EXPECT_EQ(closed_.size(), 1u);
}

// In a child (its own limits): a soft limit of 300 under a hard one of 600 is raised to 600, and
// the waiting room shrinks to what 600 leaves after 256 slots and the 256 kept for the rest.
TEST(OpenFileLimitTest, TheSoftLimitIsRaisedAndTheWaitingRoomFitsWhatIsLeft) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit low{300, 600};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) _exit(10);
    HttpServerOptions options;
    options.max_connections = 256;
    options.max_waiting_connections = 4096;
    const HttpServerOptions fitted = FitOpenFileLimit(options);
    rlimit now{};
    getrlimit(RLIMIT_NOFILE, &now);
    if (now.rlim_cur != 600) _exit(11);
    if (fitted.max_waiting_connections != 600 - 256 - 256) _exit(12);
    // Enough already: nothing changes.
    options.max_waiting_connections = 8;
    if (FitOpenFileLimit(options).max_waiting_connections != 8) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit, 11: not raised, 12: room, 13: changed";
}

}  // namespace
}  // namespace toposched::net
