// TokenEmitter: appends a run of chosen tokens to a sequence — one per step in plain decoding, several
// when a step accepts a run (speculative decoding) — and says whether the run ended the generation.
// Per token, in order: the grammar must accept it (else it and the rest of the run are dropped and the
// sequence goes on); it is kept (sampler penalties, tokens, timings); its text goes through the stop
// strings. EOS / a stop id, a stop string or max_tokens ends the generation at that token and drops the
// rest: the first stop wins. Bookkeeping only: the caller streams the events and finishes the sequence.
#pragma once

#include "runtime/sequence.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::runtime {

struct Emission {
  std::vector<TokenEvent> events;  // one per kept token, in order, with the text that may be shown now
  std::optional<Ending> ending;    // set: the generation ends after the last event
};

class TokenEmitter {
 public:
  // eos_token_ids: the model's; tokenizer: null for id-only engines (no text).
  TokenEmitter(std::vector<int32_t> eos_token_ids, const text::Tokenizer* tokenizer)
      : eos_(std::move(eos_token_ids)), tokenizer_(tokenizer) {}

  // run: the chosen ids with their logprobs (their text is ignored). Appends the kept ones to `seq`.
  Emission emit(Sequence& seq, std::span<const TokenEvent> run) const;
  // EOS (unless ignored) or one of the request's stop ids: ends the generation, its text never shown.
  bool is_stop_token(const Sequence& seq, int32_t id) const;

 private:
  std::vector<int32_t> eos_;
  const text::Tokenizer* tokenizer_;
};

}  // namespace kapitsa::runtime
