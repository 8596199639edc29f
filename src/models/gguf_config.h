// GGUF metadata → what a Hugging Face config.json would say, per architecture as llama.cpp's converter
// (convert_hf_to_gguf.py) writes it: "qwen35" / "qwen35moe" (Qwen3.5), "qwen3next" (Qwen3-Next),
// "nemotron_h" / "nemotron_h_moe" (Nemotron-H). Layer kinds and sizes the converter leaves out of the
// metadata come from which tensors each block has.
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "weights/gguf.h"

#include <map>
#include <string>

namespace kapitsa::models {

// The GDN head geometry the tensor mapping needs (Qwen families).
struct GgufGdnHeads {
  int64_t k_heads = 0, v_per_k = 1, k_dim = 0, v_dim = 0;
  bool tiled = false;  // V heads written in tiled order (Qwen3.5; Qwen3-Next keeps Hugging Face order)
  bool reordered() const { return tiled && v_per_k > 1; }
  // HF V head h = k·v_per_k + j sits at GGUF position j·k_heads + k (tiled order).
  int64_t gguf_head(int64_t h) const { return (h % v_per_k) * k_heads + h / v_per_k; }
};

enum class GgufFamily { qwen35, qwen3next, nemotron_h };

struct GgufModelConfig {
  GgufFamily family = GgufFamily::qwen35;
  Json json;           // config.json equivalent
  GgufGdnHeads heads;  // Qwen families only
  // The converter appends a multi-token-prediction head as the last block(s) ("{arch}.nextn_predict_layers"
  // of block_count): blocks [0, trunk_layers) are the model, the rest the head (gguf_checkpoint.cpp).
  int64_t trunk_layers = 0, mtp_layers = 0;
};

// `tensors`: every tensor of every part by GGUF name. Errors name the file and the key or tensor.
Expected<GgufModelConfig> gguf_model_config(const weights::GgufFile& meta, const std::string& arch,
                                            const std::map<std::string, const weights::GgufTensor*>& tensors);

}  // namespace kapitsa::models
