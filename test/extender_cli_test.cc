// `toposched extender`'s HTTP flags, on the real binary: plain HTTP only on loopback, TLS flags
// that cannot work refused with the reason, the bounds listed in --help.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/run_command.h"

namespace {

using ::testing::HasSubstr;

TEST(ExtenderCli, PlainHttpOnANonLoopbackAddressIsRefused) {
  const toposched::testing::Outcome o = toposched::testing::RunToposched(
      "extender --offline-nodes examples/offline-nodes.yaml --listen 0.0.0.0:0");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.out + o.err, HasSubstr("plain HTTP on a non-loopback address"));
  EXPECT_THAT(o.out + o.err, HasSubstr("--allow-insecure-http"));
}

TEST(ExtenderCli, AClientCaWithoutTlsIsRefused) {
  const toposched::testing::Outcome o = toposched::testing::RunToposched(
      "extender --offline-nodes examples/offline-nodes.yaml --listen 127.0.0.1:0 "
      "--tls-client-ca-file examples/offline-nodes.yaml");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.out + o.err, HasSubstr("--tls-client-ca-file needs TLS"));
}

TEST(ExtenderCli, AHistoryIntervalOutOfRangeIsRefused) {
  for (const char* interval : {"500ms", "2h", "often"}) {
    const toposched::testing::Outcome o = toposched::testing::RunToposched(
        std::string("extender --offline-nodes examples/offline-nodes.yaml --listen 127.0.0.1:0 "
                    "--history-interval ") +
        interval);
    EXPECT_EQ(o.exit_code, 2) << interval;
    EXPECT_THAT(o.out + o.err, HasSubstr("--history-interval")) << interval;
  }
}

TEST(ExtenderCli, VersionNamesTheAllocatorTheBinaryRunsOn) {
  const toposched::testing::Outcome o = toposched::testing::RunToposched("--version");
  EXPECT_EQ(o.exit_code, 0);
#ifdef TOPOSCHED_WITH_JEMALLOC
  EXPECT_THAT(o.out, HasSubstr("(allocator: jemalloc 5."));
#else
  EXPECT_THAT(o.out, HasSubstr("(allocator: the C library's malloc)"));
#endif
}

TEST(ExtenderCli, HelpListsTheBounds) {
  const toposched::testing::Outcome o = toposched::testing::RunToposched("extender --help");
  EXPECT_EQ(o.exit_code, 0);
  for (const char* flag :
       {"--max-connections", "--max-bodies-in-flight", "--body-memory-limit", "--header-timeout",
        "--handshake-timeout", "--body-timeout", "--bind-queue", "--bind-wait-limit",
        "--allow-insecure-http", "--tls-client-ca-file", "--history-interval"}) {
    EXPECT_THAT(o.out, HasSubstr(flag));
  }
}

}  // namespace
