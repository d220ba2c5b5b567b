// Finding the API server and credentials: kubeconfig, in-cluster files, the environment, and
// token rotation (kube/kubeconfig.h, kube/client.h).
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "support/fake_apiserver.h"
#include "support/temp_dir.h"
#include "support/test_certs.h"

namespace toposched::kube {
namespace {

using ::testing::HasSubstr;
using toposched::testing::FakeApiServer;
using toposched::testing::KubeconfigOptions;
using toposched::testing::TempDir;

long GetStatus(ApiClient& client) {  // NOLINT(google-runtime-int)
  Result<HttpResponse> response = client.Get("/api/v1/nodes");
  EXPECT_TRUE(response.ok()) << response.error();
  return response.ok() ? response->status : -1;
}

TEST(KubeConfigTest, KubeconfigWithEmbeddedCaAndToken) {
  FakeApiServer server;
  TempDir dir;
  const std::string path = server.WriteKubeconfig(dir.path() + "/config");
  Result<ClientConfig> config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, server.url());
  EXPECT_EQ(config->ca_pem, server.ca_pem());
  EXPECT_EQ(config->token, "test-token");
  EXPECT_EQ(config->default_namespace, "ml");
  EXPECT_THAT(config->source, HasSubstr("context fake"));

  Result<std::unique_ptr<ApiClient>> client = ApiClient::FromKubeconfig(path);
  ASSERT_TRUE(client.ok()) << client.error();
  EXPECT_EQ(GetStatus(**client), 200);
}

TEST(KubeConfigTest, KubeconfigWithRelativeCaFileTokenFileAndTlsServerName) {
  FakeApiServer server;
  TempDir dir;
  dir.WriteFile("ca.crt", server.ca_pem());
  dir.WriteFile("token", "test-token\n");
  KubeconfigOptions options;
  options.embed_ca = false;
  options.ca_file = "ca.crt";  // relative to the kubeconfig's directory
  options.use_token_file = true;
  options.token_file = "token";
  options.tls_server_name = toposched::testing::kFakeServerDnsName;
  const std::string path = server.WriteKubeconfig(dir.path() + "/config", options);
  Result<ClientConfig> config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->ca_file, dir.path() + "/ca.crt");
  EXPECT_EQ(config->token_file, dir.path() + "/token");
  EXPECT_EQ(config->tls_server_name, toposched::testing::kFakeServerDnsName);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::FromKubeconfig(path);
  ASSERT_TRUE(client.ok()) << client.error();
  EXPECT_EQ(GetStatus(**client), 200);
}

TEST(KubeConfigTest, KubeconfigWithClientCertificate) {
  FakeApiServer server;
  TempDir dir;
  KubeconfigOptions options;
  options.use_token = false;
  options.client_certificate = true;
  const std::string path = server.WriteKubeconfig(dir.path() + "/config", options);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::FromKubeconfig(path);
  ASSERT_TRUE(client.ok()) << client.error();
  EXPECT_EQ((*client)->config().client_cert_pem, server.client_cert_pem());
  EXPECT_EQ(GetStatus(**client), 200);
}

TEST(KubeConfigTest, KubeconfigProblemsAreClearErrors) {
  FakeApiServer server;
  TempDir dir;
  KubeconfigOptions exec;
  exec.exec_user = true;
  exec.use_token = false;
  Result<ClientConfig> config = LoadKubeconfig(server.WriteKubeconfig(dir.path() + "/exec", exec));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error(), HasSubstr("exec credential plugin"));

  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"current-context: x\n", "context \"x\" not found"},
      {"apiVersion: v1\n", "no current-context"},
      {"current-context: c\ncontexts:\n- name: c\n  context: {cluster: k}\n",
       "cluster \"k\" not found"},
      {"current-context: c\ncontexts:\n- name: c\n  context: {cluster: k}\nclusters:\n- name: k\n"
       "  cluster: {}\n",
       "no server"},
      {"current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n"
       "- name: k\n  cluster: {server: 'https://x', certificate-authority-data: '!!!'}\n",
       "invalid base64"},
      {"current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n"
       "- name: k\n  cluster: {server: 'https://x'}\nusers:\n- name: u\n  user: {username: a, "
       "password: b}\n",
       "basic authentication"},
      {"current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n"
       "- name: k\n  cluster: {server: 'https://x'}\nusers:\n- name: u\n  user: "
       "{client-certificate: a.crt}\n",
       "needs both"},
      {"current-context: [\n", "invalid YAML"},
      {"- a\n- b\n", "expected a map"},
      {"current-context: c\ncontexts: {}\n", "expected a list"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.WriteFile("bad", c.yaml);
    Result<ClientConfig> bad = LoadKubeconfig(path);
    ASSERT_FALSE(bad.ok()) << c.yaml;
    EXPECT_THAT(bad.error(), HasSubstr(c.message)) << c.yaml;
  }
  EXPECT_FALSE(LoadKubeconfig(dir.path() + "/missing").ok());
}

TEST(KubeConfigTest, KubeconfigListMergesFirstWins) {
  FakeApiServer server;
  TempDir dir;
  const std::string real = server.WriteKubeconfig(dir.path() + "/real");
  // The first file picks the context and overrides nothing else; a missing file is skipped.
  const std::string first = dir.WriteFile("first", "current-context: fake\n");
  Result<ClientConfig> config = LoadKubeconfig(first + ":" + dir.path() + "/missing:" + real);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, server.url());
}

TEST(KubeConfigTest, Base64) {
  EXPECT_EQ(*DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(*DecodeBase64("aGVs\nbG8h"), "hello!");
  EXPECT_EQ(*DecodeBase64(""), "");
  EXPECT_FALSE(DecodeBase64("a").ok());
  EXPECT_FALSE(DecodeBase64("aGVsbG8=x").ok());
  EXPECT_FALSE(DecodeBase64("a*b=").ok());
  for (const std::string& text : std::vector<std::string>{"", "h", "he", "hel", "hello", "hello!",
                                                          std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(*DecodeBase64(EncodeBase64(text)), text);
  }
  EXPECT_EQ(EncodeBase64("hello"), "aGVsbG8=");
  EXPECT_EQ(EncodeBase64("hello!"), "aGVsbG8h");
  EXPECT_EQ(EncodeBase64("hell"), "aGVsbA==");
}

// A fake service-account mount: token, ca.crt, namespace.
struct ServiceAccountDir {
  TempDir dir;
  InClusterOptions options;
  ServiceAccountDir(const FakeApiServer& server, const std::string& token) {
    options.host = "127.0.0.1";
    options.port = std::to_string(server.port());
    options.token_file = dir.WriteFile("token", token);
    options.ca_file = dir.WriteFile("ca.crt", server.ca_pem());
    options.namespace_file = dir.WriteFile("namespace", "kube-system\n");
  }
};

TEST(KubeConfigTest, InClusterFromFilesAndRotatedTokenAfter401) {
  FakeApiServer server;
  ServiceAccountDir account(server, "test-token");
  Result<std::unique_ptr<ApiClient>> client = ApiClient::InCluster(account.options);
  ASSERT_TRUE(client.ok()) << client.error();
  EXPECT_EQ((*client)->config().default_namespace, "kube-system");
  EXPECT_EQ((*client)->config().server, server.url());
  EXPECT_EQ(GetStatus(**client), 200);

  // The kubelet rotates the token: the old one is refused, the client re-reads the file on the
  // 401 and retries once.
  server.set_token("rotated-token");
  account.dir.WriteFile("token", "rotated-token");
  EXPECT_EQ(GetStatus(**client), 200);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].authorization, "Bearer test-token");
  EXPECT_EQ(requests[2].authorization, "Bearer rotated-token");

  // A 401 with an unchanged token is returned as is, without a loop.
  server.set_token("something-else");
  EXPECT_EQ(GetStatus(**client), 401);
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST(KubeConfigTest, InClusterRereadsTheTokenPeriodically) {
  FakeApiServer server;
  ServiceAccountDir account(server, "test-token");
  account.options.token_reload_period = std::chrono::milliseconds(0);
  Result<std::unique_ptr<ApiClient>> client = ApiClient::InCluster(account.options);
  ASSERT_TRUE(client.ok()) << client.error();
  server.set_token("rotated-token");
  account.dir.WriteFile("token", "rotated-token");
  EXPECT_EQ(GetStatus(**client), 200);
  ASSERT_EQ(server.requests().size(), 1u);  // no 401 round trip
  EXPECT_EQ(server.requests()[0].authorization, "Bearer rotated-token");
}

TEST(KubeConfigTest, InClusterNeedsItsEnvironmentAndFiles) {
  InClusterOptions options;
  options.host = "10.96.0.1";
  options.port = "443";
  options.token_file = "/nonexistent/token";
  Result<ClientConfig> config = InClusterConfig(options);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error(), HasSubstr("/nonexistent/token"));

  TempDir dir;
  options.token_file = dir.WriteFile("token", "t");
  options.ca_file = dir.path() + "/missing-ca.crt";
  config = InClusterConfig(options);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error(), HasSubstr("missing-ca.crt"));

  options.ca_file = dir.WriteFile("ca.crt", "pem");
  options.host = "fd00::1";
  config = InClusterConfig(options);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
}

TEST(KubeConfigTest, EnvironmentPrecedence) {
  FakeApiServer server;
  TempDir dir;
  const std::string flag_path = server.WriteKubeconfig(dir.path() + "/flag");
  KubeconfigOptions other;
  other.token = "from-env-file";
  const std::string env_path = server.WriteKubeconfig(dir.path() + "/env", other);
  TempDir home;
  std::filesystem::create_directories(home.path() + "/.kube");
  KubeconfigOptions home_options;
  home_options.token = "from-home";
  server.WriteKubeconfig(home.path() + "/.kube/config", home_options);

  std::map<std::string, std::string> env;
  auto getenv = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  env["KUBECONFIG"] = env_path;
  env["HOME"] = home.path();
  Result<ClientConfig> config = ConfigFromEnvironment(flag_path, getenv);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->token, "test-token");  // the flag wins

  config = ConfigFromEnvironment("", getenv);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->token, "from-env-file");  // then $KUBECONFIG

  env.erase("KUBECONFIG");
  config = ConfigFromEnvironment("", getenv);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->token, "from-home");  // ~/.kube/config when not in a cluster

  env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1";
  env["KUBERNETES_SERVICE_PORT"] = std::to_string(server.port());
  config = ConfigFromEnvironment("", getenv);
  ASSERT_FALSE(config.ok());  // in-cluster comes first; this machine has no service account
  EXPECT_THAT(config.error(), HasSubstr("in-cluster"));

  env.clear();
  config = ConfigFromEnvironment("", getenv);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error(), HasSubstr("no Kubernetes configuration"));
}

}  // namespace
}  // namespace toposched::kube
