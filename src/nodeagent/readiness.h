// Is the plugin ready: registered with kubelet and kubelet holding its device list? kubelet
// admits a pod asking for our resources against the devices it holds; one it admits between our
// registration and its reading of our ListAndWatch list fails admission
// (UnexpectedAdmissionError), so "registered" is not yet "ready". Where kubelet offers
// PodResources GetAllocatableResources (1.21+), the plugin compares what kubelet holds with what
// it advertises healthy and turns ready on a match; without it (kubelet 1.20) it is ready once
// registered. Served on the probe endpoint (/readyz) with the mismatch as metrics.
#ifndef TOPOSCHED_NODEAGENT_READINESS_H_
#define TOPOSCHED_NODEAGENT_READINESS_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
class Registry;
}  // namespace prometheus

namespace toposched::nodeagent {

// One served resource's ids as kubelet holds them, against what the plugin advertises healthy.
struct AllocatableDiff {
  std::string resource;
  size_t advertised = 0;
  std::vector<std::string> missing;  // advertised healthy, kubelet lacks them
  std::vector<std::string> extra;    // kubelet holds them, not advertised healthy
  bool matches() const { return missing.empty() && extra.empty(); }
};

// Per resource of `advertised` (resource -> healthy ids), in its order. Resources kubelet holds
// that are not in `advertised` (other plugins') are not ours to judge.
std::vector<AllocatableDiff> CompareAllocatable(
    const std::map<std::string, std::set<std::string>>& advertised,
    const std::map<std::string, std::set<std::string>>& kubelet);

// "aws.amazon.com/neuron: kubelet lacks neuron3,neuron4; has extra neuron9" for the diffs that do
// not match.
std::string DescribeMismatch(const std::vector<AllocatableDiff>& diffs);

// Thread-safe: the manager writes, the probe endpoint reads.
class Readiness {
 public:
  enum class Check { kMatch, kMismatch, kNotOffered, kError };

  Readiness();
  ~Readiness();
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  // Logs each transition with its reason.
  void Set(bool ready, const std::string& reason);
  bool ready() const;
  std::string reason() const;
  // Both at once, so that an answer never pairs a status with another moment's reason.
  std::pair<bool, std::string> State() const;
  // The outcome of one GetAllocatableResources comparison (`diffs` when compared).
  void Record(Check check, const std::vector<AllocatableDiff>& diffs);
  // Prometheus text exposition of the plugin's metrics.
  std::string Metrics() const;

 private:
  mutable Mutex mutex_;
  bool ready_ TS_GUARDED_BY(mutex_) = false;
  std::string reason_ TS_GUARDED_BY(mutex_) = "starting";
  // prometheus-cpp's metrics are thread-safe themselves.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* ready_gauge_ = nullptr;
  prometheus::Family<prometheus::Gauge>* mismatch_ = nullptr;
  prometheus::Family<prometheus::Counter>* checks_ = nullptr;
};

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_READINESS_H_
