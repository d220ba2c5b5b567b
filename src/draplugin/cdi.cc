#include "draplugin/cdi.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <sys/stat.h>

#include "base/json_reader.h"
#include "base/json_writer.h"
#include "topology/id_ranges.h"

namespace toposched::draplugin {
namespace {

namespace fs = std::filesystem;
namespace ondemand = simdjson::ondemand;
using json::Path;

constexpr std::string_view kFilePrefix = "neuron.aws.com-";
constexpr std::string_view kFileSuffix = ".json";
constexpr std::string_view kTempMarker = ".json.tmp";
constexpr std::string_view kClaimAnnotation = "toposched.io/claim";
constexpr std::string_view kClaimUidAnnotation = "toposched.io/claim-uid";
constexpr std::string_view kDeviceAnnotation = "toposched.io/device";
constexpr std::string_view kPoolAnnotation = "toposched.io/pool";
constexpr std::string_view kRequestsAnnotation = "toposched.io/requests";
constexpr std::string_view kAdminAnnotation = "toposched.io/admin-access";
// What the names were read at and what they held, so that a restart at another LNC (or on a
// hand-edited spec) does not read them again under other rules.
constexpr std::string_view kLncAnnotation = "toposched.io/lnc";
constexpr std::string_view kInstanceTypeAnnotation = "toposched.io/instance-type";
constexpr std::string_view kPhysicalCoresAnnotation = "toposched.io/physical-cores";
constexpr std::string_view kDeviceNodePrefix = "/dev/neuron";

std::string Errno() { return std::strerror(errno); }

std::vector<std::string> Split(std::string_view text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

Status ReadAnnotations(ondemand::value& value, const Path& path,
                       std::map<std::string, std::string>& out) {
  return json::ForEachMapEntryOf(
      value, path, [&](std::string_view key, ondemand::value v, const Path& at) -> Status {
        return json::ReadString(v, at, out[std::string(key)]);
      });
}

// Node-wide physical core ids, as the spec records them.
std::vector<int> CoreIds(const topology::CoreBits& cores) {
  std::vector<int> ids;
  for (size_t p = 0; p < cores.size(); ++p) {
    if (cores.test(p)) ids.push_back(static_cast<int>(p));
  }
  return ids;
}

}  // namespace

topology::DeviceMask DeviceNodesIn(std::string_view text, int devices) {
  topology::DeviceMask mask = 0;
  for (size_t at = text.find(kDeviceNodePrefix); at != std::string_view::npos;
       at = text.find(kDeviceNodePrefix, at + 1)) {
    size_t end = at + kDeviceNodePrefix.size();
    int id = 0;
    bool digits = false;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) && id < 1000) {
      id = id * 10 + (text[end] - '0');
      digits = true;
      ++end;
    }
    if (digits && id < devices) mask |= topology::DeviceMask{1} << id;
  }
  return mask;
}

Status CheckClaimUid(std::string_view uid) {
  if (uid.empty() || uid.size() > 128)
    return Error{fmt::format("claim uid '{}' is empty or too long", uid)};
  for (char c : uid) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      return Error{
          fmt::format("claim uid '{}' has a character other than letters, digits and '-'", uid)};
    }
  }
  return OkStatus();
}

std::string CdiSpecPath(const std::string& cdi_root, std::string_view claim_uid) {
  return fmt::format("{}/{}{}{}", cdi_root, kFilePrefix, claim_uid, kFileSuffix);
}

std::string CdiSpecJson(const PreparedClaim& claim) {
  JsonTree devices = JsonTree::array();
  for (const PreparedDevice& device : claim.devices) {
    JsonTree annotations = {
        {kDeviceAnnotation, device.device},
        {kPoolAnnotation, device.pool},
        {kRequestsAnnotation, fmt::format("{}", fmt::join(device.requests, ","))}};
    if (device.admin_access) annotations[kAdminAnnotation] = "true";
    if (!device.units.empty()) {
      annotations[kPhysicalCoresAnnotation] = topology::FormatIdRanges(CoreIds(device.units.cores));
    }
    JsonTree nodes = JsonTree::array();
    for (const std::string& node : device.device_nodes) {
      nodes.push_back(JsonTree{{"path", node}, {"permissions", "rw"}});
    }
    devices.push_back(JsonTree{{"name", claim.CdiName(device)},
                               {"annotations", std::move(annotations)},
                               {"containerEdits", {{"deviceNodes", std::move(nodes)}}}});
  }
  JsonTree env = JsonTree::array();
  for (const auto& [name, value] : claim.env) env.push_back(fmt::format("{}={}", name, value));
  const JsonTree spec = {{"cdiVersion", kCdiVersion},
                         {"kind", kCdiKind},
                         {"annotations",
                          {{kClaimAnnotation, claim.ns + "/" + claim.name},
                           {kClaimUidAnnotation, claim.uid},
                           {kInstanceTypeAnnotation, claim.instance_type},
                           {kLncAnnotation, std::to_string(claim.lnc)}}},
                         {"devices", std::move(devices)},
                         {"containerEdits", {{"env", std::move(env)}}}};
  // A newline at the end, as a text file has.
  return WriteJson(spec) + "\n";
}

namespace {

// A spec as read, before any of it is trusted.
struct RawDevice {
  std::string name;
  std::map<std::string, std::string> annotations;
  std::vector<std::string> nodes;
};
struct RawSpec {
  std::string kind;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> env;
  std::vector<RawDevice> devices;
};

// containerEdits.env: NAME=VALUE entries.
Status ReadEnv(ondemand::value& value, const Path& at, std::map<std::string, std::string>& env) {
  return json::ForEachFieldOf(value, at,
                              [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                                if (k != "env") return OkStatus();
                                return json::ForEachElementOf(
                                    v, p, [&](size_t, ondemand::value e, const Path& ep) -> Status {
                                      std::string entry;
                                      TOPOSCHED_RETURN_IF_ERROR(json::ReadString(e, ep, entry));
                                      const size_t eq = entry.find('=');
                                      if (eq == std::string::npos || eq == 0)
                                        return json::ErrorAt(ep, "expected NAME=VALUE");
                                      env[entry.substr(0, eq)] = entry.substr(eq + 1);
                                      return OkStatus();
                                    });
                              });
}

// A device's containerEdits.deviceNodes[].path.
Status ReadDeviceNodes(ondemand::value& value, const Path& at, std::vector<std::string>& nodes) {
  return json::ForEachFieldOf(
      value, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
        if (k != "deviceNodes") return OkStatus();
        return json::ForEachElementOf(
            v, p, [&](size_t, ondemand::value n, const Path& np) -> Status {
              return json::ForEachFieldOf(
                  n, np, [&](std::string_view k2, ondemand::value v2, const Path& p2) -> Status {
                    if (k2 != "path") return OkStatus();
                    std::string node;
                    TOPOSCHED_RETURN_IF_ERROR(json::ReadString(v2, p2, node));
                    nodes.push_back(std::move(node));
                    return OkStatus();
                  });
            });
      });
}

Result<RawSpec> ReadRawSpec(std::string_view text) {
  RawSpec spec;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path("cdi");
    return json::ForEachFieldOf(
        root, path, [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key == "kind") return json::ReadString(value, at, spec.kind);
          if (key == "annotations") return ReadAnnotations(value, at, spec.annotations);
          if (key == "containerEdits") return ReadEnv(value, at, spec.env);
          if (key != "devices") return OkStatus();
          return json::ForEachElementOf(
              value, at, [&](size_t, ondemand::value element, const Path& ep) -> Status {
                RawDevice device;
                Status read = json::ForEachFieldOf(
                    element, ep,
                    [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                      if (k == "name") return json::ReadString(v, p, device.name);
                      if (k == "annotations") return ReadAnnotations(v, p, device.annotations);
                      if (k != "containerEdits") return OkStatus();
                      return ReadDeviceNodes(v, p, device.nodes);
                    });
                spec.devices.push_back(std::move(device));
                return read;
              });
        });
  });
  if (!status.ok()) return Error{status.error()};
  return spec;
}

// The shape a spec's names were read at. A spec written before toposched.io/lnc (an older
// plugin) records none (`legacy`): its device and set names are device ids at any LNC and are
// read at the node's current one; a core range's name means other cores at another LNC, so it is
// held by its device nodes (whole devices) instead of trusted at the current LNC. `problem`: why
// no name of it can be read.
struct NamesShape {
  std::optional<topology::NodeShape> shape;
  bool legacy = false;
  std::string problem;
};

NamesShape NamesShapeOf(std::map<std::string, std::string>& annotations,
                        const topology::NodeShape& shape) {
  NamesShape out;
  const std::string& recorded_type = annotations[std::string(kInstanceTypeAnnotation)];
  const std::string& recorded_lnc = annotations[std::string(kLncAnnotation)];
  if (!recorded_type.empty() && recorded_type != shape.type->name) {
    // Checked first: a spec of another type is never read by name, whether or not it records an
    // LNC (found by cdi_spec_fuzz).
    out.problem =
        fmt::format("it was prepared on a {}, this node is a {}", recorded_type, shape.type->name);
  } else if (recorded_lnc.empty()) {
    out.legacy = true;
    out.shape = shape;
  } else {
    int lnc = 0;
    const auto [end, parsed] =
        std::from_chars(recorded_lnc.data(), recorded_lnc.data() + recorded_lnc.size(), lnc);
    auto at_lnc = parsed == std::errc() && end == recorded_lnc.data() + recorded_lnc.size()
                      ? topology::NodeShape::Make(*shape.type, lnc)
                      : Result<topology::NodeShape>(Error{"not a number"});
    if (at_lnc.ok()) {
      out.shape = *at_lnc;
    } else {
      out.problem = fmt::format("{} '{}': {}", kLncAnnotation, recorded_lnc, at_lnc.error());
    }
  }
  return out;
}

// Why a device's recorded offer cannot be trusted (empty: it can, and `prepared` holds its offer
// and units).
std::string CheckDevice(const NamesShape& names, const topology::DeviceMask nodes, int lnc,
                        RawDevice& device, PreparedDevice& prepared) {
  if (!names.problem.empty()) return names.problem;
  auto offer = dra::OfferFromName(*names.shape, prepared.device);
  if (!offer.ok()) return offer.error();
  if (names.legacy && offer->kind == dra::OfferKind::kCores) {
    return fmt::format(
        "it has no {} annotation, and a core range's name means other cores at another LNC",
        kLncAnnotation);
  }
  if (offer->placement.devices != nodes) {
    return fmt::format("its device nodes are not those of {} at LNC {}", prepared.device, lnc);
  }
  prepared.offer = std::move(offer).value();
  const PhysicalUnits units = PhysicalUnitsOf(*names.shape, prepared.offer);
  const std::string& recorded = device.annotations[std::string(kPhysicalCoresAnnotation)];
  const std::string expected = topology::FormatIdRanges(CoreIds(units.cores));
  if (!prepared.admin_access && !recorded.empty() && recorded != expected) {
    return fmt::format("it records physical cores {}, but {} at LNC {} is {}", recorded,
                       prepared.device, lnc, expected);
  }
  if (!prepared.admin_access) prepared.units = units;
  return {};
}

}  // namespace

Result<PreparedClaim> DecodeCdiSpec(std::string_view text, const topology::NodeShape& shape) {
  TOPOSCHED_ASSIGN_OR_RETURN(RawSpec raw, ReadRawSpec(text));
  std::map<std::string, std::string>& annotations = raw.annotations;
  PreparedClaim claim;
  claim.env = std::move(raw.env);
  if (raw.kind != kCdiKind) {
    return Error{fmt::format("cdi.kind: '{}' is not {}", raw.kind, kCdiKind)};
  }
  claim.uid = annotations[std::string(kClaimUidAnnotation)];
  TOPOSCHED_RETURN_IF_ERROR(CheckClaimUid(claim.uid));
  const std::string& who = annotations[std::string(kClaimAnnotation)];
  const size_t slash = who.find('/');
  if (slash == std::string::npos) {
    return Error{
        fmt::format("cdi.annotations[\"{}\"]: '{}' is not NAMESPACE/NAME", kClaimAnnotation, who)};
  }
  claim.ns = who.substr(0, slash);
  claim.name = who.substr(slash + 1);

  const NamesShape names = NamesShapeOf(annotations, shape);
  claim.lnc = NamesLnc(names.shape ? *names.shape : shape);
  claim.instance_type = annotations[std::string(kInstanceTypeAnnotation)];
  std::vector<std::string> held_because;
  for (RawDevice& device : raw.devices) {
    PreparedDevice prepared;
    prepared.device = device.annotations[std::string(kDeviceAnnotation)];
    prepared.pool = device.annotations[std::string(kPoolAnnotation)];
    prepared.requests = Split(device.annotations[std::string(kRequestsAnnotation)], ',');
    prepared.admin_access = device.annotations[std::string(kAdminAnnotation)] == "true";
    prepared.device_nodes = std::move(device.nodes);
    if (device.name != claim.uid + "-" + prepared.device) {
      return Error{
          fmt::format("cdi device '{}' is not {}-{}", device.name, claim.uid, prepared.device)};
    }
    topology::DeviceMask nodes = 0;
    for (const std::string& node : prepared.device_nodes)
      nodes |= DeviceNodesIn(node, shape.devices);
    const std::string problem = CheckDevice(names, nodes, claim.lnc, device, prepared);
    if (!problem.empty()) {
      prepared.offer = {};
      prepared.offer.name = prepared.device;
      // Fail closed: what its device nodes name, whole (the whole node when it names none).
      // Admin access holds nothing whatever its name.
      if (!prepared.admin_access) {
        prepared.units = WholeDevices(*shape.type, nodes != 0 ? nodes : shape.AllDevices());
        held_because.push_back(fmt::format("{}: {}", prepared.device, problem));
      }
    }
    claim.devices.push_back(std::move(prepared));
  }
  claim.held_because = fmt::format("{}", fmt::join(held_because, "; "));
  SetHeldFromDevices(claim);
  return claim;
}

Status WriteCdiSpec(const std::string& cdi_root, const PreparedClaim& claim) {
  TOPOSCHED_RETURN_IF_ERROR(CheckClaimUid(claim.uid));
  const std::string path = CdiSpecPath(cdi_root, claim.uid);
  // Not *.json, so a runtime scanning the directory never reads half a spec.
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return Error{fmt::format("cannot create a temp file beside {}: {}", path, Errno())};
  const std::string content = CdiSpecJson(claim);
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = Errno();
      ::close(fd);
      ::unlink(temp.c_str());
      return Error{fmt::format("cannot write {}: {}", temp, why)};
    }
    written += static_cast<size_t>(n);
  }
  // The runtime reads the file with its own permissions; mkstemp made it 0600.
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = Errno();
    ::unlink(temp.c_str());
    return Error{fmt::format("cannot write {}: {}", temp, why)};
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = Errno();
    ::unlink(temp.c_str());
    return Error{fmt::format("cannot rename {} to {}: {}", temp, path, why)};
  }
  // The rename itself survives a crash once the directory is synced.
  if (const int dir = ::open(cdi_root.c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return OkStatus();
}

Status RemoveCdiSpec(const std::string& cdi_root, std::string_view claim_uid) {
  TOPOSCHED_RETURN_IF_ERROR(CheckClaimUid(claim_uid));
  const std::string path = CdiSpecPath(cdi_root, claim_uid);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Error{fmt::format("cannot remove {}: {}", path, Errno())};
  }
  return OkStatus();
}

Result<Checkpoint> LoadCheckpoint(const std::string& cdi_root, const topology::NodeShape& shape) {
  std::error_code error;
  fs::create_directories(cdi_root, error);
  if (error)
    return Error{fmt::format("cannot create CDI directory {}: {}", cdi_root, error.message())};
  Checkpoint checkpoint;
  fs::directory_iterator it(cdi_root, error);
  if (error)
    return Error{fmt::format("cannot read CDI directory {}: {}", cdi_root, error.message())};
  std::vector<fs::path> specs;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kFilePrefix)) continue;
    if (name.find(kTempMarker) != std::string::npos) {
      // A write that did not reach its rename: the claim is as its spec file (if any) says.
      std::error_code removed;
      fs::remove(entry.path(), removed);
      if (removed) {
        checkpoint.problems.push_back(
            fmt::format("cannot remove leftover {}: {}", entry.path().string(), removed.message()));
      } else {
        checkpoint.removed_temp_files.push_back(entry.path().string());
      }
      continue;
    }
    if (name.ends_with(kFileSuffix)) specs.push_back(entry.path());
  }
  std::sort(specs.begin(), specs.end());
  for (const fs::path& path : specs) {
    const std::string name = path.filename().string();
    const std::string_view uid = std::string_view(name).substr(
        kFilePrefix.size(), name.size() - kFilePrefix.size() - kFileSuffix.size());
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (in.is_open()) text << in.rdbuf();
    auto claim = in.is_open() && !in.bad()
                     ? DecodeCdiSpec(text.str(), shape)
                     : Result<PreparedClaim>(Error{"the file cannot be opened or read"});
    std::string unreadable;
    if (!claim.ok()) {
      unreadable = claim.error();
    } else if (claim->uid != uid) {
      unreadable = fmt::format("holds claim uid {}, not the one in its name", claim->uid);
    }
    if (!unreadable.empty()) {
      // Fail closed: its claim is still prepared for all we know, so it holds every device the
      // text names (the whole node when it names none) until kubelet unprepares the uid in its
      // file name, or the file is removed.
      PreparedClaim held;
      held.uid = std::string(uid);
      held.lnc = NamesLnc(shape);
      held.instance_type = shape.type->name;
      const topology::DeviceMask named = DeviceNodesIn(text.str(), shape.devices);
      held.held = WholeDevices(*shape.type, named != 0 ? named : shape.AllDevices());
      held.held_because = fmt::format(
          "its CDI spec could not be read ({}); it holds {}", unreadable,
          named != 0 ? "the devices its text names" : "the whole node (it names no device)");
      checkpoint.problems.push_back(fmt::format(
          "{}: {}; holding {} until kubelet unprepares claim uid {}{}", path.string(),
          held.held_because, DescribeUnits(*shape.type, held.held), uid,
          CheckClaimUid(uid).ok() ? " or the file is removed"
                                  : " (it cannot: remove the file once no pod uses them)"));
      checkpoint.claims.push_back(std::move(held));
      continue;
    }
    if (!claim->held_because.empty()) {
      checkpoint.problems.push_back(
          fmt::format("{}: claim {}: {}; holding {} until it is unprepared", path.string(),
                      claim->Who(), claim->held_because, DescribeUnits(*shape.type, claim->held)));
    }
    checkpoint.claims.push_back(std::move(claim).value());
  }
  return checkpoint;
}

}  // namespace toposched::draplugin
