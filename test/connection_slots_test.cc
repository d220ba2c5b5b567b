// The HTTP server's slot table: which connection gives its slot up to a newer one, and when a new
// connection is refused.
#include "net/connection_slots.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace toposched::net {
namespace {

using Phase = ConnectionSlots::Phase;

class SlotsTest : public ::testing::Test {
 protected:
  // A new connection named `name`: its slot, or nothing when refused. Who lost a slot is in
  // closed_.
  std::optional<ConnectionSlots::Id> Open(const std::string& name) {
    std::function<void()> evicted;
    auto id = slots_.Take([this, name] { closed_.push_back(name); }, &evicted);
    if (evicted) evicted();
    return id;
  }

  ConnectionSlots slots_{3};
  std::vector<std::string> closed_;
};

TEST_F(SlotsTest, LeastProgressThenOldestGivesUpItsSlot) {
  const auto handshaking = Open("handshaking");
  const auto anonymous = Open("anonymous");
  ASSERT_TRUE(Open("silent-old"));
  slots_.Enter(*handshaking, Phase::kHandshaking);
  slots_.Enter(*anonymous, Phase::kAnonymous);
  // Silent first, oldest first: the newest silent one goes before anyone further along.
  const auto silent_new = Open("silent-new");
  ASSERT_TRUE(silent_new);
  EXPECT_EQ(closed_, std::vector<std::string>({"silent-old"}));
  slots_.Enter(*silent_new, Phase::kHeld);
  // Then anonymous, then handshaking.
  const auto a = Open("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(closed_, std::vector<std::string>({"silent-old", "anonymous"}));
  slots_.Enter(*a, Phase::kHeld);
  ASSERT_TRUE(Open("b"));
  EXPECT_EQ(closed_, std::vector<std::string>({"silent-old", "anonymous", "handshaking"}));
  EXPECT_EQ(slots_.taken(), 3);
  EXPECT_EQ(slots_.held(), 2);
}

TEST_F(SlotsTest, HeldSlotsAreNeverTakenBackAndANewConnectionIsThenRefused) {
  for (const char* name : {"x", "y", "z"}) {
    const auto id = Open(name);
    ASSERT_TRUE(id);
    slots_.Enter(*id, Phase::kHeld);
  }
  EXPECT_FALSE(Open("late"));
  EXPECT_TRUE(closed_.empty());
  EXPECT_EQ(slots_.held(), 3);
}

TEST_F(SlotsTest, AClosedOrEvictedConnectionFreesItsSlotOnce) {
  const auto a = Open("a");
  const auto b = Open("b");
  const auto c = Open("c");
  slots_.Enter(*b, Phase::kHeld);
  slots_.Enter(*c, Phase::kHeld);
  ASSERT_TRUE(Open("d"));  // takes a's slot
  EXPECT_EQ(closed_, std::vector<std::string>({"a"}));
  // a's own close comes later: its slot is already d's, so nothing changes.
  slots_.Release(*a);
  slots_.Enter(*a, Phase::kHeld);
  EXPECT_EQ(slots_.taken(), 3);
  EXPECT_EQ(slots_.held(), 2);
  slots_.Release(*b);
  EXPECT_EQ(slots_.held(), 1);
  ASSERT_TRUE(Open("e"));  // a free slot: nobody closed
  EXPECT_EQ(closed_.size(), 1u);
}

}  // namespace
}  // namespace toposched::net
