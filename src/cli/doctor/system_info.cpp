// Machine probes for `kapitsa doctor` (system_info.h): /proc/cpuinfo, /proc/meminfo, statvfs, nvidia-smi.
#include "cli/doctor/system_info.h"

#include "cli/agents/agent.h"
#include "cli/agents/process.h"

#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

namespace kapitsa::cli::doctor {
namespace fs = std::filesystem;

namespace {

std::string trim(std::string s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The standard output of a shell command (stderr dropped), or empty.
std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>/dev/null").c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return out;
}

}  // namespace

CpuInfo probe_cpu() {
  CpuInfo c;
  utsname u{};
  if (uname(&u) == 0) c.arch = u.machine;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (c.model.empty() && (key == "model name" || key == "Hardware" || key == "Model")) c.model = value;
    if (flags.empty() && (key == "flags" || key == "Features")) flags = value;
  }
  std::istringstream words(flags);
  std::vector<std::string> have;
  for (std::string w; words >> w;) have.push_back(w);
  const auto has = [&](const char* f) { return std::find(have.begin(), have.end(), f) != have.end(); };
  // x86 (/proc/cpuinfo "flags") and arm64 ("Features": asimd is NEON, asimddp the dot product).
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
                        "amx_tile", "amx_bf16", "amx_int8", "asimddp", "i8mm", "bf16", "sve", "sve2"})
    if (has(f)) c.features.push_back(f);
  if (has("asimd")) c.features.insert(c.features.begin(), "neon");
  if (c.model.empty()) c.model = c.arch;
  c.logical_cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  CPU_ZERO(&set);
  c.usable_cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : c.logical_cores;
  c.usable_cores = std::max(c.usable_cores, 1);
  return c;
}

MemoryInfo probe_memory() {
  MemoryInfo m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = kib * 1024;
  }
  return m;
}

double measure_read_bandwidth(int threads, double seconds) {
  threads = std::max(threads, 1);
  // 512 MiB: larger than any last-level cache this runs on, small next to the models it is about.
  constexpr size_t kBytes = size_t(512) << 20;
  constexpr size_t kWords = kBytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[kWords]);
  for (size_t i = 0; i < kWords; ++i) buffer[i] = i;  // touch every page before timing
  std::atomic<bool> stop{false};
  std::vector<uint64_t> bytes_read(threads, 0), sums(threads, 0);
  std::vector<std::thread> pool;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const size_t begin = kWords * t / threads, end = kWords * (t + 1) / threads;
      uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains so the adds do not serialize the loads
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = begin; i + 4 <= end; i += 4) a += buffer[i], b += buffer[i + 1], c += buffer[i + 2], d += buffer[i + 3];
        bytes_read[t] += (end - begin) / 4 * 4 * sizeof(uint64_t);
      }
      sums[t] = a + b + c + d;  // kept, so the loads are not optimized away
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& th : pool) th.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t total = 0, sink = 0;
  for (int t = 0; t < threads; ++t) total += bytes_read[t], sink ^= sums[t];
  static volatile uint64_t keep;
  keep = sink;
  return elapsed > 0 ? double(total) / elapsed : 0;
}

GpuReport probe_gpus() {
  GpuReport r;
#ifdef KAPITSA_HAVE_CUDA
  r.cuda_backend_built = true;
#endif
  if (agents::find_executable("nvidia-smi").empty()) return r;
  const std::string out =
      command_output("nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits");
  r.listed = !out.empty();
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cols;
    std::istringstream cs(line);
    for (std::string col; std::getline(cs, col, ',');) cols.push_back(trim(col));
    if (cols.size() < 3) continue;
    GpuInfo g;
    g.name = cols[0];
    g.memory_bytes = uint64_t(std::strtoull(cols[1].c_str(), nullptr, 10)) << 20;  // MiB
    g.driver = cols[2];
    r.devices.push_back(g);
  }
  return r;
}

DiskInfo probe_disk(const fs::path& where) {
  DiskInfo d;
  std::error_code ec;
  fs::path p = where;
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  d.path = p.empty() ? fs::path("/") : p;
  const fs::space_info s = fs::space(d.path, ec);
  if (!ec) d.free_bytes = s.available, d.total_bytes = s.capacity;
  return d;
}

std::vector<AgentInfo> probe_agents() {
  std::vector<AgentInfo> out;
  for (const agents::AgentKind& kind : agents::agent_kinds()) {
    AgentInfo a;
    a.name = kind.name;
    const char* over = std::getenv(kind.bin_env);
    a.path = agents::find_executable(over != nullptr && *over != '\0' ? over : kind.binary);
    if (!a.path.empty()) {
      const std::string v = command_output("timeout 10 '" + a.path + "' --version </dev/null");
      a.version = trim(v.substr(0, v.find('\n')));
    }
    out.push_back(a);
  }
  return out;
}

bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;  // as the server does: a port in TIME_WAIT is usable
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace kapitsa::cli::doctor
