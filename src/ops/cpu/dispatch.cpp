// Which level's kernels this process runs (cpu.h): the CPU's features read once — x86-64: CPUID, and the
// OS's register saving with XGETBV; AArch64: the hwcaps the kernel reports (Linux getauxval, macOS
// sysctl) — and KAPITSA_CPU_ISA to choose a lower level. Compiled with the build's baseline flags, like
// everything outside the kernel files: it runs before any level is chosen.
#include "ops/backend.h"
#include "ops/cpu/cpu.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace kapitsa::ops::cpu {
namespace {

struct Feature {
  const char* name;  // as /proc/cpuinfo spells it
  bool present;
};

// Everything a level needs (x86-64: not only what it adds to the level below — see cpu.h).
std::vector<Feature> needs(Level level) {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const auto leaf = [&](unsigned l, unsigned sub) {
    a = b = c = d = 0;
    return __get_cpuid_count(l, sub, &a, &b, &c, &d) != 0;
  };
  leaf(1, 0);
  const unsigned c1 = c;
  leaf(7, 0);
  const unsigned b7 = b, c7 = c;
  leaf(0x80000001u, 0);
  const unsigned cx1 = c;
  const auto bit = [](unsigned reg, int i) { return ((reg >> i) & 1u) != 0; };
  // XCR0: which register states the OS saves on a context switch (bit 1 SSE, 2 AVX, 5–7 AVX-512).
  uint64_t xcr0 = 0;
  if (bit(c1, 27)) {  // OSXSAVE: XGETBV is allowed
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  leaf(7, 1);
  const unsigned a71 = a;
  const bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
  std::vector<Feature> v3 = {{"avx", bit(c1, 28) && os_avx}, {"avx2", bit(b7, 5) && os_avx}, {"fma", bit(c1, 12)},
                             {"f16c", bit(c1, 29)},          {"bmi1", bit(b7, 3)},           {"bmi2", bit(b7, 8)},
                             {"abm", bit(cx1, 5)},           {"movbe", bit(c1, 22)}};
  switch (level) {
    case Level::baseline: return {};
    case Level::avx2: return v3;  // x86-64-v3
    case Level::avxvnni:          // x86-64-v3 + AVX-VNNI (CPUID.(7,1):EAX bit 4)
      v3.push_back({"avx_vnni", bit(a71, 4) && os_avx});
      return v3;
    case Level::avx512:  // x86-64-v4 + VNNI
      v3.insert(v3.end(), {{"avx512f", bit(b7, 16) && os_avx512}, {"avx512dq", bit(b7, 17)}, {"avx512cd", bit(b7, 28)},
                           {"avx512bw", bit(b7, 30)}, {"avx512vl", bit(b7, 31)}, {"avx512_vnni", bit(c7, 11)}});
      return v3;
  }
#elif defined(__aarch64__)
  // Advanced SIMD is part of every AArch64 CPU (baseline). The names are /proc/cpuinfo's "Features".
#if defined(__linux__)
  const bool dotprod = (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
  const bool i8mm = (getauxval(AT_HWCAP2) & (1ul << 13)) != 0;    // HWCAP2_I8MM
#elif defined(__APPLE__)
  const auto has = [](const char* name) {
    int v = 0;
    size_t size = sizeof v;
    return sysctlbyname(name, &v, &size, nullptr, 0) == 0 && v != 0;
  };
  const bool dotprod = has("hw.optional.arm.FEAT_DotProd");
  const bool i8mm = has("hw.optional.arm.FEAT_I8MM");
#else
  const bool dotprod = false, i8mm = false;  // no way to ask here: the baseline kernels
#endif
  switch (level) {
    case Level::baseline: return {};
    case Level::dotprod: return {{"asimddp", dotprod}};
    case Level::i8mm: return {{"asimddp", dotprod}, {"i8mm", i8mm}};
  }
#endif
  return {{"x86-64", level == Level::baseline}};
}

// "baseline, avx2, avxvnni or avx512": the names KAPITSA_CPU_ISA takes.
std::string level_names() {
  std::string s;
  for (size_t i = 0; i < std::size(kLevels); ++i)
    s += (i == 0 ? "" : i + 1 == std::size(kLevels) ? " or " : ", ") + std::string(level_name(kLevels[i]));
  return s;
}

// A KAPITSA_CPU_ISA the process cannot honour ends it with a message: it is the person's setting, read
// once before any kernel runs, and running other kernels than asked would mislead a measurement.
[[noreturn]] void bad_setting(const std::string& message) {
  std::fprintf(stderr, "kapitsa: %s\n", message.c_str());
  std::exit(2);
}

Level level_from_env(Level best) {
  const char* env = std::getenv("KAPITSA_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  for (Level l : kLevels) {
    if (level_name(l) != env) continue;
    if (!level_compiled(l)) bad_setting(fmt::format("KAPITSA_CPU_ISA={}: this build has no {} kernels", env, env));
    if (const std::string missing = missing_features(l); !missing.empty())
      bad_setting(fmt::format("KAPITSA_CPU_ISA={}: this CPU lacks {}", env, missing));
    return l;
  }
  bad_setting(fmt::format("KAPITSA_CPU_ISA={}: no such level ({})", env, level_names()));
}

// Only for a level_compiled level (KAPITSA_CPU_BUILT_<level>: cpu.h).
BackendTable make_table(Level level, std::string_view name) {
#if KAPITSA_CPU_BUILT_avx512
  if (level == Level::avx512) return avx512::table(name);
#endif
#if KAPITSA_CPU_BUILT_avxvnni
  if (level == Level::avxvnni) return avxvnni::table(name);
#endif
#if KAPITSA_CPU_BUILT_avx2
  if (level == Level::avx2) return avx2::table(name);
#endif
#if KAPITSA_CPU_BUILT_i8mm
  if (level == Level::i8mm) return i8mm::table(name);
#endif
#if KAPITSA_CPU_BUILT_dotprod
  if (level == Level::dotprod) return dotprod::table(name);
#endif
  return baseline::table(name);
}

}  // namespace

std::string_view level_name(Level level) {
  switch (level) {
#if defined(__aarch64__)
    case Level::dotprod: return "dotprod";
    case Level::i8mm: return "i8mm";
#else
    case Level::avx2: return "avx2";
    case Level::avxvnni: return "avxvnni";
    case Level::avx512: return "avx512";
#endif
    default: return "baseline";
  }
}

bool level_compiled(Level level) {
  switch (level) {
#if defined(__aarch64__)
    case Level::dotprod: return KAPITSA_CPU_BUILT_dotprod != 0;
    case Level::i8mm: return KAPITSA_CPU_BUILT_i8mm != 0;
#elif defined(__x86_64__)
    case Level::avx2: return KAPITSA_CPU_BUILT_avx2 != 0;
    case Level::avxvnni: return KAPITSA_CPU_BUILT_avxvnni != 0;
    case Level::avx512: return KAPITSA_CPU_BUILT_avx512 != 0;
#endif
    case Level::baseline: return true;
    default: return false;  // another architecture: the baseline only
  }
}

std::string missing_features(Level level) {
  std::string missing;
#if defined(__aarch64__)
  // A chain here: each level needs the ones below it too.
  for (Level l : kLevels) {
    if (static_cast<int>(l) > static_cast<int>(level)) break;
    for (const Feature& f : needs(l))
      if (!f.present) missing += (missing.empty() ? "" : ", ") + std::string(f.name);
  }
#else
  for (const Feature& f : needs(level))
    if (!f.present) missing += (missing.empty() ? "" : ", ") + std::string(f.name);
#endif
  return missing;
}

Level best_level() {
  static const Level best = [] {
    Level b = Level::baseline;
    for (Level l : kLevels)
      if (level_compiled(l) && missing_features(l).empty()) b = l;
    return b;
  }();
  return best;
}

Level selected_level() {
  static const Level selected = level_from_env(best_level());
  return selected;
}

const BackendTable* backend_for(Level level) {
  // Only levels this CPU runs get a table: filling one runs that level's code (table() may use its
  // vector instructions to store the pointers).
  static const auto tables = [] {
    std::vector<std::optional<BackendTable>> t(std::size(kLevels));
    for (Level l : kLevels) {
      if (!level_compiled(l) || !missing_features(l).empty()) continue;
      // The names live as long as the tables ("cpu_" + level_name).
      static constexpr std::string_view kNames[] = {
#if defined(__aarch64__)
          "cpu_baseline", "cpu_dotprod", "cpu_i8mm"};
#else
          "cpu_baseline", "cpu_avx2", "cpu_avxvnni", "cpu_avx512"};
#endif
      const std::string_view name = l == selected_level() ? "cpu" : kNames[static_cast<size_t>(l)];
      t[static_cast<size_t>(l)] = make_table(l, name);
    }
    return t;
  }();
  const auto& t = tables[static_cast<size_t>(level)];
  return t ? &*t : nullptr;
}

const BackendTable* backend() { return backend_for(selected_level()); }

std::optional<Level> level_of(const BackendTable& table) {
  for (Level l : kLevels)
    if (backend_for(l) == &table) return l;
  return std::nullopt;
}

}  // namespace kapitsa::ops::cpu
