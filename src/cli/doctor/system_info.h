// What `kapitsa doctor` finds out about the machine: CPU and its SIMD features, cores, memory, a measured
// memory read bandwidth, GPUs (when the CUDA backend is built), free disk, the coding agents on PATH and
// whether a port is free. Read-only probes; nothing here changes the machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kapitsa::cli::doctor {

struct CpuInfo {
  std::string model;                  // "AMD EPYC 9654 96-Core Processor", or the architecture
  std::string arch;                   // uname machine: x86_64, aarch64
  std::vector<std::string> features;  // of interest to kernels: avx2, avx512f, avx512_vnni, amx_tile, neon, ...
  int logical_cores = 0;              // online
  int usable_cores = 0;               // in this process's affinity mask (containers, taskset)
};
CpuInfo probe_cpu();

struct MemoryInfo {
  uint64_t total_bytes = 0, available_bytes = 0;  // /proc/meminfo MemTotal, MemAvailable
};
MemoryInfo probe_memory();

// Streaming read of a buffer larger than the caches with `threads` threads for about `seconds`; bytes/s.
double measure_read_bandwidth(int threads, double seconds);

struct GpuInfo {
  std::string name, driver;
  uint64_t memory_bytes = 0;
};
struct GpuReport {
  bool cuda_backend_built = false;
  bool listed = false;  // nvidia-smi answered (devices may still be empty)
  std::vector<GpuInfo> devices;
};
GpuReport probe_gpus();

struct DiskInfo {
  std::filesystem::path path;  // the folder asked about, or its nearest existing parent
  uint64_t free_bytes = 0, total_bytes = 0;
};
DiskInfo probe_disk(const std::filesystem::path& where);

struct AgentInfo {
  std::string name, path, version;  // path empty: not installed
};
std::vector<AgentInfo> probe_agents();

// Whether 127.0.0.1:port can be bound now.
bool port_is_free(int port);

}  // namespace kapitsa::cli::doctor
