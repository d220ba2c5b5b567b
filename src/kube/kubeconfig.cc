#include "kube/kubeconfig.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "base/text.h"

namespace toposched::kube {
namespace {

namespace fs = std::filesystem;

std::string DefaultGetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{"cannot read " + path};
  return text.str();
}

// One kubeconfig file, parsed, with the directory its relative paths are resolved against.
struct KubeconfigFile {
  std::string path;
  fs::path dir;
  YAML::Node root;
};

// A scalar field of a map, or nullopt when absent or null. Errors on lists and maps.
Result<std::optional<std::string>> OptionalScalar(const YAML::Node& map, const char* key,
                                                  const std::string& where) {
  if (!map.IsMap()) return std::optional<std::string>();
  const YAML::Node value = map[key];
  if (!value.IsDefined() || value.IsNull()) return std::optional<std::string>();
  if (!value.IsScalar()) return Error{where + "." + key + ": expected a string"};
  return std::optional<std::string>(value.Scalar());
}

std::string ResolvePath(const fs::path& dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (dir / path).lexically_normal().string();
}

// Finds the entry called `name` in the `list_key` list (clusters, users, contexts) of the first
// file that defines it; returns its inner map (`inner_key`) and that file.
struct NamedEntry {
  YAML::Node body;
  const KubeconfigFile* file = nullptr;
};

Result<std::optional<NamedEntry>> FindNamed(const std::vector<KubeconfigFile>& files,
                                            const char* list_key, const char* inner_key,
                                            const std::string& name) {
  for (const KubeconfigFile& file : files) {
    if (!file.root.IsMap()) continue;
    const YAML::Node list = file.root[list_key];
    if (!list.IsDefined() || list.IsNull()) continue;
    if (!list.IsSequence()) return Error{file.path + ": " + list_key + ": expected a list"};
    for (const YAML::Node& entry : list) {
      if (!entry.IsMap()) continue;
      const YAML::Node entry_name = entry["name"];
      if (!entry_name.IsScalar() || entry_name.Scalar() != name) continue;
      return std::optional<NamedEntry>(NamedEntry{entry[inner_key], &file});
    }
  }
  return std::optional<NamedEntry>();
}

Status ApplyCluster(const NamedEntry& entry, const std::string& where, ClientConfig& config) {
  const YAML::Node& cluster = entry.body;
  if (!cluster.IsMap()) return Error{where + ": expected a map"};
  TOPOSCHED_ASSIGN_OR_RETURN(auto server, OptionalScalar(cluster, "server", where));
  if (!server.has_value() || server->empty()) return Error{where + ": no server"};
  config.server = *server;

  TOPOSCHED_ASSIGN_OR_RETURN(auto ca_file, OptionalScalar(cluster, "certificate-authority", where));
  if (ca_file.has_value()) config.ca_file = ResolvePath(entry.file->dir, *ca_file);
  TOPOSCHED_ASSIGN_OR_RETURN(auto ca_data,
                             OptionalScalar(cluster, "certificate-authority-data", where));
  if (ca_data.has_value()) {
    Result<std::string> pem = DecodeBase64(*ca_data);
    if (!pem.ok()) return Error{where + ".certificate-authority-data: " + pem.error()};
    config.ca_pem = std::move(*pem);
    config.ca_file.clear();  // inline data wins, as in client-go
  }
  TOPOSCHED_ASSIGN_OR_RETURN(auto insecure,
                             OptionalScalar(cluster, "insecure-skip-tls-verify", where));
  if (insecure.has_value()) {
    if (*insecure == "true") {
      config.insecure_skip_tls_verify = true;
    } else if (*insecure != "false") {
      return Error{where + ".insecure-skip-tls-verify: expected true or false"};
    }
  }
  TOPOSCHED_ASSIGN_OR_RETURN(auto server_name, OptionalScalar(cluster, "tls-server-name", where));
  if (server_name.has_value()) config.tls_server_name = *server_name;
  return OkStatus();
}

Status ApplyUser(const NamedEntry& entry, const std::string& user_name, const std::string& where,
                 ClientConfig& config) {
  const YAML::Node& user = entry.body;
  if (!user.IsDefined() || user.IsNull()) return OkStatus();  // anonymous
  if (!user.IsMap()) return Error{where + ": expected a map"};
  if (user["exec"].IsDefined() && !user["exec"].IsNull()) {
    return Error{"kubeconfig user \"" + user_name +
                 "\" uses an exec credential plugin, which toposched does not run; give it a "
                 "token, tokenFile or client certificate (e.g. a service account token)"};
  }
  if (user["auth-provider"].IsDefined() && !user["auth-provider"].IsNull()) {
    return Error{"kubeconfig user \"" + user_name +
                 "\" uses an auth-provider plugin, which toposched does not support; give it a "
                 "token, tokenFile or client certificate"};
  }
  if (user["username"].IsDefined() || user["password"].IsDefined()) {
    return Error{"kubeconfig user \"" + user_name +
                 "\" uses basic authentication, which toposched does not support"};
  }
  struct FieldTarget {
    const char* key;
    std::string* target;
    bool is_path;
    bool is_base64;
  };
  const FieldTarget fields[] = {
      {"token", &config.token, false, false},
      {"tokenFile", &config.token_file, true, false},
      {"client-certificate", &config.client_cert_file, true, false},
      {"client-certificate-data", &config.client_cert_pem, false, true},
      {"client-key", &config.client_key_file, true, false},
      {"client-key-data", &config.client_key_pem, false, true},
  };
  for (const FieldTarget& field : fields) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto value, OptionalScalar(user, field.key, where));
    if (!value.has_value()) continue;
    if (field.is_base64) {
      Result<std::string> decoded = DecodeBase64(*value);
      if (!decoded.ok()) return Error{where + "." + field.key + ": " + decoded.error()};
      *field.target = std::move(*decoded);
    } else if (field.is_path) {
      *field.target = ResolvePath(entry.file->dir, *value);
    } else {
      *field.target = *value;
    }
  }
  // Inline data wins over a file, as in client-go.
  if (!config.client_cert_pem.empty()) config.client_cert_file.clear();
  if (!config.client_key_pem.empty()) config.client_key_file.clear();
  const bool has_cert = !config.client_cert_pem.empty() || !config.client_cert_file.empty();
  const bool has_key = !config.client_key_pem.empty() || !config.client_key_file.empty();
  if (has_cert != has_key) {
    return Error{where + ": a client certificate needs both the certificate and its key"};
  }
  return OkStatus();
}

Result<ClientConfig> ResolveKubeconfig(const std::vector<KubeconfigFile>& files,
                                       const std::string& source) {
  std::string context_name;
  for (const KubeconfigFile& file : files) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto current,
                               OptionalScalar(file.root, "current-context", file.path));
    if (current.has_value() && !current->empty()) {
      context_name = *current;
      break;
    }
  }
  if (context_name.empty()) return Error{source + ": no current-context"};

  TOPOSCHED_ASSIGN_OR_RETURN(auto context, FindNamed(files, "contexts", "context", context_name));
  if (!context.has_value()) return Error{source + ": context \"" + context_name + "\" not found"};
  const std::string context_where = "context \"" + context_name + "\"";
  const YAML::Node& context_body = context->body;
  if (!context_body.IsMap()) return Error{source + ": " + context_where + ": expected a map"};
  TOPOSCHED_ASSIGN_OR_RETURN(auto cluster_name,
                             OptionalScalar(context_body, "cluster", context_where));
  TOPOSCHED_ASSIGN_OR_RETURN(auto user_name, OptionalScalar(context_body, "user", context_where));
  TOPOSCHED_ASSIGN_OR_RETURN(auto namespace_name,
                             OptionalScalar(context_body, "namespace", context_where));
  if (!cluster_name.has_value()) return Error{source + ": " + context_where + " has no cluster"};

  ClientConfig config;
  config.source = "kubeconfig " + source + " (context " + context_name + ")";
  if (namespace_name.has_value()) config.default_namespace = *namespace_name;

  TOPOSCHED_ASSIGN_OR_RETURN(auto cluster, FindNamed(files, "clusters", "cluster", *cluster_name));
  if (!cluster.has_value()) {
    return Error{source + ": cluster \"" + *cluster_name + "\" not found"};
  }
  Status applied = ApplyCluster(*cluster, "cluster \"" + *cluster_name + "\"", config);
  if (!applied.ok()) return Error{source + ": " + applied.error()};

  if (user_name.has_value() && !user_name->empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto user, FindNamed(files, "users", "user", *user_name));
    if (!user.has_value()) return Error{source + ": user \"" + *user_name + "\" not found"};
    TOPOSCHED_RETURN_IF_ERROR(ApplyUser(*user, *user_name, "user \"" + *user_name + "\"", config));
  }
  return config;
}

}  // namespace

Result<std::string> DecodeBase64(const std::string& text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int bit_count = 0;
  size_t padding = 0;
  for (char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+') {
      value = 62;
    } else if (c == '/') {
      value = 63;
    } else if (c == '=') {
      ++padding;
      continue;
    } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      continue;
    } else {
      return Error{"invalid base64"};
    }
    if (padding > 0) return Error{"invalid base64: data after padding"};
    bits = (bits << 6) | static_cast<uint32_t>(value);
    bit_count += 6;
    if (bit_count >= 8) {
      bit_count -= 8;
      out += static_cast<char>((bits >> bit_count) & 0xff);
    }
  }
  if (padding > 2 || bit_count >= 6) return Error{"invalid base64: truncated"};
  return out;
}

std::string EncodeBase64(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(data[i]) << 16) |
                       (static_cast<uint8_t>(data[i + 1]) << 8) | static_cast<uint8_t>(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const size_t rest = data.size() - i; rest > 0) {
    uint32_t v = static_cast<uint8_t>(data[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(data[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<ClientConfig> LoadKubeconfig(const std::string& paths) {
  std::vector<std::string> candidates;
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t colon = paths.find(':', start);
    const size_t end = colon == std::string::npos ? paths.size() : colon;
    if (end > start) candidates.push_back(paths.substr(start, end - start));
    start = end + 1;
  }
  if (candidates.empty()) return Error{"kubeconfig: no path given"};

  std::vector<KubeconfigFile> files;
  for (const std::string& path : candidates) {
    std::error_code exists_error;
    // kubectl skips missing files in a list, but a single named file must exist.
    if (candidates.size() > 1 && !fs::exists(path, exists_error)) continue;
    Result<std::string> text = ReadWholeFile(path);
    if (!text.ok()) return Error{"kubeconfig: " + text.error()};
    KubeconfigFile file;
    file.path = path;
    file.dir = fs::absolute(fs::path(path), exists_error).parent_path();
    try {
      file.root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
      return Error{"kubeconfig " + path + ": invalid YAML: " + e.what()};
    }
    if (!file.root.IsNull() && !file.root.IsMap()) {
      return Error{"kubeconfig " + path + ": expected a map at the top level"};
    }
    files.push_back(std::move(file));
  }
  if (files.empty()) return Error{"kubeconfig: none of " + paths + " exists"};
  try {
    return ResolveKubeconfig(files, paths);
  } catch (const YAML::Exception& e) {
    return Error{"kubeconfig " + paths + ": " + e.what()};
  }
}

Result<ClientConfig> InClusterConfig(const InClusterOptions& options) {
  const std::string host =
      options.host.empty() ? DefaultGetEnv("KUBERNETES_SERVICE_HOST") : options.host;
  const std::string port =
      options.port.empty() ? DefaultGetEnv("KUBERNETES_SERVICE_PORT") : options.port;
  if (host.empty() || port.empty()) {
    return Error{
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
        "must both be set"};
  }
  ClientConfig config;
  // An IPv6 address needs brackets in a URL.
  const bool ipv6 = host.find(':') != std::string::npos;
  config.server = "https://" + (ipv6 ? "[" + host + "]" : host) + ":" + port;
  config.source = "in-cluster service account";
  if (Result<std::string> token = ReadTokenFile(options.token_file); !token.ok()) {
    return Error{"in-cluster config: service account token: " + token.error()};
  }
  config.token_file = options.token_file;
  config.token_reload_period = options.token_reload_period;
  std::error_code error;
  if (!fs::exists(options.ca_file, error)) {
    return Error{"in-cluster config: CA file " + options.ca_file + " does not exist"};
  }
  config.ca_file = options.ca_file;
  if (Result<std::string> ns = ReadWholeFile(options.namespace_file); ns.ok()) {
    config.default_namespace = TrimSpace(*ns);
  }
  return config;
}

Result<ClientConfig> ConfigFromEnvironment(const std::string& kubeconfig_flag,
                                           const GetEnvFunction& getenv) {
  const GetEnvFunction& env = getenv ? getenv : GetEnvFunction(DefaultGetEnv);
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag);
  if (const std::string from_env = env("KUBECONFIG"); !from_env.empty()) {
    return LoadKubeconfig(from_env);
  }
  InClusterOptions in_cluster;
  in_cluster.host = env("KUBERNETES_SERVICE_HOST");
  in_cluster.port = env("KUBERNETES_SERVICE_PORT");
  if (!in_cluster.host.empty() && !in_cluster.port.empty()) return InClusterConfig(in_cluster);
  const std::string home = env("HOME");
  if (!home.empty()) {
    const std::string path = home + "/.kube/config";
    std::error_code error;
    if (fs::exists(path, error)) return LoadKubeconfig(path);
  }
  return Error{
      "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a pod, or "
      "create ~/.kube/config"};
}

}  // namespace toposched::kube
