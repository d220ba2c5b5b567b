// `toposched allocate`, run as a real process: the documented examples, exit codes and both
// output forms.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "support/run_command.h"
#include "support/temp_dir.h"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using toposched::testing::Outcome;

// Runs `toposched ARGS` (ARGS already shell-quoted where needed).
Outcome Toposched(const std::string& args) { return toposched::testing::RunToposched(args); }

const char kAws7[] =
    "Instance type trn1.32xlarge does not support requests for device: 7. Please request a "
    "different number of devices.";

TEST(AllocateCli, Trn1NextRowAsJson) {
  const Outcome o =
      Toposched("allocate --instance-type trn1.32xlarge --used 0-3 --devices 4 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[4,5,6,7],\"devices\":[4,5,6,7]}\n");
}

TEST(AllocateCli, Trn1NextRowAsText) {
  const Outcome o = Toposched("allocate --instance-type trn1.32xlarge --used 0-3 --devices 4");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("4 devices on trn1.32xlarge (best-fit)"));
  EXPECT_THAT(o.out, HasSubstr("ids:     4,5,6,7\n"));
  EXPECT_THAT(o.out, HasSubstr("devices: 4,5,6,7\n"));
  EXPECT_THAT(o.out, HasSubstr("score:   9/10"));
}

TEST(AllocateCli, SevenDevicesOnTrn1IsRefusedWithAwsText) {
  const Outcome json = Toposched("allocate --instance-type trn1.32xlarge --devices 7 --json");
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(json.out, std::string("{\"error\":\"") + kAws7 + "\"}\n");
  const Outcome text = Toposched("allocate --instance-type trn1.32xlarge --devices 7");
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_EQ(text.out, "");
  EXPECT_EQ(text.err, std::string("cannot allocate: ") + kAws7 + "\n");
}

TEST(AllocateCli, NineCoresOnInf1_6xlarge) {
  const Outcome o = Toposched("allocate --instance-type inf1.6xlarge --cores 9 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[0,1,2,3,4,5,6,7,8],\"devices\":[0,1,2]}\n");
}

TEST(AllocateCli, BusyNodeRefusalExitsOne) {
  struct Case {
    const char* args;
    const char* reason;
  } cases[] = {
      {"allocate -t inf2.48xlarge --used 1-10 --devices 2", "no 2 contiguous free devices"},
      {"allocate -t trn1.32xlarge --used 0-8,11,12,15 --devices 4", "no free aligned block of 4"},
      {"allocate -t trn1.32xlarge --used 1,5,9,13 --cores 6",
       "within one aligned block of 4 devices"},
      {"allocate -t inf1.6xlarge --used-cores 0-8 --devices 2", "no 2 contiguous free devices"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const Outcome o = Toposched(c.args);
    EXPECT_EQ(o.exit_code, 1);
    EXPECT_THAT(o.err, StartsWith("cannot allocate: "));
    EXPECT_THAT(o.err, HasSubstr(c.reason));
  }
}

TEST(AllocateCli, PoliciesDiffer) {
  Outcome o = Toposched("allocate -t trn1.32xlarge --used 12 --devices 4 --json");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "{\"ids\":[8,9,10,11],\"devices\":[8,9,10,11]}\n");
  o = Toposched("allocate -t trn1.32xlarge --used 12 --devices 4 --policy first-fit --json");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "{\"ids\":[0,1,2,3],\"devices\":[0,1,2,3]}\n");
  o = Toposched("allocate -t inf1.6xlarge --used 3 --used-cores 0-2,8,9 --cores 2 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[10,11],\"devices\":[2]}\n");
  o = Toposched("allocate -t trn1.32xlarge --used 0 --devices 7 --policy count-only --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[1,2,3,4,5,6,7],\"devices\":[1,2,3,4,5,6,7]}\n");
}

TEST(AllocateCli, LncSetting) {
  Outcome o = Toposched("allocate -t trn2.48xlarge --lnc 1 --cores 9 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[0,1,2,3,4,5,6,7,8],\"devices\":[0,1]}\n");
  o = Toposched("allocate -t trn2.48xlarge --cores 65");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("at LNC 2"));
  o = Toposched("allocate -t trn2.48xlarge --lnc 1 --cores 128 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  o = Toposched("allocate -t trn2.48xlarge --lnc 3 --cores 1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("LNC 3"));
}

struct UsageCase {
  const char* args;
  const char* message;
};

TEST(AllocateCli, InvalidUsageExitsTwoWithAClearMessage) {
  const UsageCase cases[] = {
      {"allocate -t trn1.32xlarge --devices 0", "give exactly one of --devices N or --cores N"},
      {"allocate -t trn1.32xlarge --cores 0", "give exactly one of --devices N or --cores N"},
      {"allocate -t trn1.32xlarge", "give exactly one of --devices N or --cores N"},
      {"allocate -t trn1.32xlarge --devices -1", "--devices -1 is out of range"},
      {"allocate -t trn1.32xlarge --cores -4", "--cores -4 is out of range"},
      {"allocate -t trn1.32xlarge --devices 17",
       "--devices 17 is out of range: trn1.32xlarge has 16 devices"},
      {"allocate -t trn1.32xlarge --cores 33",
       "--cores 33 is out of range: trn1.32xlarge has 32 cores"},
      {"allocate -t trn1.32xlarge --used 0-3x --devices 4", "--used: '0-3x' is not an id"},
      {"allocate -t trn1.32xlarge --used 3-1 --devices 4", "--used: range '3-1' runs backwards"},
      {"allocate -t trn1.32xlarge --used 16 --devices 4", "--used: id 16 is out of range"},
      {"allocate -t trn1.32xlarge --used 1,1 --devices 4", "--used: id 1 is listed twice"},
      {"allocate -t trn1.32xlarge --used-cores 40 --devices 4",
       "--used-cores: id 40 is out of range"},
      {"allocate -t trn1.32xlarge --used 0 --used-cores 1 --devices 4", "--used-cores overlaps"},
      {"allocate -t trn9.huge --devices 1", "unknown instance type 'trn9.huge'"},
      {"allocate -t trn1.32xlarge --devices 1 --policy worst-fit", "unknown policy 'worst-fit'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const Outcome o = Toposched(c.args);
    EXPECT_EQ(o.exit_code, 2);
    EXPECT_EQ(o.out, "");
    EXPECT_THAT(o.err, StartsWith("error: "));
    EXPECT_THAT(o.err, HasSubstr(c.message));
  }
}

TEST(AllocateCli, UnknownTypeSaysHowToAddIt) {
  const Outcome o = Toposched("allocate -t trn9.huge --devices 1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("catalog/instance-types.yaml"));
  EXPECT_THAT(o.err, HasSubstr("--catalog"));
}

TEST(AllocateCli, JsonErrorForm) {
  const UsageCase cases[] = {
      {"allocate -t trn9.huge --devices 1 --json",
       "{\"error\":\"unknown instance type 'trn9.huge'"},
      {"allocate -t trn1.32xlarge --devices 0 --json", "{\"error\":\"give exactly one of"},
      {"allocate -t trn1.32xlarge --used x --devices 1 --json",
       "{\"error\":\"--used: 'x' is not an id"},
      {"allocate -t trn1.32xlarge --devices 99 --json",
       "{\"error\":\"--devices 99 is out of range"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const Outcome o = Toposched(c.args);
    EXPECT_EQ(o.exit_code, 2);
    EXPECT_THAT(o.out, StartsWith(c.message));
    EXPECT_THAT(o.out, ::testing::EndsWith("\"}\n"));
    EXPECT_EQ(o.out.find('\n'), o.out.size() - 1) << "one line";
  }
}

TEST(AllocateCli, FlagErrorsExitTwo) {
  for (const char* args : {"allocate --devices 1",  // --instance-type is required
                           "allocate -t trn1.32xlarge --devices 1 --cores 1",
                           "allocate -t trn1.32xlarge --devices four",
                           "allocate -t trn1.32xlarge --devices 1 --bogus", ""}) {
    SCOPED_TRACE(args);
    const Outcome o = Toposched(args);
    EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
  }
}

// An unknown subcommand is named as unknown, with the real ones, and exits 2 — also with --help
// after it (CLI11 alone printed the main help and exited 0).
TEST(ToposchedCli, UnknownSubcommandIsNamedAndExitsTwo) {
  for (const char* args : {"frobnicate", "no-such --help", "--catalog x.yaml frobnicate"}) {
    SCOPED_TRACE(args);
    const Outcome o = Toposched(args);
    EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
    EXPECT_THAT(o.err, HasSubstr("unknown subcommand '"));
    EXPECT_THAT(o.err, HasSubstr("allocate, simulate, extender"));
  }
  EXPECT_EQ(Toposched("simulate --help").exit_code, 0);
}

TEST(AllocateCli, CatalogFlagUsesTheFileAndReportsItsErrors) {
  const toposched::testing::TempDir dir;
  const std::string good =
      dir.WriteFile("good.yaml",
                    "instance_types:\n  tiny.ring:\n    devices: 3\n    cores_per_device: 1\n"
                    "    rule: contiguous\n");
  Outcome o = Toposched("--catalog '" + good + "' allocate -t tiny.ring --used 1 --devices 2");
  EXPECT_EQ(o.exit_code, 1) << o.err;
  o = Toposched("--catalog '" + good + "' allocate -t tiny.ring --used 2 --devices 2 --json");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "{\"ids\":[0,1],\"devices\":[0,1]}\n");
  o = Toposched("--catalog '" + good + "' allocate -t trn1.32xlarge --devices 1");
  EXPECT_EQ(o.exit_code, 2) << "the file replaces the embedded catalog";

  const std::string bad = dir.WriteFile(
      "bad.yaml",
      "instance_types:\n  t:\n    devices: 4\n    cores_per_device: 2\n    rule: ring\n");
  o = Toposched("--catalog '" + bad + "' allocate -t t --devices 1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr(bad + ":5:"));
  EXPECT_THAT(o.err, HasSubstr("rule must be contiguous, aligned or any"));
}

}  // namespace
