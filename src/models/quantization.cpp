// Quantization: config.json's mlx-lm "quantization" section and FP8 quantization_config (see quantization.h).
#include "models/quantization.h"

#include "tensor/linear.h"

namespace kapitsa::models {
namespace {

Expected<Quantization::Params> read_params(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("bits") || !j.contains("group_size") || !j["bits"].is_number_integer() ||
      !j["group_size"].is_number_integer())
    return error("{}: expected {{\"group_size\": int, \"bits\": int}} or false, got {}", where, j.dump());
  Quantization::Params p{j["bits"].get<int>(), j["group_size"].get<int>()};
  if (!Linear::affine_supported(p.bits, p.group_size))
    return error("{}: {} bits with group size {} is not supported (bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)",
                 where, p.bits, p.group_size);
  return p;
}

// Two positive block sizes [rows, cols] from `j` (weight_block_size / block_structure).
Expected<std::array<int64_t, 2>> read_block(const Json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_integer() || !j[1].is_number_integer() || j[0].get<int64_t>() <= 0 ||
      j[1].get<int64_t>() <= 0)
    return error("{}: expected a block size [rows, cols], got {}", where, j.dump());
  return std::array<int64_t, 2>{j[0].get<int64_t>(), j[1].get<int64_t>()};
}

// The FP8 methods Kapitsa loads (nullopt: another method, reported by the caller).
Expected<std::optional<Quantization::Fp8>> read_fp8(const Json& qc, const std::string& where) {
  const std::string method = qc["quant_method"].is_string() ? qc["quant_method"].get<std::string>() : "";
  Quantization::Fp8 fp8{method, {128, 128}};
  if (method == "fp8") {  // block-FP8 releases: {"fmt": "e4m3", "weight_block_size": [128, 128]}
    if (qc.contains("fmt") && qc["fmt"] != "e4m3")
      return error("{}: FP8 format {} is not supported (only \"e4m3\")", where, qc["fmt"].dump());
    if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
      KAPITSA_TRY(fp8.block, read_block(qc["weight_block_size"], where + " weight_block_size"));
    }
    return std::optional(fp8);
  }
  if (method == "modelopt") {
    const Json& algo = qc.contains("quant_algo") ? qc["quant_algo"] : Json();
    if (algo == "FP8") return std::optional(fp8);
    return std::optional<Quantization::Fp8>();
  }
  if (method == "compressed-tensors" && qc.contains("config_groups") && qc["config_groups"].is_object() &&
      !qc["config_groups"].empty()) {
    for (const auto& [group, g] : qc["config_groups"].items()) {
      const Json w = g.is_object() && g.contains("weights") ? g["weights"] : Json();
      if (!w.is_object() || w.value("type", std::string()) != "float" || w.value("num_bits", 0) != 8)
        return std::optional<Quantization::Fp8>();  // int4/int8/NVFP4 groups: not loaded
      if (w.contains("block_structure") && !w["block_structure"].is_null()) {
        KAPITSA_TRY(fp8.block, read_block(w["block_structure"], where + " config_groups." + group + ".weights.block_structure"));
      }
    }
    return std::optional(fp8);
  }
  return std::optional<Quantization::Fp8>();
}

}  // namespace

Expected<Quantization::Params> Quantization::params(const std::string& module) const {
  if (auto it = modules.find(module); it != modules.end()) {
    if (!it->second) return error("{} keeps '{}' unquantized (false), but the checkpoint has '{}.scales'", where, module, module);
    return *it->second;
  }
  if (!defaults)
    return error("the checkpoint has '{}.scales' (a quantized weight), but config.json has no \"quantization\"", module);
  return *defaults;
}

Expected<Quantization> parse_quantization(const weights::HfConfig& top) {
  Quantization q;
  const Json& json = top.json();
  std::string key = "quantization";
  if (!json.contains(key) || json[key].is_null()) {
    key = "quantization_config";
    // mlx-lm writes both keys; a quant_method names another format (fp8, modelopt's NVFP4, GPTQ, AWQ,
    // compressed-tensors, bitsandbytes): say so instead of failing later on a tensor's dtype.
    if (json.contains(key) && json[key].is_object() && json[key].contains("quant_method")) {
      const Json& qc = json[key];  // modelopt names its algorithm (NVFP4, FP8) apart from the method
      if (auto fp8 = read_fp8(qc, top.where(key)); !fp8.ok()) return fp8.error();
      else if (*fp8) {
        q.where = top.where(key);
        q.fp8 = **fp8;
        return q;
      }
      const std::string algo = qc.contains("quant_algo") && qc["quant_algo"].is_string()
                                   ? " (" + qc["quant_algo"].get<std::string>() + ")" : std::string();
      return error("{}: the checkpoint is quantized with quant_method {}{}, which Kapitsa does not load yet; it loads "
                   "bf16/f16/f32 weights, FP8 E4M3, MLX affine quantization and Qwen3.5 GGUF files (docs/quantization.md)",
                   top.where(key), qc["quant_method"].dump(), algo);
    }
    if (!json.contains(key) || !json[key].is_object() || !json[key].contains("bits")) return q;
  }
  q.where = top.where(key);
  const Json& section = json[key];
  if (!section.is_object()) return error("{}: expected an object", q.where);
  if (section.contains("mode") && section["mode"] != "affine")
    return error("{}: quantization mode {} is not supported yet (only \"affine\")", q.where, section["mode"].dump());
  KAPITSA_TRY(q.defaults, read_params(section, q.where));
  for (const auto& [name, value] : section.items()) {
    if (name == "bits" || name == "group_size" || name == "mode") continue;
    if (value.is_boolean() && !value.get<bool>()) {
      q.modules[name] = std::nullopt;
    } else if (value.is_boolean()) {
      q.modules[name] = q.defaults;  // true: the defaults
    } else {
      KAPITSA_TRY(Quantization::Params p, read_params(value, q.where + " entry '" + name + "'"));
      q.modules[name] = p;
    }
  }
  return q;
}

}  // namespace kapitsa::models
