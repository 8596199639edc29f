// Proposer's default batch and NgramProposer: prompt lookup over the sequence's own tokens (see proposer.h).
#include "runtime/proposer.h"

#include "base/check.h"

#include <algorithm>

namespace kapitsa::runtime {

NgramProposer::NgramProposer(int min_ngram, int max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  KAPITSA_CHECK(min_ngram >= 1 && max_ngram >= min_ngram, "n-gram sizes {}..{}", min_ngram, max_ngram);
}

void Proposer::propose_batch(std::span<const DraftRequest> requests) {
  for (const DraftRequest& r : requests) {
    propose(r.tokens, r.max_tokens, *r.out);
    if (r.q != nullptr) r.q->clear();
  }
}

void NgramProposer::propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const int64_t L = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (int64_t n = std::min<int64_t>(max_ngram_, L - 1); n >= min_ngram_; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(L - n));
    // The most recent earlier occurrence: it starts at i < L - n, and tokens follow it.
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(L, from + max_tokens);
      out.assign(tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

}  // namespace kapitsa::runtime
