// GrammarConstraint: constrained decoding for one sequence — the token mask before each sample and
// the matcher advanced by each sampled token. End-of-generation ids (EOS unless ignored, stop ids) are
// allowed exactly when the grammar can end, and are the only ones once it is complete.
// Not thread-safe (the engine thread owns it). The vocabulary is built once per tokenizer and shared.
#pragma once

#include "runtime/request.h"
#include "text/grammar/matcher.h"
#include "text/grammar/vocabulary.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::runtime {

// The token vocabulary of `tokenizer`, built on first use and cached while the tokenizer lives.
std::shared_ptr<const text::TokenVocabulary> token_vocabulary(const std::shared_ptr<const text::Tokenizer>& tokenizer);

class GrammarConstraint {
 public:
  // vocab_size: the model's (may exceed the tokenizer's: the extra ids are never allowed).
  GrammarConstraint(std::shared_ptr<const text::Grammar> grammar, std::shared_ptr<const text::TokenVocabulary> vocab,
                    std::vector<int32_t> end_ids, int64_t vocab_size);

  // The allowed tokens for the next step ([vocab_size]); empty when no token can continue.
  std::span<const uint8_t> mask();
  // Advances over `id` and returns true when the mask would have allowed it (an end id: when the
  // grammar can end; it ends the generation, so nothing advances); else false, nothing changed.
  bool try_accept(int32_t id);
  // The output is a complete sentence of the grammar and nothing may follow.
  bool complete() const { return matcher_.is_complete(); }
  bool has_end_ids() const { return !end_ids_.empty(); }

 private:
  text::GrammarMatcher matcher_;
  std::shared_ptr<const text::TokenVocabulary> vocab_;
  std::vector<int32_t> end_ids_;
  int64_t vocab_size_;
  std::vector<uint8_t> mask_;
};

}  // namespace kapitsa::runtime
