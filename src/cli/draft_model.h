// --draft DIR for `kapitsa run`, `chat` and `serve`: loads a draft model for speculative decoding
// (runtime/draft_proposer.h) after checking that it reads and writes the same tokens as the target —
// the same id → token string for every id of either tokenizer, the same special tokens — since its
// guesses are token ids the target verifies.
#pragma once

#include "base/status.h"
#include "runtime/engine.h"
#include "runtime/proposer.h"

#include <memory>
#include <string>

namespace kapitsa::cli {

// OK when the tokenizers in both folders map every id to the same token; otherwise an error naming
// the draft folder and the first id that differs.
Status check_same_tokenizer(const std::string& draft_dir, const std::string& target_dir);

// The draft proposer for `draft_dir` (checked against `target_dir`), with the engine's context and KV
// element type, its model on `device` (the target's: on a GPU, a draft on the cpu would cost more a
// guess than the target's own step).
Expected<std::shared_ptr<runtime::Proposer>> load_draft_proposer(const std::string& draft_dir, const std::string& target_dir,
                                                                 const runtime::EngineOptions& options, Device device);

}  // namespace kapitsa::cli
