// What a catalog model needs in memory and how fast it can decode, from its shape and quantization:
// weights (params × bits / 8), recurrent state per sequence (Gated DeltaNet / Mamba-2, fp32), KV cache per
// token (bf16), the longest context that fits, and the roofline decode rate (bandwidth / bytes read per
// token, active weights only). Estimates for a person choosing a model, not an allocator's plan.
#pragma once

#include "cli/catalog/catalog.h"

namespace kapitsa::cli::catalog {

inline constexpr double kRuntimeOverheadBytes = 1024.0 * 1024 * 1024;  // activations, tokenizer, the process
inline constexpr long kMinUsefulContext = 4096;                         // "fits" means at least this much context

struct FitEstimate {
  double weight_bytes = 0;         // on disk and in memory
  double kv_bytes_per_token = 0;   // K and V of every attention layer
  double state_bytes = 0;          // recurrent state of one sequence
  bool fits = false;               // weights + state + overhead + kMinUsefulContext tokens of KV <= memory
  long max_context = 0;            // tokens of one sequence that fit (capped at the model's max_context)
  double decode_tokens_per_s = 0;  // bandwidth / active weight bytes
};

double kv_bytes_per_token(const ModelShape& s);
double recurrent_state_bytes(const ModelShape& s);
FitEstimate estimate_fit(const ModelEntry& model, const QuantEntry& quant, double memory_bytes, double bandwidth_bytes_per_s);

}  // namespace kapitsa::cli::catalog
