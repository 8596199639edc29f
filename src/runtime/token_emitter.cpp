// A run of tokens into a sequence: grammar, stop ids, stop strings, max_tokens (see token_emitter.h).
#include "runtime/token_emitter.h"

#include "text/tokenizer/tokenizer.h"

#include <algorithm>

namespace kapitsa::runtime {

bool TokenEmitter::is_stop_token(const Sequence& seq, int32_t id) const {
  const auto& stop_ids = seq.request.stop_token_ids;
  return (!seq.request.ignore_eos && std::find(eos_.begin(), eos_.end(), id) != eos_.end()) ||
         std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

Emission TokenEmitter::emit(Sequence& seq, std::span<const TokenEvent> run) const {
  Emission out;
  for (const TokenEvent& chosen : run) {
    const int32_t id = chosen.id;
    if (seq.constraint && !seq.constraint->try_accept(id)) break;  // outside the grammar: it and the rest go
    TokenEvent& event = out.events.emplace_back(chosen);
    event.text.clear();
    seq.sampler.accept(id);
    seq.tokens.push_back(id);
    ++seq.generated;
    const Clock::time_point now = Clock::now();
    if (seq.generated == 1) seq.first_token = now;
    seq.last_token = now;
    if (is_stop_token(seq, id)) {
      // The stop token's own text is never shown; what was held back for stop strings is.
      event.text = seq.text.flush();
      const auto& stop_ids = seq.request.stop_token_ids;
      std::string matched;
      if (tokenizer_ && std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end())
        matched = tokenizer_->decode(std::span<const int32_t>(&id, 1));
      out.ending = Ending{FinishReason::stop, std::move(matched), ""};
      return out;
    }
    StopMatcher::Result r = seq.text.push(id);
    event.text = std::move(r.text);
    if (r.stopped) {
      out.ending = Ending{FinishReason::stop, std::move(r.matched), ""};
      return out;
    }
    if (seq.generated >= seq.max_new) {
      event.text += seq.text.flush();
      out.ending = Ending{FinishReason::length, "", ""};
      return out;
    }
  }
  return out;
}

}  // namespace kapitsa::runtime
