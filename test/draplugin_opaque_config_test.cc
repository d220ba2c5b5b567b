// The strict decoder of the driver's opaque configs (draplugin/opaque_config.h), table-driven:
// every accepted apiVersion and kind, and each way a config can be wrong, with the field the error
// must name.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "draplugin/opaque_config.h"

namespace toposched::draplugin {
namespace {

using ::testing::HasSubstr;
using Kind = OpaqueConfig::Kind;

struct Good {
  const char* json;
  Kind kind;
  int lnc;
  int mode;
};

TEST(OpaqueConfigTest, Accepts) {
  const Good cases[] = {
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1})",
       Kind::kNeuronConfig, 1, 0},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":2})",
       Kind::kNeuronConfig, 2, 0},
      {R"({"logicalNeuronCore":2,"kind":"NeuronConfig","apiVersion":"neuron.aws.com/v1alphav1"})",
       Kind::kNeuronConfig, 2, 0},
      {R"({"apiVersion":"resource.neuron.aws.com/v1alphav1","kind":"NeuronConfig","logicalNeuronCore":1})",
       Kind::kNeuronConfig, 1, 0},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":1})",
       Kind::kUltraServerConfig, 0, 1},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2})",
       Kind::kUltraServerConfig, 0, 2},
      {R"( { "apiVersion" : "neuron.aws.com/v1" , "kind" : "UltraServerConfig" , "ultraserverMode" : 4 } )",
       Kind::kUltraServerConfig, 0, 4},
  };
  for (const Good& c : cases) {
    SCOPED_TRACE(c.json);
    auto config = DecodeOpaqueConfig(c.json);
    ASSERT_TRUE(config.ok()) << config.error();
    EXPECT_EQ(config->kind, c.kind);
    EXPECT_EQ(config->logical_neuron_core, c.lnc);
    EXPECT_EQ(config->ultraserver_mode, c.mode);
  }
}

struct Bad {
  const char* json;
  const char* error;  // a part of the message
};

TEST(OpaqueConfigTest, Refuses) {
  const Bad cases[] = {
      // apiVersion
      {R"({"kind":"NeuronConfig","logicalNeuronCore":1})", "parameters.apiVersion: missing"},
      {R"({"apiVersion":"neuron.aws.com/v2","kind":"NeuronConfig","logicalNeuronCore":1})",
       "parameters.apiVersion: 'neuron.aws.com/v2' is not neuron.aws.com/v1"},
      {R"({"apiVersion":"gpu.nvidia.com/v1","kind":"NeuronConfig","logicalNeuronCore":1})",
       "parameters.apiVersion"},
      {R"({"apiVersion":"","kind":"NeuronConfig","logicalNeuronCore":1})", "parameters.apiVersion"},
      {R"({"apiVersion":1,"kind":"NeuronConfig","logicalNeuronCore":1})",
       "parameters.apiVersion: expected a string"},
      {R"({"apiVersion":null,"kind":"NeuronConfig","logicalNeuronCore":1})",
       "parameters.apiVersion: expected a string"},
      // kind
      {R"({"apiVersion":"neuron.aws.com/v1","logicalNeuronCore":1})", "parameters.kind: missing"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"GpuConfig","logicalNeuronCore":1})",
       "parameters.kind: 'GpuConfig' is not NeuronConfig or UltraServerConfig"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"neuronconfig","logicalNeuronCore":1})",
       "parameters.kind"},
      // fields
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig"})",
       "parameters.logicalNeuronCore: missing"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig"})",
       "parameters.ultraserverMode: missing"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"lnc":2})",
       "parameters.lnc: unknown field"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"metadata":{}})",
       "parameters.metadata: unknown field"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"ultraserverMode":2})",
       "parameters.ultraserverMode: not a field of NeuronConfig"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":2,"logicalNeuronCore":1})",
       "parameters.logicalNeuronCore: not a field of UltraServerConfig"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1,"logicalNeuronCore":2})",
       "parameters.logicalNeuronCore: given twice"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","kind":"NeuronConfig","logicalNeuronCore":1})",
       "parameters.kind: given twice"},
      // values
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":3})",
       "parameters.logicalNeuronCore: 3 is not allowed (one of 1, 2)"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":0})",
       "parameters.logicalNeuronCore: 0 is not allowed"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":-1})",
       "parameters.logicalNeuronCore: -1 is not allowed"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":"2"})",
       "parameters.logicalNeuronCore: expected one of 1, 2"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":2.0})",
       "parameters.logicalNeuronCore: expected an integer"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":null})",
       "parameters.logicalNeuronCore: expected one of 1, 2"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":99999999999999999999})",
       "parameters.logicalNeuronCore"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":3})",
       "parameters.ultraserverMode: 3 is not allowed (one of 1, 2, 4)"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"UltraServerConfig","ultraserverMode":true})",
       "parameters.ultraserverMode: expected one of 1, 2, 4"},
      // documents
      {"", "invalid JSON"},
      {"null", "expected an object"},
      {"[]", "parameters"},
      {"2", "expected an object"},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1} {})", ""},
      {R"({"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1)", ""},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.json);
    auto config = DecodeOpaqueConfig(c.json);
    ASSERT_FALSE(config.ok());
    EXPECT_THAT(config.error(), HasSubstr(c.error));
  }
}

TEST(OpaqueConfigTest, Describes) {
  OpaqueConfig config;
  config.kind = Kind::kNeuronConfig;
  config.logical_neuron_core = 2;
  EXPECT_EQ(DescribeOpaqueConfig(config), "NeuronConfig{logicalNeuronCore: 2}");
  config.kind = Kind::kUltraServerConfig;
  config.ultraserver_mode = 4;
  EXPECT_EQ(DescribeOpaqueConfig(config), "UltraServerConfig{ultraserverMode: 4}");
}

}  // namespace
}  // namespace toposched::draplugin
