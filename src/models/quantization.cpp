// Quantization: config.json's mlx-lm "quantization" section and FP8 quantization_config (see quantization.h).
#include "models/quantization.h"

#include "models/block_float.h"
#include "tensor/linear.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace kapitsa::models {
namespace {

// One module's (or the default) parameters; `mode` is the entry's own "mode", else `inherited`.
Expected<Quantization::Params> read_params(const Json& j, const std::string& where, const std::string& inherited) {
  if (!j.is_object() || !j.contains("bits") || !j.contains("group_size") || !j["bits"].is_number_integer() ||
      !j["group_size"].is_number_integer())
    return error("{}: expected {{\"group_size\": int, \"bits\": int}} or false, got {}", where, j.dump());
  Quantization::Params p{j["bits"].get<int>(), j["group_size"].get<int>(), inherited};
  if (j.contains("mode")) {
    if (!j["mode"].is_string()) return error("{}: \"mode\" must be a string, got {}", where, j["mode"].dump());
    p.mode = j["mode"].get<std::string>();
  }
  if (p.mode == "affine") {
    if (!Linear::affine_supported(p.bits, p.group_size))
      return error("{}: {} bits with group size {} is not supported (bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)",
                   where, p.bits, p.group_size);
    return p;
  }
  const auto f = block_float_from_mode(p.mode);
  if (!f)
    return error("{}: quantization mode \"{}\" is not supported (affine, mxfp4, nvfp4, mxfp8)", where, p.mode);
  const BlockFloatInfo info = block_float_info(*f);
  if (p.bits != info.bits || p.group_size != info.group)
    return error("{}: mode \"{}\" has {} bits and group size {}, got {} bits and group size {}", where, p.mode, info.bits,
                 info.group, p.bits, p.group_size);
  return p;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
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

// ModelOpt NVFP4 (nullopt: another method or algorithm). qc: {"quant_method": "modelopt", "quant_algo":
// "NVFP4" (ModelOpt may write it in lower case; W4A16_NVFP4 stores the same weights), "group_size": 16,
// "ignore" (config.json) or "exclude_modules" (hf_quant_config.json): module wildcards left unquantized}.
Expected<std::optional<Quantization::Nvfp4>> read_nvfp4(const Json& qc, const std::string& where) {
  const std::string method = qc["quant_method"].is_string() ? qc["quant_method"].get<std::string>() : "";
  const std::string algo = qc.contains("quant_algo") && qc["quant_algo"].is_string() ? upper(qc["quant_algo"].get<std::string>()) : "";
  if (method != "modelopt" || (algo != "NVFP4" && algo != "W4A16_NVFP4")) return std::optional<Quantization::Nvfp4>();
  if (qc.contains("group_size") && !qc["group_size"].is_null() && qc["group_size"] != 16)
    return error("{}: NVFP4 group_size {} is not supported (16)", where, qc["group_size"].dump());
  Quantization::Nvfp4 nv{where, {}};
  for (const char* key : {"ignore", "exclude_modules"}) {
    if (!qc.contains(key) || qc[key].is_null()) continue;
    if (!qc[key].is_array()) return error("{} {}: expected a list of module names, got {}", where, key, qc[key].dump());
    for (const Json& m : qc[key]) {
      if (!m.is_string()) return error("{} {}: expected a list of module names, got {}", where, key, m.dump());
      nv.exclude.push_back(m.get<std::string>());
    }
  }
  return std::optional(nv);
}

// A quantization_config with a quant_method (config.json's, or hf_quant_config.json's turned into one).
Expected<Quantization> read_quant_method(const Json& qc, const std::string& where) {
  Quantization q;
  q.where = where;
  if (auto fp8 = read_fp8(qc, where); !fp8.ok()) return fp8.error();
  else if (*fp8) {
    q.fp8 = **fp8;
    return q;
  }
  if (auto nv = read_nvfp4(qc, where); !nv.ok()) return nv.error();
  else if (*nv) {
    q.nvfp4 = **nv;
    return q;
  }
  const std::string algo = qc.contains("quant_algo") && qc["quant_algo"].is_string()
                               ? " (" + qc["quant_algo"].get<std::string>() + ")" : std::string();
  return error("{}: the checkpoint is quantized with quant_method {}{}, which Kapitsa does not load yet; it loads "
               "bf16/f16/f32 weights, FP8 E4M3, NVFP4 (ModelOpt), MLX affine / mxfp4 / nvfp4 / mxfp8 quantization and "
               "Qwen3.5 GGUF files (docs/quantization.md)",
               where, qc["quant_method"].dump(), algo);
}

// ModelOpt's hf_quant_config.json beside `config_path` ({"producer": ..., "quantization": {"quant_algo",
// "group_size", "exclude_modules", ...}}), as a quantization_config; nullopt when there is none.
Expected<std::optional<Json>> read_hf_quant_config(const std::string& config_path, std::string* where) {
  const std::filesystem::path cfg(config_path);
  if (cfg.filename() != "config.json") return std::optional<Json>();
  const std::string path = (cfg.parent_path() / "hf_quant_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<Json>();
  KAPITSA_TRY(Json j, read_json_file(path));
  *where = path + ": field 'quantization'";
  if (!j.is_object() || !j.contains("quantization") || !j["quantization"].is_object())
    return error("{} is missing or not an object", *where);
  Json qc = j["quantization"];
  qc["quant_method"] = "modelopt";
  return std::optional(qc);
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
    // mlx-lm writes both keys; a quant_method names another format (fp8, modelopt's FP8 / NVFP4, GPTQ,
    // AWQ, compressed-tensors, bitsandbytes): read it or say so instead of failing later on a tensor's dtype.
    if (json.contains(key) && json[key].is_object() && json[key].contains("quant_method"))
      return read_quant_method(json[key], top.where(key));
    if (!json.contains(key) || !json[key].is_object() || !json[key].contains("bits")) {
      std::string where;
      KAPITSA_TRY(const std::optional<Json> modelopt, read_hf_quant_config(top.path(), &where));
      if (modelopt) return read_quant_method(*modelopt, where);
      return q;
    }
  }
  q.where = top.where(key);
  const Json& section = json[key];
  if (!section.is_object()) return error("{}: expected an object", q.where);
  KAPITSA_TRY(q.defaults, read_params(section, q.where, "affine"));
  for (const auto& [name, value] : section.items()) {
    if (name == "bits" || name == "group_size" || name == "mode") continue;
    if (value.is_boolean() && !value.get<bool>()) {
      q.modules[name] = std::nullopt;
    } else if (value.is_boolean()) {
      q.modules[name] = q.defaults;  // true: the defaults
    } else {
      KAPITSA_TRY(Quantization::Params p, read_params(value, q.where + " entry '" + name + "'", q.defaults->mode));
      q.modules[name] = p;
    }
  }
  return q;
}

}  // namespace kapitsa::models
