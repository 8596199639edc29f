// Test helper: writes an MLX-affine-quantized copy of a checkpoint folder — every matrix the models
// load through WeightLoader::linear (rank-2 "*.weight" but norms, fused 3-D experts, mlx-lm's stacked
// "switch_mlp" experts) whose input
// width is a multiple of the group size becomes codes ("<name>", U32), "<module>.scales" and
// "<module>.biases" (bf16), and config.json gets mlx-lm's "quantization" section. The quantizer is the
// usual min/max one (scale = (max − min) / (2^bits − 1), bias = min, q = round((w − bias) / scale)),
// written here from the format's definition; only what a loader must read back matters.
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "tensor/tensor.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::testing {

struct AffineRecipe {
  int bits = 8;
  int group_size = 32;
  // module path → its own (bits, group size), or nullopt: left dense and written as false
  std::map<std::string, std::optional<std::pair<int, int>>> modules;
};

struct AffineTensors {
  Buffer codes;   // u32 [.., N, K·bits/32]
  Buffer scales;  // bf16 [.., N, K/group]
  Buffer biases;  // bf16 [.., N, K/group]
};

// w: [.., N, K] float (K a multiple of group_size, group_size of 32).
inline AffineTensors quantize_affine(const Tensor& w, int bits, int group_size) {
  const int64_t K = w.dim(-1), rows = w.numel() / K, G = K / group_size;
  std::vector<float> v(static_cast<size_t>(w.numel()));
  weights::convert_to_f32(w, v.data());
  Shape codes_shape = w.shape(), group_shape = w.shape();
  codes_shape.dims[static_cast<size_t>(codes_shape.rank - 1)] = K * bits / 32;
  group_shape.dims[static_cast<size_t>(group_shape.rank - 1)] = G;
  AffineTensors a{Buffer::zeros(DType::u32, codes_shape), Buffer::allocate(DType::bf16, group_shape),
                  Buffer::allocate(DType::bf16, group_shape)};
  auto* codes = a.codes.tensor().data_as<uint32_t>();
  auto* scales = a.scales.tensor().data_as<uint16_t>();
  auto* biases = a.biases.tensor().data_as<uint16_t>();
  const float qmax = static_cast<float>((1 << bits) - 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = v.data() + r * K + g * group_size;
      const auto [lo, hi] = std::minmax_element(x, x + group_size);
      const uint16_t s16 = f32_to_bf16((*hi - *lo) / qmax), b16 = f32_to_bf16(*lo);
      scales[r * G + g] = s16, biases[r * G + g] = b16;
      const float s = bf16_to_f32(s16), b = bf16_to_f32(b16);
      for (int64_t i = 0; i < group_size; ++i) {
        const float q = s == 0 ? 0.0f : std::clamp(std::nearbyint((x[i] - b) / s), 0.0f, qmax);
        const int64_t k = g * group_size + i;
        for (int bit = 0; bit < bits; ++bit)  // code k: row bits [k·bits, (k+1)·bits), little-endian
          if ((static_cast<uint32_t>(q) >> bit) & 1u) {
            const int64_t at = r * K * bits + k * bits + bit;
            codes[at / 32] |= 1u << (at % 32);
          }
      }
    }
  return a;
}

// OUT/model.safetensors from `tensors` and OUT/config.json from `config` (OUT created if missing).
inline Status write_checkpoint_folder(const std::string& out, const std::vector<weights::NamedTensor>& tensors,
                                      const Json& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out, ec);
  KAPITSA_RETURN_IF_ERROR(weights::write_safetensors((fs::path(out) / "model.safetensors").string(), tensors));
  std::ofstream(fs::path(out) / "config.json") << config.dump(2) << "\n";
  return ok_status();
}

// Edits the tensor list and config.json before they are written (for error tests).
using AffineEdit = std::function<void(std::vector<weights::NamedTensor>&, Json& config)>;

// Writes OUT/model.safetensors and OUT/config.json from the checkpoint folder SRC.
inline Status write_affine_checkpoint(const std::string& src, const std::string& out, const AffineRecipe& recipe,
                                      const AffineEdit& edit = {}) {
  namespace fs = std::filesystem;
  KAPITSA_TRY(weights::Checkpoint ckpt, weights::Checkpoint::open(src));
  KAPITSA_TRY(Json config, read_json_file((fs::path(src) / "config.json").string()));
  std::vector<weights::NamedTensor> tensors;
  std::vector<AffineTensors> keep;  // owns the quantized data until written
  keep.reserve(ckpt.names().size());
  for (const std::string& name : ckpt.names()) {
    auto got = ckpt.get_any_shape(name, {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3});
    if (!got.ok()) continue;  // rank > 4 (vision tower patch embeddings): not read by the language model
    const Tensor t = *got;
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    const std::string module = is_weight ? name.substr(0, name.size() - 7) : name;
    const bool matrix = (is_weight && t.rank() == 2 && name.find("norm") == std::string::npos) ||
                        (t.rank() == 3 && name.find("experts.") != std::string::npos && !is_weight) ||
                        (t.rank() == 3 && name.find(".switch_mlp.") != std::string::npos);  // mlx-lm stacks
    int bits = recipe.bits, gs = recipe.group_size;
    bool quantize = matrix && name.find("visual") == std::string::npos;  // the MTP head too
    if (auto it = recipe.modules.find(module); it != recipe.modules.end()) {
      if (it->second) bits = it->second->first, gs = it->second->second;
      else quantize = false;
    }
    if (!quantize || t.dim(-1) % gs != 0) {
      tensors.push_back({name, t});
      continue;
    }
    keep.push_back(quantize_affine(t, bits, gs));
    tensors.push_back({name, keep.back().codes});
    tensors.push_back({module + ".scales", keep.back().scales});
    tensors.push_back({module + ".biases", keep.back().biases});
  }
  Json q = {{"group_size", recipe.group_size}, {"bits", recipe.bits}};
  for (const auto& [module, params] : recipe.modules)
    q[module] = params ? Json{{"group_size", params->second}, {"bits", params->first}} : Json(false);
  config["quantization"] = q;
  config["quantization_config"] = q;
  if (edit) edit(tensors, config);
  return write_checkpoint_folder(out, tensors, config);
}

}  // namespace kapitsa::testing
