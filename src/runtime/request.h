// GenerateRequest and the events a generation produces: the contract between the runtime (which
// schedules and runs generations) and its clients (server endpoints, CLI). Knows no HTTP, no JSON
// and no chat format: prompts arrive as token ids, already rendered and tokenized by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::text {
class Grammar;
}

namespace kapitsa::runtime {

struct SamplingParams {
  float temperature = 1.0f;  // 0 → greedy
  int top_k = 0;             // 0 → off
  float top_p = 1.0f;        // 1 → off
  float min_p = 0.0f;        // 0 → off
  float repetition_penalty = 1.0f;  // 1 → off (divides positive / multiplies negative logits of seen tokens)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;
  // Same seed + same request → same draws. The tokens are the same too while the logits are: a step
  // that batches many rows may sum in another order (docs/decisions.md, batch composition).
  std::optional<uint64_t> seed;
};

struct GenerateRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  int max_tokens = 256;                 // completion budget (the engine also clamps to the context)
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  std::vector<std::string> stop_strings;  // matched on decoded text, across token boundaries
  bool ignore_eos = false;
  int top_logprobs = -1;  // -1: no logprobs; 0: the chosen token's; n: also the n best alternatives
  // Prefix-cache hints: the end of the rendered conversation before the generation prompt (a turn
  // boundary worth snapshotting), and a session key keeping one conversation's cache together.
  std::optional<size_t> turn_boundary;
  std::string cache_key;
  // The ids that close this assistant turn in the next rendered conversation, after the reply's
  // content (e.g. the ids of "<|im_end|>\n" for Qwen's template). When given, the engine folds them
  // after the reply while it is idle and snapshots the result, so the next turn prefills only what is
  // new. A final stop token (EOS or a stop id) is not content: the ids follow the tokens before it.
  std::vector<int32_t> end_of_turn_ids;
  // Constrained decoding: when set, every sampled token keeps the output inside this grammar (see
  // text/grammar/); end-of-generation is allowed exactly when the grammar can end, and is forced once
  // it is complete. A dead end finishes with FinishReason::error.
  std::shared_ptr<const text::Grammar> grammar;
};

enum class FinishReason { stop, length, cancelled, error };

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One generated token. `text` is the newly decodable UTF-8 (may be empty while a character is
// incomplete, and never contains a matched stop string).
struct TokenEvent {
  int32_t id = 0;
  std::string text;
  float logprob = 0;                 // when requested
  std::vector<TokenLogprob> top;     // when requested
};

struct GenerationStats {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // reused from the prefix cache, not recomputed
  int completion_tokens = 0;
  double time_to_first_token_s = 0;
  double decode_tokens_per_s = 0;
  int draft_tokens = 0;           // speculative decoding: tokens proposed
  int draft_tokens_accepted = 0;  // of them, kept (the model chose the same token)
  int draft_steps = 0;            // steps that verified a draft
};

struct FinishEvent {
  FinishReason reason = FinishReason::stop;
  std::string matched_stop;  // the stop string or the text of the stop token that ended it, if any
  std::string error;         // for FinishReason::error
  GenerationStats stats;
};

}  // namespace kapitsa::runtime
