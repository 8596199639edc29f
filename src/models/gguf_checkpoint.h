// A GGUF model file (llama.cpp's format) presented as what the model loaders read: a config.json
// equivalent built from the GGUF metadata (models/gguf_config.h) and a Checkpoint under Hugging Face
// tensor names. The architectures as llama.cpp's converter (convert_hf_to_gguf.py) writes them:
// "qwen35" / "qwen35moe" (Qwen3.5), "qwen3next" (Qwen3-Next), "nemotron_h" / "nemotron_h_moe"
// (Nemotron-H). What the converter changed is undone or followed here:
//   - names: blk.N.attn_qkv → model.layers.N.linear_attn.in_proj_qkv, blk.N.ssm_in →
//     backbone.layers.N.mixer.in_proj, token_embd → embed_tokens / embeddings, …;
//   - Qwen3.5's GDN V heads: the converter reorders them from grouped-by-K-head to tiled order
//     (in_proj_qkv's V rows, in_proj_z / a / b rows, A_log, dt_bias, conv1d's V channels, out_proj's
//     columns); rows are put back in Hugging Face order in an owned copy; out_proj stays as stored (its
//     blocks may span two heads) and the config says so ("kapitsa_gguf_out_proj_tiled"): the layer
//     permutes out_proj's input heads instead (models/layers/gated_deltanet.h);
//   - Qwen3-Next's packed in_proj_qkvz is written as Qwen3.5's in_proj_qkv + in_proj_z (read as such);
//     its packed in_proj_ba is kept, and split here into in_proj_b and in_proj_a rows;
//   - A_log stored as -exp(A_log) (ssm_a): log(-a) is taken back; Mamba-2's D and grouped norm weight
//     stored [H, 1] / [groups, n]: read flat;
//   - Qwen's RMSNorm weights stored as 1 + w and conv1d as [C, K]: the conv is presented [C, K, 1] as
//     mlx-lm writes it, which tells the Qwen loader to use the norms as stored (as for mlx-lm folders);
//   - Nemotron-H's routed experts stacked [E, I, W]: presented as mlx-lm's switch_mlp.fc1 / fc2.
// Tensors needing none of this are used in place from the mapped file, in any block type; types the ops
// do not decode are an error naming the tensor when it is loaded.
#pragma once

#include "base/status.h"
#include "weights/gguf.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"

#include <memory>
#include <string>
#include <vector>

namespace kapitsa::models {

struct GgufCheckpoint {
  weights::HfConfig config;  // what config.json would say, from the metadata
  weights::Checkpoint checkpoint;
  std::vector<std::shared_ptr<weights::GgufFile>> parts;  // part 1 first; metadata is read from it
};

// Opens `path` (and its other parts for NAME-0000k-of-0000n.gguf). Errors name the file and the key or
// tensor: an architecture Kapitsa does not map, missing or mistyped metadata, missing tensors.
Expected<GgufCheckpoint> open_gguf_checkpoint(const std::string& path);

}  // namespace kapitsa::models
