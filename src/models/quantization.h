// Quantization: what config.json says about quantized weights, as mlx-lm writes it —
//   "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
//                    "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 6},
//                    "model.layers.0.mlp.gate": false, ...}
// defaults for every quantized module plus per-module entries (a module path, i.e. a weight's name
// without ".weight", mapped to its own parameters or to false: kept unquantized). Whether a module is
// quantized is decided by the checkpoint (its "<module>.scales" tensor exists), as mlx-lm does; this
// says with which parameters. Modes: "affine" (codes, scales and biases), and the block-float modes
// "mxfp4", "nvfp4", "mxfp8" (codes and scales, no biases: models/block_float.h), per module as well
// (an entry without "mode" has the default's).
// NVIDIA ModelOpt NVFP4 is read from config.json's quantization_config (quant_method "modelopt",
// quant_algo "NVFP4") or, without one, from hf_quant_config.json next to config.json.
#pragma once

#include "base/status.h"
#include "weights/hf_config.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::models {

struct Quantization {
  struct Params {
    int bits = 0;
    int group_size = 0;
    std::string mode = "affine";
  };
  std::string where;                // "…/config.json: field 'quantization'" for errors
  std::optional<Params> defaults;   // absent: the config has no quantization section
  std::map<std::string, std::optional<Params>> modules;  // per-module entries; nullopt: false
  // FP8 E4M3 weights with scales (models/fp8_weights.h), from a "quantization_config" whose
  // quant_method is "fp8" (block-FP8: "weight_block_size"), "compressed-tensors" with 8-bit float
  // weights ("block_structure" for block scales) or "modelopt" with quant_algo "FP8". The scale
  // tensors' shapes say per tensor / per row / per block; `block` sizes the blocks.
  struct Fp8 {
    std::string method;
    std::array<int64_t, 2> block{128, 128};
  };
  std::optional<Fp8> fp8;
  // ModelOpt NVFP4 ("M.weight" U8 [N, K/2], "M.weight_scale" F8_E4M3 [N, K/16], "M.weight_scale_2" F32):
  // where the config came from, and its excluded modules (wildcards, fnmatch): a module matching one
  // must not be stored packed.
  struct Nvfp4 {
    std::string where;
    std::vector<std::string> exclude;
  };
  std::optional<Nvfp4> nvfp4;

  // Parameters of `module`: its own entry, else the defaults; an error when the config keeps it
  // unquantized or has no quantization at all (the checkpoint holds scales for it regardless).
  Expected<Params> params(const std::string& module) const;
};

// Reads "quantization" (else an mlx-lm "quantization_config": with "bits", without "quant_method") from the top level of a
// config.json, or an FP8 / NVFP4 "quantization_config" (above), or hf_quant_config.json beside a
// config.json that has neither; no section gives an empty Quantization. Bad values, unknown modes
// and other quant_methods (GPTQ, AWQ, ...) are errors naming the file and field.
Expected<Quantization> parse_quantization(const weights::HfConfig& top);

}  // namespace kapitsa::models
