// The Nemotron-H / Nemotron 3 family: every layer is one pre-norm residual sublayer
// h = x + Mixer(RMSNorm(x)) whose mixer is Mamba-2 (M), NoPE GQA attention (*), a relu² MLP (-) or a
// sigmoid-routed MoE (E, optionally LatentMoE); final norm_f and an untied lm_head. Tensor names under
// backbone.* (released checkpoints) or model.* (transformers' own), optionally behind language_model.;
// the Nemotron 3 multi-token-prediction head (mtp.layers.*, Model::forward_mtp) when the checkpoint has
// it and config.json gives its layers (mtp_hybrid_override_pattern).
#pragma once

#include "models/model.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"

#include <memory>
#include <string>

namespace kapitsa::models::nemotron_h {

Expected<std::unique_ptr<Model>> load(const weights::HfConfig& config, weights::Checkpoint checkpoint,
                                      const LoadOptions& options = {});

// Optional tensors present in released checkpoints: the backbone.* prefix, per-expert tensors and
// the router's e_score_correction_bias.
bool release_layout(const std::string& model_type, const std::string& tensor_name);

}  // namespace kapitsa::models::nemotron_h
