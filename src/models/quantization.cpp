// Quantization: config.json's mlx-lm "quantization" section (see quantization.h).
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
      const std::string algo = qc.contains("quant_algo") && qc["quant_algo"].is_string()
                                   ? " (" + qc["quant_algo"].get<std::string>() + ")" : std::string();
      return error("{}: the checkpoint is quantized with quant_method {}{}, which Kapitsa does not load yet; it loads "
                   "bf16/f16/f32 weights, MLX affine quantization and Qwen3.5 GGUF files (docs/quantization.md)",
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
