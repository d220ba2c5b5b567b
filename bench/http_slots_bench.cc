// The extender's connection slots under idle and anonymous load, measured on the real binary
// (issue 29): it serves TLS with client certificates (--tls-client-ca-file) while
//   - `--idle` TCP connections (1,000) are opened and never start TLS; each one the server closes
//     is opened again at once (not with --no-reopen),
//   - `--anonymous` clients (200) without a certificate ask GET /healthz once a second, each on
//     its own keep-alive curl handle,
// and, after a settling second, measures for `--seconds`:
//   - kube-scheduler: a certified POST /filter of 500 node names every 50 ms, on a keep-alive
//     connection, and every 4th on a new connection (status, p50/p99/max),
//   - kubelet: GET /healthz and /readyz on new connections every 500 ms, 1 s timeout each,
//   - the extender's peak VmRSS (/proc/PID/status).
//   ./build/bench/http_slots_bench [--binary build/toposched] [--idle 1000] [--anonymous 200]
//       [--seconds 30] [--no-reopen] [-- extra extender flags]
// A plain program, not a Google Benchmark: one long run, the numbers printed at the end.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "extender_fixtures.h"
#include "process_probe.h"
#include "support/test_certs.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using toposched::bench::RssKiB;

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

// One curl handle: keep-alive unless `fresh`; with a client certificate when `cert` is set.
struct Client {
  Client(const std::string& ca, const std::string& cert, const std::string& key, bool fresh,
         long timeout_ms)
      : curl(curl_easy_init()) {
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
    curl_easy_setopt(curl, CURLOPT_CAINFO, ca.c_str());
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (!cert.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, cert.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, key.c_str());
    }
    if (fresh) {
      curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
      curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
    }
  }
  ~Client() { curl_easy_cleanup(curl); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The status, or 0 without an answer.
  long Call(const std::string& url, const std::string* body = nullptr) {
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    if (body != nullptr) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    }
    long status = 0;
    if (curl_easy_perform(curl) == CURLE_OK)
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }

  CURL* curl;
};

// Sleeps up to `d`, less when `stop` turns true.
void Pause(const std::atomic<bool>& stop, std::chrono::milliseconds d) {
  const auto end = Clock::now() + d;
  while (!stop && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

struct Latencies {
  std::vector<double> ms;
  int errors = 0;
  void Print(const char* what) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
    };
    std::printf("  %s: %zu calls, %d not 200, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", what,
                ms.size(), errors, at(0.5), at(0.99), ms.empty() ? 0.0 : ms.back());
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "build/toposched";
  int idle = 1000;
  int anonymous = 200;
  int seconds = 30;
  bool reopen = true;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--binary") {
      binary = next();
    } else if (a == "--idle") {
      idle = std::stoi(next());
    } else if (a == "--anonymous") {
      anonymous = std::stoi(next());
    } else if (a == "--seconds") {
      seconds = std::stoi(next());
    } else if (a == "--no-reopen") {
      reopen = false;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--binary build/toposched] [--idle 1000] [--anonymous 200] [--seconds 30] "
          "[--no-reopen] [-- extra extender flags]\n"
          "Starts the extender (TLS with client certificates, 500 offline nodes) and, while idle "
          "TCP connections and anonymous keep-alive /healthz clients press on its connection "
          "slots, measures a certified /filter of 500 names, kubelet-like probes and its RSS. An "
          "idle "
          "connection the server closes is opened again at once, unless --no-reopen.\n",
          argv[0]);
      return 0;
    } else if (a == "--") {
      for (++i; i < argc; ++i) extra.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;  // the idle connections, for us and the extender
  setrlimit(RLIMIT_NOFILE, &limit);
  curl_global_init(CURL_GLOBAL_ALL);

  char dir_template[] = "/tmp/slots-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const toposched::testing::TestPki pki = toposched::testing::GenerateTestPki();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string ca = write("ca.pem", pki.ca_cert_pem);
  const std::string server_cert = write("server.pem", pki.server_cert_pem);
  const std::string server_key = write("server-key.pem", pki.server_key_pem);
  const std::string cert = write("client.pem", pki.client_cert_pem);
  const std::string key = write("client-key.pem", pki.client_key_pem);
  std::vector<std::string> names;
  std::string nodes = R"({"kind":"NodeList","apiVersion":"v1","items":[)";
  for (int i = 0; i < 500; ++i) {
    names.push_back("trn-" + std::to_string(i));
    nodes +=
        (i ? "," : "") + toposched::testing::EksNodeJson(names.back(), "trn1.32xlarge", 16, 32);
  }
  const std::string nodes_file = write("nodes.json", nodes + "]}");
  const std::string filter = toposched::testing::NamesArgs(
      toposched::testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), names);

  const uint16_t port = toposched::bench::FreeLoopbackPort();
  std::vector<std::string> args = {binary,
                                   "extender",
                                   "--offline-nodes",
                                   nodes_file,
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--tls-cert-file",
                                   server_cert,
                                   "--tls-key-file",
                                   server_key,
                                   "--tls-client-ca-file",
                                   ca,
                                   "--log-level",
                                   "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  const std::string base = "https://localhost:" + std::to_string(port);
  {
    Client probe(ca, "", "", true, 1000);
    const auto ready_deadline = Clock::now() + std::chrono::seconds(30);
    while (probe.Call(base + "/readyz") != 200) {
      if (Clock::now() > ready_deadline) {
        std::fprintf(stderr, "the extender was not ready within 30 s\n");
        kill(pid, SIGKILL);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  const long rss_idle = RssKiB(pid);
  std::atomic<bool> stop{false};
  std::atomic<bool> stop_load{false};

  // The attack: idle TCP connections, reopened when closed.
  std::atomic<long> idle_closed{0};
  std::atomic<int> idle_open{0};
  std::thread idler([&] {
    std::vector<pollfd> fds(idle);
    for (auto& p : fds) p = {toposched::bench::ConnectLoopback(port), POLLIN, 0};
    while (!stop_load) {
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      for (auto& p : fds) {
        if (p.revents == 0) continue;
        close(p.fd);  // closed by the server (or an error): open another one, unless --no-reopen
        p.fd = reopen ? toposched::bench::ConnectLoopback(port) : -1;
        p.revents = 0;
        idle_closed.fetch_add(1);
      }
      idle_open = static_cast<int>(
          std::count_if(fds.begin(), fds.end(), [](const pollfd& p) { return p.fd >= 0; }));
    }
    for (auto& p : fds) {
      if (p.fd >= 0) close(p.fd);
    }
  });
  std::atomic<long> anonymous_ok{0};
  std::atomic<long> anonymous_failed{0};
  std::vector<std::thread> anonymous_clients;
  for (int i = 0; i < anonymous; ++i) {
    anonymous_clients.emplace_back([&, i] {
      Client client(ca, "", "", false, 5000);
      Pause(stop_load, std::chrono::milliseconds(5 * i % 1000));  // spread over the second
      while (!stop_load) {
        (client.Call(base + "/healthz") == 200 ? anonymous_ok : anonymous_failed).fetch_add(1);
        Pause(stop_load, std::chrono::milliseconds(1000));
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let the attack take its slots

  std::atomic<long> peak_rss{rss_idle};
  std::thread sampler([&] {
    while (!stop) {
      peak_rss = std::max(peak_rss.load(), RssKiB(pid));
      Pause(stop, std::chrono::milliseconds(100));
    }
  });
  Latencies kept;
  Latencies fresh;
  std::thread scheduler([&] {
    Client keep_alive(ca, cert, key, false, 10000);
    Client each_new(ca, cert, key, true, 10000);
    for (int n = 0; !stop; ++n) {
      Latencies& into = n % 4 == 3 ? fresh : kept;
      const auto t0 = Clock::now();
      const long status = (n % 4 == 3 ? each_new : keep_alive).Call(base + "/filter", &filter);
      into.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (status != 200) ++into.errors;
      Pause(stop, std::chrono::milliseconds(50));
    }
  });
  long probes = 0;
  long probes_failed = 0;
  std::thread kubelet([&] {
    Client probe(ca, "", "", true, 1000);
    while (!stop) {
      for (const char* path : {"/healthz", "/readyz"}) {
        ++probes;
        if (probe.Call(base + path) != 200) ++probes_failed;
      }
      Pause(stop, std::chrono::milliseconds(500));
    }
  });

  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const int idle_open_at_end = idle_open.load();
  stop = true;
  scheduler.join();
  kubelet.join();
  sampler.join();
  stop_load = true;
  idler.join();
  for (auto& t : anonymous_clients) t.join();
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);

  std::printf("%d idle TCP connections, %d anonymous keep-alive clients, %d s, 500 names\n", idle,
              anonymous, seconds);
  kept.Print("certified /filter, keep-alive");
  fresh.Print("certified /filter, new connection");
  std::printf("  probes (/healthz, /readyz; new connection, 1 s timeout): %ld, %ld failed\n",
              probes, probes_failed);
  std::printf("  anonymous /healthz: %ld answered 200, %ld failed\n", anonymous_ok.load(),
              anonymous_failed.load());
  std::printf("  idle connections closed by the server: %ld, %s (open at the end: %d)\n",
              idle_closed.load(), reopen ? "each reopened" : "not reopened", idle_open_at_end);
  std::printf("  extender VmRSS: before the load %.1f MiB, peak %.1f MiB\n", rss_idle / 1024.0,
              peak_rss.load() / 1024.0);
  return 0;
}
