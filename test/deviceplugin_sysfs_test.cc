// Discovery and topology of the device plugin on fake sysfs trees: parsers, inf2.48xlarge,
// trn1.32xlarge, trn2 at LNC 1 and 2, catalog mismatches, unknown types, no driver, health.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "deviceplugin/health.h"
#include "deviceplugin_fixtures.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/sysfs.h"
#include "support/temp_dir.h"

namespace toposched::deviceplugin {
namespace {

using ::testing::ElementsAre;
using testing::FakeHost;
using ::testing::HasSubstr;
using testing::ShortTempDir;
using testing::WriteFile;

nodeagent::HostPaths PathsFor(const FakeHost& host) {
  nodeagent::HostPaths paths;
  paths.sysfs_root = host.sys();
  paths.dev_root = host.dev();
  paths.opt_aws_root = host.opt();
  return paths;
}

TEST(DevicePluginSysfsTest, CoreCountWithAndWithoutNewline) {
  EXPECT_EQ(*nodeagent::ParseCoreCount("2"), 2);
  EXPECT_EQ(*nodeagent::ParseCoreCount("8\n"), 8);
  EXPECT_FALSE(nodeagent::ParseCoreCount("").ok());
  EXPECT_FALSE(nodeagent::ParseCoreCount("0").ok());
  EXPECT_FALSE(nodeagent::ParseCoreCount("-2").ok());
  EXPECT_FALSE(nodeagent::ParseCoreCount("2 cores").ok());
  EXPECT_FALSE(nodeagent::ParseCoreCount("99999999999").ok());
  EXPECT_THAT(nodeagent::ParseCoreCount("x\x01y").error(), HasSubstr("\\x01"));
}

TEST(DevicePluginSysfsTest, ConnectedDevicesFormats) {
  EXPECT_THAT(*nodeagent::ParseConnectedDevices("12, 3, 4, 1\n"), ElementsAre(12, 3, 4, 1));
  EXPECT_THAT(*nodeagent::ParseConnectedDevices("11, 1"), ElementsAre(11, 1));
  EXPECT_TRUE(nodeagent::ParseConnectedDevices("\n")->empty());
  EXPECT_TRUE(nodeagent::ParseConnectedDevices("")->empty());
  EXPECT_FALSE(nodeagent::ParseConnectedDevices("1, , 2").ok());
  EXPECT_FALSE(nodeagent::ParseConnectedDevices("1, 2,").ok());
  EXPECT_FALSE(nodeagent::ParseConnectedDevices("1, 1").ok());
  EXPECT_FALSE(nodeagent::ParseConnectedDevices("a, b").ok());
  EXPECT_FALSE(nodeagent::ParseConnectedDevices("1; 2").ok());
}

TEST(DevicePluginSysfsTest, LncConfigFile) {
  EXPECT_EQ(*nodeagent::ParseLncConfig("NEURON_LOGICAL_NC_CONFIG=1"), 1);
  EXPECT_EQ(
      *nodeagent::ParseLncConfig("# set by user data\nexport NEURON_LOGICAL_NC_CONFIG=\"2\"\n"), 2);
  EXPECT_EQ(*nodeagent::ParseLncConfig("OTHER=5\nNEURON_LOGICAL_NC_CONFIG = 1\n"), 1);
  EXPECT_THAT(nodeagent::ParseLncConfig("NEURON_LOGICAL_NC_CONFIG=4").error(),
              HasSubstr("must be 1 or 2"));
  EXPECT_THAT(nodeagent::ParseLncConfig("").error(), HasSubstr("no NEURON_LOGICAL_NC_CONFIG"));
  EXPECT_FALSE(nodeagent::ParseLncConfig("garbage").ok());
}

TEST(DevicePluginSysfsTest, ProductNameAndDeviceNames) {
  EXPECT_EQ(*nodeagent::ParseProductName("trn1.32xlarge\n"), "trn1.32xlarge");
  EXPECT_FALSE(nodeagent::ParseProductName("  \n").ok());
  EXPECT_FALSE(nodeagent::ParseProductName(std::string("a\0b", 3)).ok());
  EXPECT_EQ(nodeagent::DeviceIndexFromName("neuron12"), 12);
  EXPECT_EQ(nodeagent::DeviceIndexFromName("neuron"), std::nullopt);
  EXPECT_EQ(nodeagent::DeviceIndexFromName("neuron01"), std::nullopt);
  EXPECT_EQ(nodeagent::DeviceIndexFromName("ultraserver_mode"), std::nullopt);
}

TEST(DevicePluginSysfsTest, NoDriverSaysSoPlainly) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_FALSE(inventory.ok());
  EXPECT_THAT(inventory.error(), HasSubstr("no Neuron driver"));
  EXPECT_THAT(inventory.error(), HasSubstr(host.sys() + "/class/neuron_device"));
  std::filesystem::create_directories(host.sys() + "/class/neuron_device");
  inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_FALSE(inventory.ok());
  EXPECT_THAT(inventory.error(), HasSubstr("no Neuron devices"));
}

TEST(DevicePluginSysfsTest, Inf2Ring) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("inf2.48xlarge");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok()) << inventory.error();
  EXPECT_EQ(inventory->instance_type, "inf2.48xlarge");
  ASSERT_EQ(inventory->devices.size(), 12u);
  EXPECT_THAT(inventory->devices[0].connected, ElementsAre(11, 1));
  EXPECT_EQ(inventory->devices[0].physical_cores, 2);
  EXPECT_TRUE(inventory->warnings.empty());
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok()) << topo.error();
  EXPECT_TRUE(topo->from_catalog);
  EXPECT_TRUE(topo->notes.empty()) << topo->notes.front();
  EXPECT_EQ(topo->shape.devices, 12);
  EXPECT_EQ(topo->shape.cores, 24);
  EXPECT_EQ(topo->type->rule, topology::LegalSetRule::kContiguous);
}

TEST(DevicePluginSysfsTest, Trn1Torus) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("trn1.32xlarge");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok()) << inventory.error();
  EXPECT_THAT(inventory->devices[5].connected, ElementsAre(1, 4, 9, 6));
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok());
  EXPECT_TRUE(topo->notes.empty());
  EXPECT_EQ(topo->shape.cores, 32);
  EXPECT_EQ(topo->type->rule, topology::LegalSetRule::kAligned);
}

TEST(DevicePluginSysfsTest, Trn2DividesPhysicalCoresByLnc) {
  for (int lnc : {1, 2}) {
    ShortTempDir dir;
    FakeHost host{dir.path()};
    host.Install("trn2.48xlarge", lnc);
    auto inventory = nodeagent::Discover(PathsFor(host));
    ASSERT_TRUE(inventory.ok());
    EXPECT_EQ(inventory->lnc, lnc);
    EXPECT_EQ(inventory->devices[0].physical_cores, 8);
    auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
    ASSERT_TRUE(topo.ok());
    EXPECT_TRUE(topo->notes.empty());
    EXPECT_EQ(topo->shape.lnc, lnc);
    EXPECT_EQ(topo->shape.cores_per_device, 8 / lnc);
    EXPECT_EQ(topo->shape.cores, 16 * 8 / lnc);
  }
}

TEST(DevicePluginSysfsTest, Trn2WithoutLncFileUsesDefault) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("trn2.48xlarge");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->lnc, 0);
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->shape.lnc, 2);
  EXPECT_EQ(topo->shape.cores, 64);
}

TEST(DevicePluginSysfsTest, BadLncFileIsAWarningNotAFailure) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("trn2.48xlarge");
  WriteFile(host.opt() + "/neuron/logical_nc_config", "NEURON_LOGICAL_NC_CONFIG=7\n");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->lnc, 0);
  ASSERT_EQ(inventory->warnings.size(), 1u);
  EXPECT_THAT(inventory->warnings[0], HasSubstr("must be 1 or 2"));
}

TEST(DevicePluginSysfsTest, MismatchWithCatalogIsNotedWithBothSides) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("trn1.32xlarge");
  WriteFile(host.sys() + "/class/neuron_device/neuron5/connected_devices", "1, 4\n");
  std::filesystem::remove_all(host.sys() + "/class/neuron_device/neuron15");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->shape.devices, 16);  // the catalog wins; neuron15 will be Unhealthy
  ASSERT_EQ(topo->notes.size(), 2u);
  EXPECT_THAT(topo->notes[0], HasSubstr("catalog says trn1.32xlarge has 16 devices"));
  EXPECT_THAT(topo->notes[1], HasSubstr("sysfs connected_devices is [1, 4]"));
  EXPECT_THAT(topo->notes[1], HasSubstr("catalog says [1, 4, 9, 6]"));
}

TEST(DevicePluginSysfsTest, UnknownTypeUsesSysfsAdjacency) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.InstallDevices("inf9.huge", 4, 2, {{1}, {0, 2}, {1, 3}, {2}});
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok()) << topo.error();
  EXPECT_FALSE(topo->from_catalog);
  EXPECT_EQ(topo->type->name, "inf9.huge");
  EXPECT_EQ(topo->type->rule, topology::LegalSetRule::kContiguous);
  EXPECT_EQ(topo->shape.cores, 8);
  EXPECT_THAT(topo->notes[0], HasSubstr("not in the catalog"));
}

TEST(DevicePluginSysfsTest, UnknownAllToAllTypeAllowsAnySet) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.InstallDevices("trn3.48xlarge", 4, 8, {{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}});
  WriteFile(host.opt() + "/neuron/logical_nc_config", "NEURON_LOGICAL_NC_CONFIG=2\n");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->type->rule, topology::LegalSetRule::kAny);
  EXPECT_EQ(topo->shape.cores_per_device, 4);
}

TEST(DevicePluginSysfsTest, GarbageInSysfsIsReportedNotFatal) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("inf2.48xlarge");
  WriteFile(host.sys() + "/class/neuron_device/neuron3/core_count", "\xff\xfe");
  WriteFile(host.sys() + "/class/neuron_device/neuron4/connected_devices", "3,, 5");
  WriteFile(host.sys() + "/devices/virtual/dmi/id/product_name", "");
  auto inventory = nodeagent::Discover(PathsFor(host));
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->warnings.size(), 3u);
  EXPECT_EQ(inventory->devices[3].physical_cores, 0);
  // Without a product name the type is unknown: built from sysfs.
  auto topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory);
  ASSERT_TRUE(topo.ok());
  EXPECT_FALSE(topo->from_catalog);
  EXPECT_EQ(topo->shape.cores_per_device, 2);
  // A flag can name the type instead.
  topo = nodeagent::ResolveTopology(topology::Catalog::Embedded(), *inventory, "inf2.48xlarge");
  ASSERT_TRUE(topo.ok());
  EXPECT_TRUE(topo->from_catalog);
}

TEST(DevicePluginSysfsTest, HealthFollowsDevNodeAndCoreCount) {
  ShortTempDir dir;
  FakeHost host{dir.path()};
  host.Install("inf2.48xlarge");
  const nodeagent::HostPaths paths = PathsFor(host);
  HealthBoard board(12);
  EXPECT_EQ(PollHealth(paths, board), 12);
  EXPECT_EQ(PollHealth(paths, board), 0);
  std::filesystem::remove(host.dev() + "/neuron2");
  WriteFile(host.sys() + "/class/neuron_device/neuron7/core_count", "");
  EXPECT_THAT(nodeagent::CheckDeviceHealth(paths, 2).error(), HasSubstr("neuron2 is missing"));
  EXPECT_THAT(nodeagent::CheckDeviceHealth(paths, 7).error(), HasSubstr("core_count"));
  const uint64_t before = board.Get().version;
  EXPECT_EQ(PollHealth(paths, board), 2);
  const auto snapshot = board.Get();
  EXPECT_GT(snapshot.version, before);
  EXPECT_FALSE(snapshot.healthy[2]);
  EXPECT_FALSE(snapshot.healthy[7]);
  EXPECT_TRUE(snapshot.healthy[3]);
}

// Issue 32: a failure takes a device out at once; it comes back only after `recover_after`
// passing checks in a row, so a device that fails now and then stays out (no flapping).
TEST(DevicePluginHealthTest, AFailureCountsAtOnceAndARecoveryWaitsForItsStreak) {
  HealthBoard board(4, 3);
  const Status ok = OkStatus();
  const Status gone = Error{"/dev/neuron0 is missing"};
  EXPECT_TRUE(board.Report(0, ok, "t0"));  // the first check decides either way
  EXPECT_FALSE(board.Report(1, Error{"sysfs unreadable"}, "t0"));
  EXPECT_TRUE(board.Report(2, ok, "t0"));
  EXPECT_TRUE(board.Report(3, ok, "t0"));
  EXPECT_TRUE(board.Report(0, gone, "t1"));
  EXPECT_FALSE(board.Get().healthy[0]);
  EXPECT_FALSE(board.Report(0, ok, "t2"));
  EXPECT_FALSE(board.Report(0, gone, "t3"));  // flaps: the streak starts again
  EXPECT_FALSE(board.Report(0, ok, "t4"));
  EXPECT_FALSE(board.Report(0, ok, "t5"));
  const std::vector<DeviceFault> faults = board.Faults();
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].device, 0);
  EXPECT_EQ(faults[0].since, "t1") << "out of service since its first failure";
  EXPECT_EQ(faults[0].reason, "/dev/neuron0 is missing");
  EXPECT_EQ(faults[1].device, 1);
  const auto annotations = FaultAnnotations(faults);
  EXPECT_EQ(annotations.at("toposched.io/unhealthy-devices"), "0,1");
  EXPECT_EQ(annotations.at("toposched.io/unhealthy-devices-why"),
            "0: /dev/neuron0 is missing, since t1; 1: sysfs unreadable, since t0");
  EXPECT_TRUE(board.Report(0, ok, "t6"));  // the third passing check in a row
  EXPECT_TRUE(board.Get().healthy[0]);
  EXPECT_EQ(board.Faults().size(), 1u);
  EXPECT_TRUE(board.Report(1, ok, "t7") == false);
  EXPECT_TRUE(board.Report(1, ok, "t8") == false);
  EXPECT_TRUE(board.Report(1, ok, "t9"));
  const auto none = FaultAnnotations(board.Faults());
  EXPECT_FALSE(none.at("toposched.io/unhealthy-devices").has_value());
  EXPECT_FALSE(none.at("toposched.io/unhealthy-devices-why").has_value());
}

}  // namespace
}  // namespace toposched::deviceplugin
