#include "topology/pools.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace toposched::topology {
namespace {

// Thrown only inside Parse and turned into an Error there; carries the position in the file.
struct PoolError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& at, std::string message) {
  throw PoolError{at.Mark(), std::move(message)};
}

// A missing key has no position of its own: errors then point at the map holding it.
std::string ReadName(const YAML::Node& map, const char* key, std::string_view what) {
  const YAML::Node node = map[key];
  if (!node) Fail(map, fmt::format("{} is missing", what));
  if (!node.IsScalar() || node.Scalar().empty()) {
    Fail(node, fmt::format("{} must be a non-empty string", what));
  }
  return node.Scalar();
}

}  // namespace

Result<PoolSet> PoolSet::Parse(std::string_view yaml_text, std::string_view source_name,
                               const Catalog& catalog) {
  PoolSet set;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (!root.IsMap() || !root["pools"]) {
      Fail(root, "expected a map with a 'pools' list");
    }
    for (const auto& kv : root) {
      if (kv.first.Scalar() != "pools") {
        Fail(kv.first, fmt::format("unknown key '{}' (known: pools)", kv.first.Scalar()));
      }
    }
    const YAML::Node list = root["pools"];
    if (!list.IsSequence()) Fail(list, "'pools' must be a list");
    for (const auto& item : list) {
      if (!item.IsMap()) Fail(item, "each pool must be a map with name, kind and size");
      for (const auto& kv : item) {
        const std::string key = kv.first.Scalar();
        if (key != "name" && key != "kind" && key != "size") {
          Fail(kv.first, fmt::format("unknown key '{}' in a pool (known: name, kind, size)", key));
        }
      }
      PoolDef def;
      def.name = ReadName(item, "name", "pool name");
      def.kind = ReadName(item, "kind", fmt::format("pool {}: kind", def.name));
      const InstanceType* kind = catalog.Find(def.kind);
      if (kind == nullptr) {
        Fail(item["kind"],
             fmt::format("pool {}: kind '{}' is not in the catalog", def.name, def.kind));
      }
      if (kind->rule != LegalSetRule::kAligned) {
        Fail(item["kind"],
             fmt::format("pool {}: kind '{}' has rule {}; a shared pool needs rule aligned "
                         "(power-of-two, aligned partitions)",
                         def.name, def.kind, RuleName(kind->rule)));
      }
      def.size = kind->devices;
      if (const YAML::Node size = item["size"]) {
        long long value = 0;
        if (!size.IsScalar() || !YAML::convert<long long>::decode(size, value)) {
          Fail(size, fmt::format("pool {}: size must be a whole number", def.name));
        }
        if (value <= 0 || !std::has_single_bit(static_cast<unsigned long long>(value))) {
          Fail(size, fmt::format("pool {}: size {} is not a power of two (V-IPU partitions and "
                                 "the buddy tree need 1, 2, 4, ... {})",
                                 def.name, value, kMaxDevices));
        }
        if (value > kMaxDevices) {
          Fail(size, fmt::format("pool {}: size {} is over the {} devices a pool may have",
                                 def.name, value, kMaxDevices));
        }
        def.size = static_cast<int>(value);
      }
      if (!std::has_single_bit(static_cast<unsigned>(def.size))) {
        Fail(item, fmt::format("pool {}: kind {} has {} devices, not a power of two", def.name,
                               def.kind, def.size));
      }
      auto shape = std::make_shared<InstanceType>(*kind);
      shape->name = def.kind;
      shape->devices = def.size;
      shape->sizes.clear();
      // Every power of two up to the pool size is a legal partition (the buddy tree).
      for (int s = 1; s <= def.size; s *= 2) shape->sizes.push_back(s);
      shape->adjacency.clear();
      def.shape_type = std::move(shape);
      if (set.pools_.count(def.name) != 0) {
        Fail(item["name"], fmt::format("pool {} is defined twice", def.name));
      }
      set.pools_.emplace(def.name, std::move(def));
    }
  } catch (const PoolError& e) {
    return Error{
        fmt::format("{}:{}:{}: {}", source_name, e.mark.line + 1, e.mark.column + 1, e.message)};
  } catch (const YAML::Exception& e) {
    return Error{fmt::format("{}: {}", source_name, e.what())};
  }
  return set;
}

const PoolDef* PoolSet::Find(std::string_view name) const {
  auto it = pools_.find(name);
  return it == pools_.end() ? nullptr : &it->second;
}

std::string PoolSet::Names() const {
  if (pools_.empty()) return "none";
  std::vector<std::string_view> names;
  for (const auto& [name, def] : pools_) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string PoolSet::UnknownPoolMessage(std::string_view node, std::string_view pool) const {
  return fmt::format(
      "node {} is labelled {}={}, but no pool '{}' is defined (defined pools: {}); add it to the "
      "extender's --pools file or fix the label",
      node, kPoolLabel, pool, pool, Names());
}

}  // namespace toposched::topology
