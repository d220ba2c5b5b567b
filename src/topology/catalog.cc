#include "topology/catalog.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace toposched::topology {

extern const std::string_view kEmbeddedCatalogYaml;  // generated from catalog/instance-types.yaml

namespace {

// Thrown only inside Parse and turned into an Error there; carries the position in the file.
struct CatalogError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& at, std::string message) {
  throw CatalogError{at.Mark(), std::move(message)};
}

int ReadInt(const YAML::Node& node, std::string_view what, int lo, int hi) {
  if (!node.IsScalar()) {
    Fail(node, fmt::format("{} must be a number", what));
  }
  int value = 0;
  if (!YAML::convert<int>::decode(node, value)) {
    Fail(node, fmt::format("{} must be a whole number, got '{}'", what, node.Scalar()));
  }
  if (value < lo || value > hi) {
    Fail(node, fmt::format("{} must be between {} and {}, got {}", what, lo, hi, value));
  }
  return value;
}

std::vector<int> ReadIntList(const YAML::Node& node, std::string_view what, int lo, int hi) {
  if (!node.IsSequence()) {
    Fail(node, fmt::format("{} must be a list of numbers", what));
  }
  std::vector<int> out;
  for (const auto& item : node) {
    out.push_back(ReadInt(item, what, lo, hi));
  }
  return out;
}

void RefuseUnknownKeys(const YAML::Node& map, std::initializer_list<std::string_view> known,
                       std::string_view where) {
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      Fail(kv.first,
           fmt::format("unknown key '{}' in {} (known: {})", key, where, fmt::join(known, ", ")));
    }
  }
}

LegalSetRule ReadRule(const YAML::Node& node) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  if (text == "contiguous") return LegalSetRule::kContiguous;
  if (text == "aligned") return LegalSetRule::kAligned;
  if (text == "any") return LegalSetRule::kAny;
  Fail(node, fmt::format("rule must be contiguous, aligned or any, got '{}'", text));
}

InstanceType ReadType(const std::string& name, const YAML::Node& entry) {
  if (!entry.IsMap()) {
    Fail(entry, fmt::format("instance type '{}' must be a map of fields", name));
  }
  RefuseUnknownKeys(entry,
                    {"devices", "cores_per_device", "lnc", "rule", "sizes", "adjacency", "source"},
                    fmt::format("instance type '{}'", name));
  for (const char* required : {"devices", "cores_per_device", "rule"}) {
    if (!entry[required]) {
      Fail(entry, fmt::format("instance type '{}' has no '{}'", name, required));
    }
  }
  InstanceType t;
  t.name = name;
  t.devices = ReadInt(entry["devices"], "devices", 1, kMaxDevices);
  t.cores_per_device = ReadInt(entry["cores_per_device"], "cores_per_device", 1, kMaxCores);
  t.rule = ReadRule(entry["rule"]);

  if (const auto lnc = entry["lnc"]) {
    if (!lnc.IsMap()) Fail(lnc, "lnc must be a map");
    RefuseUnknownKeys(lnc, {"physical_cores_per_device", "allowed", "default"}, "lnc");
    for (const char* required : {"physical_cores_per_device", "allowed", "default"}) {
      if (!lnc[required]) Fail(lnc, fmt::format("lnc of '{}' has no '{}'", name, required));
    }
    t.has_lnc = true;
    t.lnc.physical_cores_per_device =
        ReadInt(lnc["physical_cores_per_device"], "lnc.physical_cores_per_device", 1, kMaxCores);
    t.lnc.allowed = ReadIntList(lnc["allowed"], "lnc.allowed", 1, 8);
    t.lnc.default_lnc = ReadInt(lnc["default"], "lnc.default", 1, 8);
    for (int v : t.lnc.allowed) {
      if (t.lnc.physical_cores_per_device % v != 0) {
        Fail(lnc, fmt::format("LNC {} does not divide {} physical cores", v,
                              t.lnc.physical_cores_per_device));
      }
    }
    if (std::find(t.lnc.allowed.begin(), t.lnc.allowed.end(), t.lnc.default_lnc) ==
        t.lnc.allowed.end()) {
      Fail(lnc, "lnc.default must be one of lnc.allowed");
    }
    if (t.cores_per_device * t.lnc.default_lnc != t.lnc.physical_cores_per_device) {
      Fail(entry["cores_per_device"],
           fmt::format(
               "cores_per_device {} must equal physical_cores_per_device {} / default LNC {}",
               t.cores_per_device, t.lnc.physical_cores_per_device, t.lnc.default_lnc));
    }
    int min_lnc = *std::min_element(t.lnc.allowed.begin(), t.lnc.allowed.end());
    if (t.devices * (t.lnc.physical_cores_per_device / min_lnc) > kMaxCores) {
      Fail(entry, fmt::format("{} has more than {} cores at LNC {}", name, kMaxCores, min_lnc));
    }
  }
  if (t.devices * t.cores_per_device > kMaxCores) {
    Fail(entry, fmt::format("{} has more than {} cores", name, kMaxCores));
  }

  if (t.rule == LegalSetRule::kAligned) {
    if (!entry["sizes"]) Fail(entry, "rule 'aligned' needs 'sizes'");
    t.sizes = ReadIntList(entry["sizes"], "sizes", 1, t.devices);
    if (t.sizes.empty()) Fail(entry["sizes"], "sizes must not be empty");
    // Best fit walks the sizes as the levels of a tree, so each must divide the next.
    for (size_t i = 0; i < t.sizes.size(); ++i) {
      if (t.devices % t.sizes[i] != 0) {
        Fail(entry["sizes"],
             fmt::format("size {} does not divide {} devices", t.sizes[i], t.devices));
      }
      if (i > 0 && (t.sizes[i] <= t.sizes[i - 1] || t.sizes[i] % t.sizes[i - 1] != 0)) {
        Fail(entry["sizes"], "sizes must ascend, each a multiple of the one before");
      }
    }
  } else if (entry["sizes"]) {
    Fail(entry["sizes"], "'sizes' only applies to rule 'aligned'");
  }

  t.adjacency.assign(t.devices, {});
  if (const auto adj = entry["adjacency"]) {
    if (!adj.IsMap()) Fail(adj, "adjacency must be a map from device to a list of neighbours");
    for (const auto& kv : adj) {
      const int dev = ReadInt(kv.first, "adjacency device", 0, t.devices - 1);
      t.adjacency[dev] = ReadIntList(kv.second, "adjacency neighbour", 0, t.devices - 1);
      for (int n : t.adjacency[dev]) {
        if (n == dev) Fail(kv.second, fmt::format("device {} lists itself as a neighbour", dev));
      }
    }
    for (int a = 0; a < t.devices; ++a) {
      for (int b : t.adjacency[a]) {
        const auto& back = t.adjacency[b];
        if (std::find(back.begin(), back.end(), a) == back.end()) {
          Fail(adj, fmt::format("adjacency is not symmetric: {} lists {} but {} does not list {}",
                                a, b, b, a));
        }
      }
    }
  }
  if (const auto src = entry["source"]) t.source = src.Scalar();
  return t;
}

}  // namespace

std::string_view RuleName(LegalSetRule rule) {
  switch (rule) {
    case LegalSetRule::kContiguous:
      return "contiguous";
    case LegalSetRule::kAligned:
      return "aligned";
    case LegalSetRule::kAny:
      return "any";
  }
  return "?";
}

Result<Catalog> Catalog::Parse(std::string_view yaml_text, std::string_view source_name) {
  Catalog catalog;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (!root.IsMap() || !root["instance_types"]) {
      Fail(root, "the catalog must be a map with an 'instance_types' key");
    }
    RefuseUnknownKeys(root, {"instance_types"}, "the catalog");
    const YAML::Node types = root["instance_types"];
    if (!types.IsMap()) Fail(types, "'instance_types' must be a map keyed by instance type name");
    for (const auto& kv : types) {
      std::string name = kv.first.Scalar();
      if (name.empty()) Fail(kv.first, "instance type name must not be empty");
      if (catalog.types_.count(name) != 0) {
        Fail(kv.first, fmt::format("instance type '{}' is defined twice", name));
      }
      catalog.types_.emplace(name, ReadType(name, kv.second));
    }
  } catch (const CatalogError& e) {
    return Error{
        fmt::format("{}:{}:{}: {}", source_name, e.mark.line + 1, e.mark.column + 1, e.message)};
  } catch (const YAML::Exception& e) {
    return Error{
        fmt::format("{}:{}:{}: {}", source_name, e.mark.line + 1, e.mark.column + 1, e.msg)};
  }
  return catalog;
}

const Catalog& Catalog::Embedded() {
  static const Catalog catalog = [] {
    auto parsed = Parse(kEmbeddedCatalogYaml, "<embedded catalog>");
    if (!parsed.ok()) {
      // The embedded catalog is checked by the build's tests; a bad one is a bug.
      fmt::print(stderr, "internal error: {}\n", parsed.error());
      std::abort();
    }
    return std::move(parsed).value();
  }();
  return catalog;
}

const InstanceType* Catalog::Find(std::string_view name) const {
  auto it = types_.find(name);
  return it == types_.end() ? nullptr : &it->second;
}

std::string Catalog::UnknownTypeMessage(std::string_view name) {
  return fmt::format(
      "unknown instance type '{}': it is not in the catalog. Add an entry for it to "
      "catalog/instance-types.yaml (devices, cores_per_device, rule, adjacency) and pass the file "
      "with --catalog, or rebuild to embed it",
      name);
}

}  // namespace toposched::topology
