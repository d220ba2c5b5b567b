// What the Neuron driver tells about this node: devices under /sys/class/neuron_device, their
// physical core counts and links, the instance type from DMI, the node's logical-core (LNC)
// setting, and whether each /dev/neuronN is present. Every root is a parameter so tests run on a
// fake tree in a temp dir.
//
// All file contents are untrusted: the parsers return errors that quote the bad text, and never
// throw.
#ifndef TOPOSCHED_NODEAGENT_SYSFS_H_
#define TOPOSCHED_NODEAGENT_SYSFS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::nodeagent {

struct HostPaths {
  std::string sysfs_root = "/sys";
  std::string dev_root = "/dev";
  std::string opt_aws_root = "/opt/aws";

  std::string NeuronClassDir() const;          // <sys>/class/neuron_device
  std::string DeviceSysDir(int device) const;  // <sys>/class/neuron_device/neuronN
  std::string DeviceNode(int device) const;    // <dev>/neuronN
  std::string ProductNameFile() const;         // <sys>/devices/virtual/dmi/id/product_name
  std::string LncConfigFile() const;           // <opt>/neuron/logical_nc_config
};

// `core_count`: a positive decimal number, with or without a trailing newline (the driver prints
// none).
Result<int> ParseCoreCount(std::string_view text);
// `connected_devices`: "a, b, c\n", or empty / a lone newline when the device has no links.
Result<std::vector<int>> ParseConnectedDevices(std::string_view text);
// `logical_nc_config`: lines of KEY=VALUE; the value of NEURON_LOGICAL_NC_CONFIG (1 or 2). Blank
// lines, '#' comments, an `export ` prefix and quotes are accepted.
Result<int> ParseLncConfig(std::string_view text);
// DMI product_name, trimmed of whitespace. Errors when empty or not printable.
Result<std::string> ParseProductName(std::string_view text);
// "neuron12" -> 12; nullopt for anything else in the class directory (e.g. ultraserver_mode).
std::optional<int> DeviceIndexFromName(std::string_view name);

struct SysfsDevice {
  int index = 0;
  int physical_cores = 0;
  std::vector<int> connected;
  bool operator==(const SysfsDevice&) const = default;
};

struct Inventory {
  std::string instance_type;          // empty when DMI is unreadable
  std::vector<SysfsDevice> devices;   // ascending index
  int lnc = 0;                        // 0 when the node has no LNC file
  std::vector<std::string> warnings;  // unreadable or malformed parts that were skipped
  bool operator==(const Inventory&) const = default;
};

// Reads the whole inventory. An error means there is nothing to serve (no driver, no devices),
// and says what was looked for and where.
Result<Inventory> Discover(const HostPaths& paths);

// One device's health: its sysfs directory and /dev node exist and core_count reads as a count.
// The error says which check failed.
Status CheckDeviceHealth(const HostPaths& paths, int device);

// Reads a small file whole (at most 64 KiB). Errors name the path and the errno text.
Result<std::string> ReadSmallFile(const std::string& path);

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_SYSFS_H_
