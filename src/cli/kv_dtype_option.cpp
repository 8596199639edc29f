// --kv-dtype parsing and the serve-time memory line (see kv_dtype_option.h).
#include "cli/kv_dtype_option.h"

#include "base/check.h"

#include <fmt/format.h>

namespace kapitsa::cli {
namespace {

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (bytes >= 1024 && u + 1 < std::size(units)) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace

CLI::Option* add_kv_dtype_option(CLI::App* cmd, std::string& value) {
  return cmd
      ->add_option("--kv-dtype", value,
                   fmt::format("Element type of the KV cache: f32, bf16 or f16 (default {})", value))
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
}

DType kv_dtype_from_name(const std::string& name) {
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  KAPITSA_CHECK(name == "f32", "--kv-dtype {}: f32, bf16 or f16 only", name);
  return DType::f32;
}

std::string kv_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    default: return "f32";
  }
}

std::string memory_summary(const runtime::EngineCounters& c, const runtime::EngineOptions& o) {
  return fmt::format("KV cache {}: {} per token, {} per sequence at {} tokens; recurrent state {} per sequence",
                     kv_dtype_name(o.kv_dtype), bytes_text(static_cast<double>(c.kv_bytes_per_token)),
                     bytes_text(static_cast<double>(c.kv_bytes_per_token) * static_cast<double>(o.context_tokens)),
                     o.context_tokens, bytes_text(static_cast<double>(c.state_bytes_per_sequence)));
}

}  // namespace kapitsa::cli
