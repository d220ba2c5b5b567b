// Where the API client connects and how it authenticates: the settings themselves, and the three
// ways to find them (a kubeconfig file, the in-cluster service account, or the environment).
#ifndef TOPOSCHED_KUBE_KUBECONFIG_H_
#define TOPOSCHED_KUBE_KUBECONFIG_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace toposched::kube {

struct ClientConfig {
  std::string server;  // "https://host:port", optionally with a path prefix
  std::string source;  // where these settings came from, for logs

  // TLS. With no CA given the system's CA bundle is used.
  std::string ca_file;  // PEM file
  std::string ca_pem;   // PEM text (kubeconfig certificate-authority-data)
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;  // name to verify and send as SNI instead of the server's host

  // Authentication: a bearer token (fixed, or read from a file that may rotate) and/or a client
  // certificate. A token file wins over a fixed token, as in client-go.
  std::string token;
  std::string token_file;
  std::chrono::milliseconds token_reload_period{std::chrono::seconds(60)};
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;

  std::string default_namespace;  // context namespace, or the service account's

  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};  // Get, Post, Patch
  size_t max_response_bytes = size_t{1} << 30;
  size_t max_idle_connections = 4;
  std::string user_agent = "toposched";
};

// Reads a kubeconfig. `paths` may be a colon-separated list, merged as kubectl does: the first
// file that sets current-context, or defines a cluster, user or context name, wins; missing files
// in a list are skipped. Relative file paths are resolved against the file that names them.
// Users with `exec` or `auth-provider` plugins, or basic auth, are reported as unsupported.
Result<ClientConfig> LoadKubeconfig(const std::string& paths);

struct InClusterOptions {
  // Empty host or port: read KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT.
  std::string host;
  std::string port;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  // Projected tokens rotate; client-go re-reads the file every minute and after a 401.
  std::chrono::milliseconds token_reload_period{std::chrono::seconds(60)};
};

// The pod's service account: server from the environment, token and CA from the mounted files.
Result<ClientConfig> InClusterConfig(const InClusterOptions& options = {});

// Reads an environment variable; tests substitute their own.
using GetEnvFunction = std::function<std::string(const char* name)>;

// Picks the configuration the way kubectl and client-go do: `kubeconfig_flag` if set, else
// $KUBECONFIG, else the in-cluster service account (when KUBERNETES_SERVICE_HOST is set), else
// ~/.kube/config.
Result<ClientConfig> ConfigFromEnvironment(const std::string& kubeconfig_flag,
                                           const GetEnvFunction& getenv = {});

// Decodes standard base64 (the kubeconfig *-data fields); whitespace is ignored.
Result<std::string> DecodeBase64(const std::string& text);
// Standard base64 with padding (an admission webhook's JSON Patch). The one home of base64.
std::string EncodeBase64(std::string_view data);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_KUBECONFIG_H_
