// `kapitsa doctor`: what this machine can run and how fast — CPU, memory, measured bandwidth, GPUs, disk,
// then every catalog model × quantization with its size, whether Kapitsa runs that format yet, whether
// it fits, the longest context that fits and the roofline decode rate; the coding agents on PATH, the
// default port, and warnings a person can act on. A report, text or --json; it changes nothing.
#include "cli/catalog/catalog.h"
#include "cli/catalog/memory_fit.h"
#include "cli/commands.h"
#include "cli/doctor/system_info.h"
#include "ops/cpu/cpu.h"

#include <fmt/format.h>

#include <cstdio>
#include <limits>

namespace kapitsa::cli {
namespace {

constexpr int kDefaultPort = 8080;

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

struct DoctorOptions {
  bool json = false;
  double seconds = 1.0;  // of bandwidth measurement
};

int run_doctor(const DoctorOptions& o) {
  const doctor::CpuInfo cpu = doctor::probe_cpu();
  const doctor::MemoryInfo mem = doctor::probe_memory();
  const double bandwidth = doctor::measure_read_bandwidth(cpu.usable_cores, o.seconds);
  const doctor::GpuReport gpu = doctor::probe_gpus();
  const std::filesystem::path hub = catalog::hub_cache_dir();
  const doctor::DiskInfo disk = doctor::probe_disk(hub);
  const std::vector<doctor::AgentInfo> agents = doctor::probe_agents();
  const bool port_free = doctor::port_is_free(kDefaultPort);
  std::vector<std::string> warnings;

  Json models = Json::array();
  const Expected<catalog::Catalog> cat = catalog::load_catalog();
  if (!cat.ok()) warnings.push_back("The model catalog could not be read: " + cat.error().message);
  std::string smallest_fit;
  double smallest_fit_bytes = std::numeric_limits<double>::infinity();
  if (cat.ok())
    for (const catalog::ModelEntry& m : cat.value().models)
      for (const catalog::QuantEntry& q : m.quants) {
        const catalog::FitEstimate f = catalog::estimate_fit(m, q, double(mem.available_bytes), bandwidth);
        const std::string spec = m.alias + ":" + q.name;
        const bool runs = q.unsupported.empty();
        if (runs && f.fits && f.weight_bytes < smallest_fit_bytes) smallest_fit = spec, smallest_fit_bytes = f.weight_bytes;
        models.push_back({{"alias", m.alias}, {"name", m.name}, {"quant", q.name}, {"spec", spec}, {"repo", q.repo},
                          {"file", q.file}, {"verified", q.verified}, {"runs", runs}, {"unsupported", q.unsupported},
                          {"weight_bytes", f.weight_bytes},
                          {"kv_bytes_per_token", f.kv_bytes_per_token}, {"state_bytes", f.state_bytes},
                          {"fits", f.fits}, {"max_context", f.max_context},
                          {"decode_tokens_per_s", f.decode_tokens_per_s},
                          {"downloaded", catalog::cached_snapshot(q.repo).has_value()}});
      }

  // Warnings a person can act on.
  // The cpu kernels' level (ops/cpu/cpu.h): the best this CPU runs, or what KAPITSA_CPU_ISA chose.
  const std::string kernels(ops::cpu::level_name(ops::cpu::selected_level()));
  // Intel AMX for bf16 and quantized (int8) prefill (ops/cpu/amx.h): "usable", or why not.
  const std::string amx = KAPITSA_CPU_AT(ops::cpu::selected_level(), amx_status)();
  const std::string amx_int8 = KAPITSA_CPU_AT(ops::cpu::selected_level(), amx_int8_status)();
#if defined(__x86_64__)
  if (cpu.arch == "x86_64" && ops::cpu::best_level() == ops::cpu::Level::baseline)
    warnings.push_back(fmt::format("This CPU lacks {}: the CPU kernels run their plain versions and decode will be slow.",
                                   ops::cpu::missing_features(ops::cpu::Level::avx2)));
#endif
  if (cpu.usable_cores < cpu.logical_cores)
    warnings.push_back(fmt::format("Only {} of {} cores are usable by this process (CPU affinity or container limit).",
                                   cpu.usable_cores, cpu.logical_cores));
  if (cat.ok() && !cat.value().models.empty() && smallest_fit.empty())
    warnings.push_back(fmt::format("No catalog model that Kapitsa runs fits in the {} of available memory: close "
                                   "other programs or use a machine with more RAM.", gib(double(mem.available_bytes))));
  if (!smallest_fit.empty() && double(disk.free_bytes) < smallest_fit_bytes)
    warnings.push_back(fmt::format("Only {} free in {}: not enough for even {} ({}). Free space, or set HF_HUB_CACHE "
                                   "to a larger disk.", gib(double(disk.free_bytes)), disk.path.string(), smallest_fit,
                                   gib(smallest_fit_bytes)));
  if (gpu.cuda_backend_built && gpu.devices.empty())
    warnings.push_back("The CUDA backend is built but no NVIDIA GPU answered (nvidia-smi missing or no device): "
                       "models will run on the CPU.");
  if (!port_free)
    warnings.push_back(fmt::format("Port {} is in use: give `kapitsa serve` and the agent launchers --port N.", kDefaultPort));
  bool any_agent = false;
  for (const doctor::AgentInfo& a : agents) any_agent = any_agent || !a.path.empty();
  if (!any_agent)
    warnings.push_back("No coding agent (opencode, claude, codex, pi) is on PATH: install one to use `kapitsa opencode` "
                       "and the others (`kapitsa opencode --help` says how).");

  if (o.json) {
    Json gpus = Json::array();
    for (const doctor::GpuInfo& g : gpu.devices)
      gpus.push_back({{"name", g.name}, {"memory_bytes", g.memory_bytes}, {"driver", g.driver}});
    Json agent_list = Json::array();
    for (const doctor::AgentInfo& a : agents)
      agent_list.push_back({{"name", a.name}, {"installed", !a.path.empty()}, {"path", a.path}, {"version", a.version}});
    const Json out = {
        {"cpu", {{"model", cpu.model}, {"arch", cpu.arch}, {"features", cpu.features}, {"kernels", kernels}, {"amx", amx}, {"amx_int8", amx_int8},
                 {"logical_cores", cpu.logical_cores}, {"usable_cores", cpu.usable_cores}}},
        {"memory", {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}}},
        {"bandwidth", {{"read_bytes_per_s", bandwidth}, {"threads", cpu.usable_cores}, {"seconds", o.seconds}}},
        {"gpu", {{"cuda_backend_built", gpu.cuda_backend_built}, {"listed", gpu.listed}, {"devices", gpus}}},
        {"disk", {{"path", disk.path.string()}, {"free_bytes", disk.free_bytes}, {"total_bytes", disk.total_bytes}}},
        {"hub_cache", hub.string()},
        {"models", models},
        {"agents", agent_list},
        {"port", {{"port", kDefaultPort}, {"free", port_free}}},
        {"warnings", warnings}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }

  std::printf("CPU        %s (%s), %d cores usable of %d\n", cpu.model.c_str(), cpu.arch.c_str(), cpu.usable_cores,
              cpu.logical_cores);
  std::printf("Features   %s\n", cpu.features.empty() ? "(none of interest)" : join(cpu.features, " ").c_str());
  std::printf("Kernels    %s (the best level this CPU runs of baseline, avx2, avxvnni, avx512; KAPITSA_CPU_ISA picks another)\n",
              kernels.c_str());
  std::printf("AMX        bf16: %s\n", amx == "usable" ? "usable: bf16 prefill matmuls run on AMX tiles (KAPITSA_AMX=0 turns it off)"
                                                       : amx.c_str());
  std::printf("           int8: %s\n", amx_int8 == "usable"
                                          ? "usable: quantized (GGUF) prefill matmuls from 64 tokens run on AMX tiles"
                                          : amx_int8.c_str());
  std::printf("Memory     %s total, %s available\n", gib(double(mem.total_bytes)).c_str(),
              gib(double(mem.available_bytes)).c_str());
  std::printf("Bandwidth  %.1f GB/s read (%d threads, %.1f s streaming read)\n", bandwidth / 1e9, cpu.usable_cores, o.seconds);
  if (!gpu.cuda_backend_built) std::printf("GPU        CUDA backend built: no (build with -DKAPITSA_CUDA=ON for NVIDIA GPUs)\n");
  else if (gpu.devices.empty()) std::printf("GPU        CUDA backend built: yes; no device found (nvidia-smi)\n");
  for (const doctor::GpuInfo& g : gpu.devices)
    std::printf("GPU        %s, %s, driver %s (CUDA backend built: yes)\n", g.name.c_str(),
                gib(double(g.memory_bytes)).c_str(), g.driver.c_str());
  std::printf("Disk       %s free of %s in %s (models: %s)\n", gib(double(disk.free_bytes)).c_str(),
              gib(double(disk.total_bytes)).c_str(), disk.path.string().c_str(), hub.string().c_str());

  std::printf("\nModels: size on disk; runs = Kapitsa loads that format today;\n"
              "fits = weights + state + %ld tokens of context in the available memory;\n"
              "decode = roofline, bandwidth / bytes of weights read per token (a ceiling, not a promise)\n",
              catalog::kMinUsefulContext);
  std::printf("  %-22s %10s  %-8s %-4s %12s %12s  %-10s %s\n", "model", "size", "runs", "fits", "max context",
              "decode tok/s", "downloaded", "repository");
  std::string not_yet;  // the formats Kapitsa cannot run yet, said once below the table
  for (const Json& m : models) {
    const bool runs = m["runs"].get<bool>();
    if (!runs) not_yet += fmt::format("  {}: {}\n", m["spec"].get<std::string>(), m["unsupported"].get<std::string>());
    std::printf("  %-22s %10s  %-8s %-4s %12ld %12.1f  %-10s %s%s\n", m["spec"].get<std::string>().c_str(),
                gib(m["weight_bytes"].get<double>()).c_str(), runs ? "yes" : "not yet", m["fits"].get<bool>() ? "yes" : "no",
                m["max_context"].get<long>(), m["decode_tokens_per_s"].get<double>(),
                m["downloaded"].get<bool>() ? "yes" : "no", m["repo"].get<std::string>().c_str(),
                m["verified"].get<bool>() ? "" : " (unverified)");
  }
  if (!not_yet.empty()) std::printf("Not run by Kapitsa yet (the numbers are for when it does):\n%s", not_yet.c_str());

  std::printf("\nAgents\n");
  for (const doctor::AgentInfo& a : agents)
    std::printf("  %-9s %s\n", a.name.c_str(),
                a.path.empty() ? "not installed" : fmt::format("{} ({})", a.version.empty() ? "?" : a.version, a.path).c_str());
  std::printf("Port %d   %s\n", kDefaultPort, port_free ? "free" : "in use");
  if (!warnings.empty()) {
    std::printf("\nWarnings\n");
    for (const std::string& w : warnings) std::printf("  - %s\n", w.c_str());
  }
  return 0;
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto opts = std::make_shared<DoctorOptions>();
  CLI::App* cmd = app.add_subcommand("doctor", "What this machine can run: CPU, memory, bandwidth, GPUs, disk, "
                                               "which catalog models fit and how fast, agents, the default port");
  cmd->add_flag("--json", opts->json, "Print the report as JSON");
  cmd->add_option("--seconds", opts->seconds, "How long to measure memory bandwidth (default 1)")->check(CLI::Range(0.05, 30.0));
  cmd->callback([opts] { exit_code() = run_doctor(*opts); });
}

}  // namespace kapitsa::cli
