// Test helper: writes a copy of a Hugging Face checkpoint folder as mlx-lm saves it after its
// `sanitize` step — the layout of mlx-community folders. The rules, read in mlx-lm's
// models/qwen3_5.py, qwen3_5_moe.py, qwen3_next.py and nemotron_h.py (not copied; restated here):
//   - Qwen3.5 (qwen3_5, qwen3_5_moe): the vision tower is dropped; "model.language_model." becomes
//     "language_model.model.", every other name gets a "language_model." prefix; fused experts
//     "experts.gate_up_proj" [E, 2I, H] are split into "switch_mlp.gate_proj.weight" (rows [0, I)) and
//     "switch_mlp.up_proj.weight", "experts.down_proj" becomes "switch_mlp.down_proj.weight";
//   - Qwen3-Next: per-expert "experts.{e}.{gate,up,down}_proj.weight" stacked into
//     "switch_mlp.{gate,up,down}_proj.weight" [E, …];
//   - Nemotron-H: per-expert "experts.{e}.up_proj" / "down_proj" stacked into "switch_mlp.fc1" / "fc2";
//   - all: "mtp.*" dropped; a tied head's "lm_head.weight" dropped; conv1d weights [C, 1, K] stored as
//     [C, K, 1]; Qwen's zero-centred RMSNorm weights (input/post-attention layernorms, the final norm,
//     q/k norms; 1-D) stored as 1 + w, rounded to the tensor's dtype (bf16 stays bf16, as in MLX) —
//     or, with norms_f32, widened to f32 first, so that 1 + w is exact and the folder holds exactly the
//     Hugging Face folder's values (what the exactness tests compare).
// Quantize the result with write_affine_checkpoint for a folder like `mlx_lm.convert -q` writes.
#pragma once

#include "affine_checkpoint.h"
#include "base/json.h"
#include "base/status.h"
#include "tensor/tensor.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace kapitsa::testing {

namespace mlx_lm_detail {

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Rows [begin, end) of every expert of a [E, R, C] tensor, as a new [E, end - begin, C] buffer.
inline Buffer expert_rows(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t E = t.dim(0), R = t.dim(1), C = t.dim(2);
  const size_t elem = dtype_size(t.dtype()), row = static_cast<size_t>(C) * elem;
  Buffer out = Buffer::allocate(t.dtype(), {E, end - begin, C});
  for (int64_t e = 0; e < E; ++e)
    std::memcpy(static_cast<char*>(out.tensor().data()) + static_cast<size_t>(e * (end - begin)) * row,
                static_cast<const char*>(t.data()) + static_cast<size_t>(e * R + begin) * row,
                static_cast<size_t>(end - begin) * row);
  return out;
}

// [E, N, K] from E tensors [N, K] of one dtype.
inline Buffer stack(const std::vector<Tensor>& parts) {
  const Tensor& first = parts.front();
  Buffer out = Buffer::allocate(first.dtype(), {static_cast<int64_t>(parts.size()), first.dim(0), first.dim(1)});
  for (size_t e = 0; e < parts.size(); ++e)
    std::memcpy(static_cast<char*>(out.tensor().data()) + e * first.nbytes(), parts[e].data(), first.nbytes());
  return out;
}

// 1 + w in w's dtype (bf16 or f32), or in f32.
inline Buffer plus_one(const Tensor& w, bool f32) {
  Buffer out = Buffer::allocate(f32 ? DType::f32 : w.dtype(), w.shape());
  std::vector<float> v(static_cast<size_t>(w.numel()));
  weights::convert_to_f32(w, v.data());
  for (size_t i = 0; i < v.size(); ++i) {
    if (out.tensor().dtype() == DType::bf16) out.tensor().data_as<uint16_t>()[i] = f32_to_bf16(v[i] + 1.0f);
    else out.tensor().data_as<float>()[i] = v[i] + 1.0f;
  }
  return out;
}

}  // namespace mlx_lm_detail

// Writes OUT/model.safetensors and OUT/config.json (unchanged) from the checkpoint folder SRC.
inline Status write_mlx_lm_layout(const std::string& src, const std::string& out, bool norms_f32 = false) {
  namespace fs = std::filesystem;
  using namespace mlx_lm_detail;
  KAPITSA_TRY(weights::Checkpoint ckpt, weights::Checkpoint::open(src));
  KAPITSA_TRY(Json config, read_json_file((fs::path(src) / "config.json").string()));
  const std::string model_type = config.value("model_type", "");
  const bool qwen35 = model_type == "qwen3_5" || model_type == "qwen3_5_moe";
  const bool nemotron = model_type == "nemotron_h";
  const Json& text = config.contains("text_config") ? config["text_config"] : config;
  const bool tied = text.value("tie_word_embeddings", config.value("tie_word_embeddings", false));

  std::map<std::string, Tensor> in;  // renamed, not yet restacked
  for (const std::string& name : ckpt.names()) {
    if (name.find("visual") != std::string::npos || name.rfind("mtp.", 0) == 0) continue;
    KAPITSA_TRY(Tensor t, ckpt.get_any_shape(name));
    std::string renamed = name;
    if (qwen35) {
      if (name.rfind("model.language_model.", 0) == 0) renamed = "language_model.model." + name.substr(21);
      else renamed = "language_model." + name;
    }
    in[renamed] = t;
  }
  if (tied) in.erase(qwen35 ? "language_model.lm_head.weight" : "lm_head.weight");

  std::vector<Buffer> keep;  // owns new data until written
  std::vector<weights::NamedTensor> tensors;
  auto add = [&](const std::string& name, Buffer b) {
    keep.push_back(std::move(b));
    tensors.push_back({name, keep.back().tensor()});
  };
  keep.reserve(in.size() + 64);
  const std::regex per_expert(R"((.*)\.experts\.(\d+)\.(\w+)_proj\.weight)");
  std::map<std::string, std::vector<Tensor>> to_stack;  // "prefix|proj" → experts in order
  const bool has_hf_conv = [&] {
    for (const auto& [name, t] : in)
      if (ends_with(name, "conv1d.weight") && t.dim(-1) != 1) return true;
    return false;
  }();
  for (const auto& [name, t] : in) {
    std::smatch m;
    if (std::regex_match(name, m, per_expert)) {
      auto& experts = to_stack[m[1].str() + "|" + m[3].str()];
      const size_t e = std::stoul(m[2].str());
      if (experts.size() <= e) experts.resize(e + 1);
      experts[e] = t;
    } else if (ends_with(name, ".experts.gate_up_proj")) {
      const std::string prefix = name.substr(0, name.size() - 21);
      const int64_t I = t.dim(1) / 2;
      add(prefix + ".switch_mlp.gate_proj.weight", expert_rows(t, 0, I));
      add(prefix + ".switch_mlp.up_proj.weight", expert_rows(t, I, 2 * I));
    } else if (ends_with(name, ".experts.down_proj")) {
      add(name.substr(0, name.size() - 18) + ".switch_mlp.down_proj.weight", Buffer::copy_of(t));
    } else if (ends_with(name, "conv1d.weight") && t.dim(-1) != 1) {
      tensors.push_back({name, t.reshape({t.dim(0), t.dim(2), 1})});  // moveaxis(2, 1): same order of values
    } else if (!nemotron && has_hf_conv && t.rank() == 1 &&
               (ends_with(name, ".input_layernorm.weight") || ends_with(name, ".post_attention_layernorm.weight") ||
                ends_with(name, "model.norm.weight") || ends_with(name, ".q_norm.weight") ||
                ends_with(name, ".k_norm.weight"))) {
      add(name, plus_one(t, norms_f32));
    } else {
      tensors.push_back({name, t});
    }
  }
  for (const auto& [key, experts] : to_stack) {
    const std::string prefix = key.substr(0, key.find('|')), proj = key.substr(key.find('|') + 1);
    const std::string stacked = nemotron ? (proj == "up" ? "fc1" : "fc2") : proj + "_proj";
    add(prefix + ".switch_mlp." + stacked + ".weight", stack(experts));
  }
  return write_checkpoint_folder(out, tensors, config);
}

}  // namespace kapitsa::testing
