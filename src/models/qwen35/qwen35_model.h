// The Qwen3.5 family (Qwen3.5 dense and MoE, Qwen3-Next): pre-norm decoder layers, each a Gated
// DeltaNet or gated attention mixer followed by a SwiGLU MLP or a softmax MoE, zero-centred RMSNorms.
// Tensor names under model.language_model.* (VLM releases) or model.*; model.visual.* is recognised
// and left unused; mtp.* (the multi-token-prediction head) is loaded when present (Model::forward_mtp).
#pragma once

#include "models/model.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"

#include <memory>
#include <string>

namespace kapitsa::models::qwen35 {

Expected<std::unique_ptr<Model>> load(const weights::HfConfig& config, weights::Checkpoint checkpoint,
                                      const LoadOptions& options);

// Optional tensors present in released checkpoints: the model.language_model.* prefix and fused
// experts for qwen3_5*, model.* and per-expert tensors for qwen3_next.
bool release_layout(const std::string& model_type, const std::string& tensor_name);

}  // namespace kapitsa::models::qwen35
