// Checks a ResourceSlice (as JSON text) against resource.k8s.io/v1's per-slice limits, for the
// dra and draplugin tests: devices per slice (64 with counters or taints), counter sets,
// consumptions, counters, attributes, taints, and that a slice carries either devices or shared
// counters, never both.
#ifndef TOPOSCHED_TEST_DRA_SLICE_LIMITS_H_
#define TOPOSCHED_TEST_DRA_SLICE_LIMITS_H_

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra/slices.h"

namespace toposched::testing {

// Adds a gtest failure naming the slice for every limit it breaks.
inline void ExpectSliceWithinLimits(const nlohmann::json& slice) {
  const std::string name = slice["metadata"].value("name", std::string("?"));
  SCOPED_TRACE("slice " + name);
  const nlohmann::json& spec = slice["spec"];
  EXPECT_EQ(spec.value("driver", std::string()), "neuron.aws.com");
  EXPECT_TRUE(spec.contains("nodeName"));
  EXPECT_GE(spec["pool"].value("resourceSliceCount", int64_t{0}), 1);
  const bool has_devices = spec.contains("devices") && !spec["devices"].empty();
  const bool has_counters = spec.contains("sharedCounters") && !spec["sharedCounters"].empty();
  EXPECT_FALSE(has_devices && has_counters) << "devices and sharedCounters in one slice";
  if (has_counters) {
    EXPECT_LE(spec["sharedCounters"].size(), size_t{dra::kMaxCounterSetsPerSlice});
    for (const auto& set : spec["sharedCounters"]) {
      EXPECT_LE(set["counters"].size(), size_t{dra::kMaxCountersPerSet}) << set["name"];
    }
  }
  if (!has_devices) return;
  bool consumes = false;
  for (const auto& device : spec["devices"]) {
    const std::string device_name = device["name"];
    EXPECT_LE(device_name.size(), 63u) << device_name;
    EXPECT_LE(device["attributes"].size(), size_t{dra::kMaxAttributesPerDevice}) << device_name;
    for (const auto& [key, value] : device["attributes"].items()) {
      if (value.contains("string")) {
        EXPECT_LE(value["string"].get<std::string>().size(), 64u) << device_name << " " << key;
      }
      const size_t slash = key.find('/');
      EXPECT_LE(key.size() - (slash == std::string::npos ? 0 : slash + 1), 32u) << key;
    }
    if (device.contains("taints")) {
      consumes = true;  // taints lower the device limit as counters do
      EXPECT_LE(device["taints"].size(), 16u) << device_name;
      for (const auto& taint : device["taints"]) {
        EXPECT_LE(taint.value("value", std::string()).size(), 63u) << device_name;
        EXPECT_TRUE(taint["effect"] == "NoSchedule" || taint["effect"] == "NoExecute" ||
                    taint["effect"] == "None")
            << device_name;
      }
    }
    if (!device.contains("consumesCounters")) continue;
    consumes = true;
    EXPECT_LE(device["consumesCounters"].size(), size_t{dra::kMaxConsumptionsPerDevice})
        << device_name;
    for (const auto& use : device["consumesCounters"]) {
      EXPECT_LE(use["counters"].size(), size_t{dra::kMaxCountersPerSet}) << device_name;
    }
  }
  EXPECT_LE(spec["devices"].size(),
            size_t(consumes ? dra::kMaxDevicesPerSliceWithCounters : dra::kMaxDevicesPerSlice));
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_DRA_SLICE_LIMITS_H_
