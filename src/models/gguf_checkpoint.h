// A GGUF model file (llama.cpp's format) presented as what the model loaders read: a config.json
// equivalent built from the GGUF metadata and a Checkpoint under Hugging Face tensor names. The
// architectures as llama.cpp's converter (convert_hf_to_gguf.py) writes them: "qwen35" (Qwen3.5 dense)
// and "qwen35moe" (Qwen3.5 MoE). What the converter changed is undone or followed here:
//   - names: blk.N.attn_qkv → model.layers.N.linear_attn.in_proj_qkv, token_embd → embed_tokens, …;
//   - GDN V heads: the converter reorders them from grouped-by-K-head to tiled order (in_proj_qkv's V
//     rows, in_proj_z / a / b rows, A_log, dt_bias, conv1d's V channels, out_proj's columns); rows are
//     put back in Hugging Face order in an owned copy; out_proj's columns are moved block by block when
//     a head is whole blocks, else that matrix is dequantized to f32;
//   - A_log stored as -exp(A_log) (ssm_a): log(-a) is taken back;
//   - RMSNorm weights stored as 1 + w and conv1d as [C, K]: the conv is presented [C, K, 1] as mlx-lm
//     writes it, which tells the Qwen loader to use the norms as stored (as for mlx-lm folders).
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
