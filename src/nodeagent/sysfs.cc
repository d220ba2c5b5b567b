#include "nodeagent/sysfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <sys/stat.h>

#include "base/text.h"
#include "claims/keys.h"

namespace toposched::nodeagent {
namespace {

constexpr size_t kMaxFileBytes = 64 * 1024;
// The driver supports 64 devices per host; ids far beyond that are garbage, not hardware.
constexpr int kMaxDeviceIndex = 1023;

// Quotes untrusted text for an error message: at most 40 characters, control bytes escaped.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 40) out += "...";
  return out + "\"";
}

// Decimal digits only, value <= max.
std::optional<int> ParseNumber(std::string_view text, int max) {
  const std::optional<int64_t> value = ParseDecimal(text, 0, max);
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string HostPaths::NeuronClassDir() const { return sysfs_root + "/class/neuron_device"; }
std::string HostPaths::DeviceSysDir(int device) const {
  return fmt::format("{}/neuron{}", NeuronClassDir(), device);
}
std::string HostPaths::DeviceNode(int device) const {
  return fmt::format("{}/neuron{}", dev_root, device);
}
std::string HostPaths::ProductNameFile() const {
  return sysfs_root + "/devices/virtual/dmi/id/product_name";
}
std::string HostPaths::LncConfigFile() const { return opt_aws_root + "/neuron/logical_nc_config"; }

Result<int> ParseCoreCount(std::string_view text) {
  const std::string_view trimmed = TrimSpace(text);
  const auto value = ParseNumber(trimmed, 1024);
  if (!value || *value == 0) {
    return Error{fmt::format("core_count: expected a positive number, got {}", Quote(text))};
  }
  return *value;
}

Result<std::vector<int>> ParseConnectedDevices(std::string_view text) {
  std::vector<int> out;
  std::string_view rest = TrimSpace(text);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimSpace(rest.substr(0, comma));
    const auto value = ParseNumber(item, kMaxDeviceIndex);
    if (!value) {
      return Error{fmt::format("connected_devices: expected \"a, b, c\", got {}", Quote(text))};
    }
    if (std::find(out.begin(), out.end(), *value) != out.end()) {
      return Error{
          fmt::format("connected_devices: device {} listed twice in {}", *value, Quote(text))};
    }
    out.push_back(*value);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (TrimSpace(rest).empty()) {
      return Error{fmt::format("connected_devices: trailing comma in {}", Quote(text))};
    }
  }
  return out;
}

Result<int> ParseLncConfig(std::string_view text) {
  constexpr std::string_view kKey = claims::kEnvLogicalNcConfig;
  std::optional<int> found;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    std::string_view line = TrimSpace(rest.substr(0, newline));
    rest = newline == std::string_view::npos ? std::string_view{} : rest.substr(newline + 1);
    if (line.empty() || line.front() == '#') continue;
    if (line.substr(0, 7) == "export ") line = TrimSpace(line.substr(7));
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Error{fmt::format("logical_nc_config: expected KEY=VALUE, got {}", Quote(line))};
    }
    if (TrimSpace(line.substr(0, eq)) != kKey) continue;
    std::string_view value = TrimSpace(line.substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (value != "1" && value != "2") {
      return Error{fmt::format("logical_nc_config: {} must be 1 or 2, got {}", kKey, Quote(value))};
    }
    found = value[0] - '0';
  }
  if (!found) return Error{fmt::format("logical_nc_config: no {}= line", kKey)};
  return *found;
}

Result<std::string> ParseProductName(std::string_view text) {
  const std::string_view trimmed = TrimSpace(text);
  if (trimmed.empty()) return Error{"product_name is empty"};
  if (trimmed.size() > 128) return Error{"product_name is too long: " + Quote(trimmed)};
  for (char c : trimmed) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return Error{"product_name is not printable: " + Quote(trimmed)};
  }
  return std::string(trimmed);
}

std::optional<int> DeviceIndexFromName(std::string_view name) {
  constexpr std::string_view kPrefix = "neuron";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  return ParseNumber(digits, kMaxDeviceIndex);
}

Result<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{fmt::format("cannot open {}: {}", path, std::strerror(errno))};
  std::string out;
  char buffer[4096];
  while (out.size() < kMaxFileBytes) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      return Error{fmt::format("cannot read {}: {}", path, std::strerror(saved))};
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (out.size() > kMaxFileBytes) out.resize(kMaxFileBytes);
  return out;
}

Result<Inventory> Discover(const HostPaths& paths) {
  Inventory inventory;
  const std::string class_dir = paths.NeuronClassDir();
  std::error_code ec;
  if (!std::filesystem::is_directory(class_dir, ec)) {
    return Error{fmt::format(
        "no Neuron driver: {} does not exist (is the aws-neuronx-dkms driver installed and "
        "loaded, and is the host's /sys mounted?)",
        class_dir)};
  }
  std::vector<int> indexes;
  std::filesystem::directory_iterator it(class_dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (auto index = DeviceIndexFromName(it->path().filename().string())) {
      indexes.push_back(*index);
    }
  }
  if (ec) return Error{fmt::format("cannot list {}: {}", class_dir, ec.message())};
  if (indexes.empty()) {
    return Error{fmt::format("no Neuron devices: {} has no neuronN entries", class_dir)};
  }
  std::sort(indexes.begin(), indexes.end());

  for (int index : indexes) {
    SysfsDevice device;
    device.index = index;
    const std::string dir = paths.DeviceSysDir(index);
    auto cores_text = ReadSmallFile(dir + "/core_count");
    if (cores_text.ok()) {
      auto cores = ParseCoreCount(*cores_text);
      if (cores.ok()) {
        device.physical_cores = *cores;
      } else {
        inventory.warnings.push_back(fmt::format("neuron{}: {}", index, cores.error()));
      }
    } else {
      inventory.warnings.push_back(cores_text.error());
    }
    auto links_text = ReadSmallFile(dir + "/connected_devices");
    if (links_text.ok()) {
      auto links = ParseConnectedDevices(*links_text);
      if (links.ok()) {
        device.connected = std::move(links).value();
      } else {
        inventory.warnings.push_back(fmt::format("neuron{}: {}", index, links.error()));
      }
    } else {
      inventory.warnings.push_back(links_text.error());
    }
    inventory.devices.push_back(std::move(device));
  }

  auto product = ReadSmallFile(paths.ProductNameFile());
  if (product.ok()) {
    auto name = ParseProductName(*product);
    if (name.ok()) {
      inventory.instance_type = std::move(name).value();
    } else {
      inventory.warnings.push_back(fmt::format("{}: {}", paths.ProductNameFile(), name.error()));
    }
  } else {
    inventory.warnings.push_back(product.error());
  }

  const std::string lnc_file = paths.LncConfigFile();
  if (Exists(lnc_file)) {
    auto text = ReadSmallFile(lnc_file);
    auto lnc = text.ok() ? ParseLncConfig(*text) : Result<int>(Error{text.error()});
    if (lnc.ok()) {
      inventory.lnc = *lnc;
    } else {
      inventory.warnings.push_back(
          fmt::format("{}: {} (using the instance type's default LNC)", lnc_file, lnc.error()));
    }
  }
  return inventory;
}

Status CheckDeviceHealth(const HostPaths& paths, int device) {
  const std::string node = paths.DeviceNode(device);
  if (!Exists(node)) return Error{fmt::format("{} is missing", node)};
  const std::string dir = paths.DeviceSysDir(device);
  TOPOSCHED_ASSIGN_OR_RETURN(auto text, ReadSmallFile(dir + "/core_count"));
  auto cores = ParseCoreCount(text);
  if (!cores.ok()) return Error{fmt::format("{}: {}", dir, cores.error())};
  return OkStatus();
}

}  // namespace toposched::nodeagent
