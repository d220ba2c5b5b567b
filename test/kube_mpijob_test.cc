// Reading an MPIJob's worker count (the size of its workers' gang).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/mpijob.h"

namespace toposched::kube {
namespace {

using ::testing::HasSubstr;

TEST(MpiJobTest, ReadsTheWorkerReplicas) {
  auto workers = DecodeMpiJobWorkers(R"({"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob",
    "metadata":{"name":"train"},"spec":{"slotsPerWorker":1,"mpiReplicaSpecs":{
    "Launcher":{"replicas":1,"template":{}},"Worker":{"replicas":4,"template":{"spec":{}}}}}})");
  ASSERT_TRUE(workers.ok()) << workers.error();
  EXPECT_EQ(*workers, 4);
  EXPECT_EQ(MpiJobPath("ml", "train"), "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/train");
}

TEST(MpiJobTest, AWorkerSpecWithoutReplicasMeansOne) {
  auto workers = DecodeMpiJobWorkers(R"({"spec":{"mpiReplicaSpecs":{"Worker":{}}}})");
  ASSERT_TRUE(workers.ok()) << workers.error();
  EXPECT_EQ(*workers, 1);
}

TEST(MpiJobTest, BadJobsAreErrorsNamingThePath) {
  auto none = DecodeMpiJobWorkers(R"({"spec":{"mpiReplicaSpecs":{"Launcher":{}}}})");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error(), HasSubstr("no Worker"));
  auto typed = DecodeMpiJobWorkers(R"({"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":"4"}}}})");
  ASSERT_FALSE(typed.ok());
  EXPECT_THAT(typed.error(), HasSubstr("replicas"));
  auto zero = DecodeMpiJobWorkers(R"({"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":0}}}})");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.error(), HasSubstr("1..4096"));
  EXPECT_FALSE(DecodeMpiJobWorkers("{").ok());
  EXPECT_FALSE(DecodeMpiJobWorkers("[]").ok());
  EXPECT_FALSE(DecodeMpiJobWorkers(R"({"spec":null})").ok());
}

}  // namespace
}  // namespace toposched::kube
