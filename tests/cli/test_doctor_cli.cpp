// `kapitsa doctor --json` end to end: it runs, and every section has sane values (a measured bandwidth
// above zero, at least one core, memory, a row per catalog model × quantization with consistent numbers,
// the four agents, the port; whether Kapitsa runs each format); the text report names its sections and
// the formats it does not run yet.
#include "base/json.h"
#include "models/cli_runner.h"
#include "ops/cpu/cpu.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>

namespace kapitsa::testing {
namespace {

TEST(DoctorCli, JsonHasEverySectionWithSaneValues) {
  const CommandResult r = run_kapitsa("doctor --json --seconds 0.2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto parsed = parse_json_lenient(r.output, "doctor --json");
  ASSERT_TRUE(parsed.ok()) << r.output;
  const Json& j = parsed.value();
  EXPECT_FALSE(j["cpu"]["model"].get<std::string>().empty());
  EXPECT_GE(j["cpu"]["logical_cores"].get<int>(), 1);
  EXPECT_GE(j["cpu"]["usable_cores"].get<int>(), 1);
  EXPECT_LE(j["cpu"]["usable_cores"].get<int>(), j["cpu"]["logical_cores"].get<int>());
  EXPECT_TRUE(j["cpu"]["features"].is_array());
  EXPECT_EQ(j["cpu"]["kernels"], ops::cpu::level_name(ops::cpu::best_level()));
  EXPECT_EQ(j["cpu"]["amx"], KAPITSA_CPU_AT(ops::cpu::best_level(), amx_status)());
  EXPECT_EQ(j["cpu"]["amx_int8"], KAPITSA_CPU_AT(ops::cpu::best_level(), amx_int8_status)());
  EXPECT_GT(j["memory"]["total_bytes"].get<double>(), 0);
  EXPECT_LE(j["memory"]["available_bytes"].get<double>(), j["memory"]["total_bytes"].get<double>());
  EXPECT_GT(j["bandwidth"]["read_bytes_per_s"].get<double>(), 1e8);  // any machine reads 100 MB/s
  EXPECT_LT(j["bandwidth"]["read_bytes_per_s"].get<double>(), 1e14);
  EXPECT_TRUE(j["gpu"]["cuda_backend_built"].is_boolean());
  EXPECT_GT(j["disk"]["total_bytes"].get<double>(), 0);
  ASSERT_TRUE(j["models"].is_array());
  ASSERT_GE(j["models"].size(), 5u);
  for (const Json& m : j["models"]) {
    EXPECT_GT(m["weight_bytes"].get<double>(), 1e8) << m.dump();
    EXPECT_GT(m["decode_tokens_per_s"].get<double>(), 0) << m.dump();
    EXPECT_GE(m["max_context"].get<long>(), 0) << m.dump();
    ASSERT_TRUE(m["runs"].is_boolean()) << m.dump();
    EXPECT_EQ(m["runs"].get<bool>(), m["unsupported"].get<std::string>().empty()) << m.dump();
    if (m["fits"].get<bool>()) {
      EXPECT_GE(m["max_context"].get<long>(), 4096) << m.dump();
    }
  }
  bool nvfp4_listed = false;  // the shipped catalog's NVFP4 entry, which Kapitsa does not load yet
  for (const Json& m : j["models"])
    if (m["spec"] == "nemotron-30b:nvfp4") {
      nvfp4_listed = true;
      EXPECT_FALSE(m["runs"].get<bool>()) << m.dump();
    }
  EXPECT_TRUE(nvfp4_listed);
  ASSERT_EQ(j["agents"].size(), 4u);
  for (const Json& a : j["agents"])
    EXPECT_EQ(a["installed"].get<bool>(), !a["path"].get<std::string>().empty()) << a.dump();
  EXPECT_EQ(j["port"]["port"].get<int>(), 8080);
  EXPECT_TRUE(j["port"]["free"].is_boolean());
  EXPECT_TRUE(j["warnings"].is_array());
}

// KAPITSA_CPU_ISA picks a lower level of the cpu kernels; a level the CPU lacks, or no such level, is an
// error that says so.
TEST(DoctorCli, CpuIsaEnvironmentPicksALowerLevel) {
  const CommandResult base = run_kapitsa("--version", "KAPITSA_CPU_ISA=baseline");
  EXPECT_EQ(base.exit_code, 0) << base.output;
  EXPECT_NE(base.output.find("(cpu kernels: baseline)"), std::string::npos) << base.output;
  const CommandResult best = run_kapitsa("--version");
  EXPECT_NE(best.output.find(fmt::format("(cpu kernels: {})", ops::cpu::level_name(ops::cpu::best_level()))),
            std::string::npos) << best.output;
  const CommandResult bad = run_kapitsa("--version", "KAPITSA_CPU_ISA=avx9000");
  EXPECT_NE(bad.exit_code, 0);
#if defined(__aarch64__)
  const char* names = "baseline, dotprod or i8mm";
#else
  const char* names = "baseline, avx2, avxvnni or avx512";
#endif
  EXPECT_NE(bad.output.find(fmt::format("KAPITSA_CPU_ISA=avx9000: no such level ({})", names)), std::string::npos)
      << bad.output;
  const ops::cpu::Level top = std::end(ops::cpu::kLevels)[-1];
  if (ops::cpu::best_level() != top) {
    const std::string top_name(ops::cpu::level_name(top));
    const CommandResult high = run_kapitsa("--version", "KAPITSA_CPU_ISA=" + top_name);
    EXPECT_NE(high.exit_code, 0);
    EXPECT_NE(high.output.find("KAPITSA_CPU_ISA=" + top_name + ": this CPU lacks"), std::string::npos) << high.output;
  }
}

TEST(DoctorCli, TextReportNamesItsSections) {
  const CommandResult r = run_kapitsa("doctor --seconds 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"CPU", "Memory", "Bandwidth", "GPU", "Disk", "Models", "27b:4bit", "Agents", "Port 8080", "runs",
                        "not yet", "Not run by Kapitsa yet", "nemotron-30b:nvfp4: NVFP4"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
}

}  // namespace
}  // namespace kapitsa::testing
