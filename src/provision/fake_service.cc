#include "provision/fake_service.h"

#include <simdjson.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/json_reader.h"
#include "base/json_writer.h"

namespace toposched::provision {
namespace {

FakeAnswer Fail(int status, std::string_view message) {
  return {status, WriteJson(JsonTree{{"error", message}})};
}

// A create request {"name":..,"pool":..,"ipus":[..]}: false unless all three are there with the
// right types; `bad_id` is set when an ipu is not an id 0..4095.
bool DecodeCreate(std::string_view body, Partition& out, bool& bad_id) {
  namespace ondemand = simdjson::ondemand;
  const simdjson::padded_string padded(body);
  bool has_name = false;
  bool has_pool = false;
  bool has_ipus = false;
  const Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const json::Path path;
    ondemand::object object;
    bool present = false;
    if (auto s = json::OpenObject(root, path, object, present); !s.ok()) return s;
    if (!present) return Error{"null"};
    return json::ForEachField(
        object, path,
        [&](std::string_view key, ondemand::value& value, const json::Path& at) -> Status {
          // The first of each key counts.
          if ((key == "name" && !has_name) || (key == "pool" && !has_pool)) {
            std::string_view text;
            if (value.get_string().get(text) != simdjson::SUCCESS) return Error{"not a string"};
            (key == "name" ? out.name : out.pool) = std::string(text);
            (key == "name" ? has_name : has_pool) = true;
          } else if (key == "ipus" && !has_ipus) {
            ondemand::array ipus;
            if (value.get_array().get(ipus) != simdjson::SUCCESS) return Error{"not an array"};
            has_ipus = true;
            return json::ForEachElement(
                ipus, at, [&](size_t, ondemand::value& item, const json::Path&) {
                  int64_t id = 0;
                  if (item.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > 4095) {
                    bad_id = true;
                  } else if (!bad_id) {
                    out.ipus.push_back(static_cast<int>(id));
                  }
                  return OkStatus();
                });
          }
          return OkStatus();
        });
  });
  return status.ok() && has_name && has_pool && has_ipus;
}

}  // namespace

FakePartitionService::FakePartitionService(FakeServiceOptions options, NanoClock clock)
    : options_(std::move(options)), clock_(std::move(clock)), rng_(options_.seed) {}

void FakePartitionService::AdvanceLocked(int64_t now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.partition.state == PartitionState::kCreating && now >= e.change_at) {
      e.partition.state = e.will_fail ? PartitionState::kFailed : PartitionState::kActive;
      if (e.will_fail) e.partition.message = "fake failure (--failure-rate)";
    }
    if (e.partition.state == PartitionState::kRemoving && now >= e.change_at) {
      it = entries_.erase(it);
      continue;
    }
    ++it;
  }
}

FakeAnswer FakePartitionService::Handle(std::string_view method, std::string_view target,
                                        std::string_view body, std::string_view authorization) {
  MutexLock lock(mu_);
  ++requests_;
  if (garbage_) return {200, "{\"partitions\": [ {\"name\": oops"};
  if (!options_.token.empty() && authorization != "Bearer " + options_.token) {
    return Fail(401, "missing or wrong bearer token");
  }
  const int64_t now = clock_();
  AdvanceLocked(now);
  target = target.substr(0, target.find('?'));
  constexpr std::string_view kRoot = "/partitions";
  if (!target.starts_with(kRoot)) return Fail(404, "no such path; use /partitions");
  std::string_view rest = target.substr(kRoot.size());
  if (rest.empty() || rest == "/") {
    if (method == "GET") {
      std::vector<Partition> all;
      for (const auto& [name, e] : entries_) all.push_back(e.partition);
      return {200, EncodePartitionList(all)};
    }
    if (method != "POST") return Fail(405, "use GET or POST on /partitions");
    Partition p;
    bool bad_id = false;
    if (!DecodeCreate(body, p, bad_id)) {
      return Fail(400, "expected {\"name\":..,\"pool\":..,\"ipus\":[..]}");
    }
    if (!ValidPartitionName(p.name)) return Fail(400, "invalid partition name");
    if (bad_id) return Fail(400, "ipus must be ids 0..4095");
    std::sort(p.ipus.begin(), p.ipus.end());
    if (p.ipus.empty() || std::adjacent_find(p.ipus.begin(), p.ipus.end()) != p.ipus.end()) {
      return Fail(400, "ipus must be distinct and not empty");
    }
    if (entries_.count(p.name) != 0) return Fail(409, fmt::format("{} exists", p.name));
    const std::set<int> mine(p.ipus.begin(), p.ipus.end());
    for (const auto& [other_name, e] : entries_) {
      if (e.partition.pool != p.pool) continue;
      for (int id : e.partition.ipus) {
        if (mine.count(id) != 0) {
          return Fail(409,
                      fmt::format("ipu {} of pool {} is in partition {}", id, p.pool, other_name));
        }
      }
    }
    Entry e;
    e.partition = p;
    e.partition.state = PartitionState::kCreating;
    e.change_at = now + Ns(options_.latency);
    e.will_fail = std::uniform_real_distribution<double>(0, 1)(rng_) < options_.failure_rate;
    entries_[p.name] = e;
    ++creates_;
    if (lost_create_answers_ > 0) {
      --lost_create_answers_;
      return Fail(504, "gateway timeout (the partition was created)");
    }
    return {201, EncodePartition(e.partition)};
  }
  if (rest.front() != '/') return Fail(404, "no such path");
  const std::string name(rest.substr(1));
  auto it = entries_.find(name);
  if (method == "GET") {
    if (it == entries_.end()) return Fail(404, fmt::format("partition {} not found", name));
    return {200, EncodePartition(it->second.partition)};
  }
  if (method == "DELETE") {
    if (remove_refusals_ > 0) {
      --remove_refusals_;
      return Fail(503, "busy, try again");
    }
    if (it == entries_.end()) return Fail(404, fmt::format("partition {} not found", name));
    if (it->second.partition.state != PartitionState::kRemoving) {
      it->second.partition.state = PartitionState::kRemoving;
      it->second.change_at = now + Ns(options_.remove_latency);
      AdvanceLocked(now);  // a zero latency removes at once
    }
    return {202, WriteJson(JsonTree{{"state", StateName(PartitionState::kRemoving)}})};
  }
  return Fail(405, "use GET or DELETE on /partitions/NAME");
}

void FakePartitionService::SetGarbage(bool on) {
  MutexLock lock(mu_);
  garbage_ = on;
}

void FakePartitionService::SetFailureRate(double rate) {
  MutexLock lock(mu_);
  options_.failure_rate = rate;
}

void FakePartitionService::SetLostCreateAnswers(int n) {
  MutexLock lock(mu_);
  lost_create_answers_ = n;
}

void FakePartitionService::SetRemoveRefusals(int n) {
  MutexLock lock(mu_);
  remove_refusals_ = n;
}

void FakePartitionService::SetLatency(std::chrono::milliseconds latency) {
  MutexLock lock(mu_);
  options_.latency = latency;
}

void FakePartitionService::SetRemoveLatency(std::chrono::milliseconds latency) {
  MutexLock lock(mu_);
  options_.remove_latency = latency;
}

std::vector<Partition> FakePartitionService::Snapshot() {
  MutexLock lock(mu_);
  AdvanceLocked(clock_());
  std::vector<Partition> out;
  for (const auto& [name, e] : entries_) out.push_back(e.partition);
  return out;
}

int FakePartitionService::creates() const {
  MutexLock lock(mu_);
  return creates_;
}

int FakePartitionService::requests() const {
  MutexLock lock(mu_);
  return requests_;
}

}  // namespace toposched::provision
