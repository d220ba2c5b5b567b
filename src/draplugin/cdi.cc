#include "draplugin/cdi.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <sys/stat.h>

#include "base/json_escape.h"
#include "base/json_reader.h"

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

}  // namespace

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
  std::string out;
  out += fmt::format(
      "{{\"cdiVersion\":{},\"kind\":{},\"annotations\":{{{}:{},{}:{}}},\"devices\":[",
      JsonQuote(kCdiVersion), JsonQuote(kCdiKind), JsonQuote(kClaimAnnotation),
      JsonQuote(claim.ns + "/" + claim.name), JsonQuote(kClaimUidAnnotation), JsonQuote(claim.uid));
  for (size_t i = 0; i < claim.devices.size(); ++i) {
    const PreparedDevice& device = claim.devices[i];
    if (i > 0) out += ',';
    out += fmt::format("{{\"name\":{},\"annotations\":{{{}:{},{}:{},{}:{}",
                       JsonQuote(claim.CdiName(device)), JsonQuote(kDeviceAnnotation),
                       JsonQuote(device.device), JsonQuote(kPoolAnnotation), JsonQuote(device.pool),
                       JsonQuote(kRequestsAnnotation),
                       JsonQuote(fmt::format("{}", fmt::join(device.requests, ","))));
    if (device.admin_access) out += fmt::format(",{}:\"true\"", JsonQuote(kAdminAnnotation));
    out += "},\"containerEdits\":{\"deviceNodes\":[";
    for (size_t n = 0; n < device.device_nodes.size(); ++n) {
      if (n > 0) out += ',';
      out +=
          fmt::format("{{\"path\":{},\"permissions\":\"rw\"}}", JsonQuote(device.device_nodes[n]));
    }
    out += "]}}";
  }
  out += "],\"containerEdits\":{\"env\":[";
  bool first = true;
  for (const auto& [name, value] : claim.env) {
    if (!first) out += ',';
    first = false;
    out += JsonQuote(fmt::format("{}={}", name, value));
  }
  out += "]}}\n";
  return out;
}

Result<PreparedClaim> DecodeCdiSpec(std::string_view text, const topology::NodeShape& shape) {
  PreparedClaim claim;
  std::map<std::string, std::string> annotations;
  struct RawDevice {
    std::string name;
    std::map<std::string, std::string> annotations;
    std::vector<std::string> nodes;
  };
  std::vector<RawDevice> raw;
  std::string kind;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path("cdi");
    return json::ForEachFieldOf(
        root, path, [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key == "kind") return json::ReadString(value, at, kind);
          if (key == "annotations") return ReadAnnotations(value, at, annotations);
          if (key == "containerEdits") {
            return json::ForEachFieldOf(
                value, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                  if (k != "env") return OkStatus();
                  return json::ForEachElementOf(
                      v, p, [&](size_t, ondemand::value e, const Path& ep) -> Status {
                        std::string entry;
                        TOPOSCHED_RETURN_IF_ERROR(json::ReadString(e, ep, entry));
                        const size_t eq = entry.find('=');
                        if (eq == std::string::npos || eq == 0)
                          return json::ErrorAt(ep, "expected NAME=VALUE");
                        claim.env[entry.substr(0, eq)] = entry.substr(eq + 1);
                        return OkStatus();
                      });
                });
          }
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
                      return json::ForEachFieldOf(
                          v, p,
                          [&](std::string_view k2, ondemand::value v2, const Path& p2) -> Status {
                            if (k2 != "deviceNodes") return OkStatus();
                            return json::ForEachElementOf(
                                v2, p2, [&](size_t, ondemand::value n, const Path& np) -> Status {
                                  return json::ForEachFieldOf(
                                      n, np,
                                      [&](std::string_view k3, ondemand::value v3,
                                          const Path& p3) -> Status {
                                        if (k3 != "path") return OkStatus();
                                        std::string node;
                                        TOPOSCHED_RETURN_IF_ERROR(json::ReadString(v3, p3, node));
                                        device.nodes.push_back(std::move(node));
                                        return OkStatus();
                                      });
                                });
                          });
                    });
                raw.push_back(std::move(device));
                return read;
              });
        });
  });
  if (!status.ok()) return Error{status.error()};
  if (kind != kCdiKind) return Error{fmt::format("cdi.kind: '{}' is not {}", kind, kCdiKind)};
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
  for (RawDevice& device : raw) {
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
    auto offer = dra::OfferFromName(shape, prepared.device);
    if (!offer.ok()) return Error{offer.error()};
    prepared.offer = std::move(offer).value();
    claim.devices.push_back(std::move(prepared));
  }
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
    if (!in.is_open() || in.bad()) {
      checkpoint.problems.push_back(fmt::format("cannot read {}", path.string()));
      continue;
    }
    auto claim = DecodeCdiSpec(text.str(), shape);
    if (!claim.ok()) {
      checkpoint.problems.push_back(fmt::format("{}: {}", path.string(), claim.error()));
      continue;
    }
    if (claim->uid != uid) {
      checkpoint.problems.push_back(fmt::format("{}: holds claim uid {}, not the one in its name",
                                                path.string(), claim->uid));
      continue;
    }
    checkpoint.claims.push_back(std::move(claim).value());
  }
  return checkpoint;
}

}  // namespace toposched::draplugin
