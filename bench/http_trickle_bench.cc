// The extender's HTTP server under slow bodies, measured on the real binary: N connections each
// declare a huge Content-Length (256 MiB) and trickle it a few bytes at a time, while a client asks
// /healthz every 50 ms. Reports the extender process's peak VmRSS (/proc/PID/status, sampled every
// 50 ms) and /healthz latency (p50, p99, max). Target: RSS < 300 MiB, /healthz < 100 ms.
//   ./build/bench/http_trickle_bench [--binary build/toposched] [--connections 64]
//       [--declared-mib 256] [--seconds 20] [--bytes-per-tick 512] [-- extra extender flags]
// It is a plain program, not a Google Benchmark: one long run, the numbers printed at the end.
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "extender_fixtures.h"
#include "process_probe.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using toposched::bench::RssKiB;

bool Send(int fd, const std::string& data) {
  return send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
}

// One GET /healthz on a new connection: its status code, or 0.
int Healthz(uint16_t port) {
  const int fd = toposched::bench::ConnectLoopback(port);
  if (fd < 0) return 0;
  int status = 0;
  if (Send(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) {
    char buf[512];
    const ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    if (n > 12) status = std::atoi(buf + 9);
  }
  close(fd);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "build/toposched";
  int connections = 64;
  long declared_mib = 256;
  int seconds = 20;
  size_t bytes_per_tick = 512;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--binary")
      binary = next();
    else if (a == "--connections")
      connections = std::stoi(next());
    else if (a == "--declared-mib")
      declared_mib = std::stol(next());
    else if (a == "--seconds")
      seconds = std::stoi(next());
    else if (a == "--bytes-per-tick")
      bytes_per_tick = std::stoul(next());
    else if (a == "--") {
      for (++i; i < argc; ++i) extra.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  char dir_template[] = "/tmp/trickle-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string nodes_file = dir + "/nodes.json";
  {
    std::ofstream out(nodes_file);
    out << R"({"kind":"NodeList","apiVersion":"v1","items":[)";
    for (int i = 0; i < 16; ++i) {
      out << (i ? "," : "")
          << toposched::testing::EksNodeJson("trn-" + std::to_string(i), "trn1.32xlarge", 16, 32);
    }
    out << "]}";
  }
  const uint16_t port = toposched::bench::FreeLoopbackPort();
  std::vector<std::string> args = {binary,        "extender", "--offline-nodes",
                                   nodes_file,    "--listen", "127.0.0.1:" + std::to_string(port),
                                   "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  const auto ready_deadline = Clock::now() + std::chrono::seconds(30);
  while (Healthz(port) != 200) {
    if (Clock::now() > ready_deadline) {
      std::fprintf(stderr, "the extender did not answer /healthz within 30 s\n");
      kill(pid, SIGKILL);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const long rss_idle = RssKiB(pid);

  std::atomic<bool> stop{false};
  std::atomic<long> peak_rss{rss_idle};
  std::vector<double> latencies_ms;
  int healthz_failures = 0;
  std::thread probe([&] {
    while (!stop) {
      const auto t0 = Clock::now();
      const int code = Healthz(port);
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (code != 200) ++healthz_failures;
      peak_rss = std::max(peak_rss.load(), RssKiB(pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  const std::string header =
      "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(declared_mib << 20) + "\r\n\r\n";
  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    const int fd = toposched::bench::ConnectLoopback(port);
    if (fd >= 0 && Send(fd, header)) fds.push_back(fd);
  }
  const std::string chunk(bytes_per_tick, ' ');
  size_t sent_total = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    for (int& fd : fds) {
      if (fd < 0) continue;
      if (Send(fd, chunk)) {
        sent_total += chunk.size();
      } else {
        close(fd);  // refused (503) or cut by the body timeout
        fd = -1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const long still_open = std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; });
  stop = true;
  probe.join();
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::remove(nodes_file.c_str());
  rmdir(dir.c_str());

  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms.empty()
               ? 0.0
               : latencies_ms[std::min(latencies_ms.size() - 1,
                                       static_cast<size_t>(q * latencies_ms.size()))];
  };
  std::printf(
      "connections %d declaring %ld MiB each, %zu bytes per 100 ms each, %d s\n"
      "  still sending at the end: %ld (the rest refused or cut)\n"
      "  body bytes sent in all: %.1f MiB\n"
      "  extender VmRSS: idle %.1f MiB, peak %.1f MiB\n"
      "  /healthz: %zu probes, %d failed, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
      connections, declared_mib, bytes_per_tick, seconds, still_open, sent_total / 1048576.0,
      rss_idle / 1024.0, peak_rss.load() / 1024.0, latencies_ms.size(), healthz_failures, at(0.5),
      at(0.99), latencies_ms.empty() ? 0.0 : latencies_ms.back());
  return 0;
}
