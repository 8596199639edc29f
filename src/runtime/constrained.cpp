// GrammarConstraint and the per-tokenizer vocabulary cache (see constrained.h).
#include "runtime/constrained.h"

#include "base/check.h"
#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace kapitsa::runtime {

std::shared_ptr<const text::TokenVocabulary> token_vocabulary(const std::shared_ptr<const text::Tokenizer>& tokenizer) {
  KAPITSA_CHECK(tokenizer != nullptr, "constrained decoding needs a tokenizer");
  static std::mutex mu;
  // Keyed by address, checked through the weak pointer so a new tokenizer at a freed address is not
  // mistaken for the old one.
  static std::map<const text::Tokenizer*, std::pair<std::weak_ptr<const text::Tokenizer>, std::shared_ptr<const text::TokenVocabulary>>> cache;
  std::lock_guard lock(mu);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.first.expired() ? cache.erase(it) : std::next(it);
  auto it = cache.find(tokenizer.get());
  if (it != cache.end() && it->second.first.lock() == tokenizer) return it->second.second;
  auto vocab = std::make_shared<const text::TokenVocabulary>(*tokenizer);
  cache[tokenizer.get()] = {tokenizer, vocab};
  return vocab;
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const text::Grammar> grammar,
                                     std::shared_ptr<const text::TokenVocabulary> vocab, std::vector<int32_t> end_ids,
                                     int64_t vocab_size)
    : matcher_(std::move(grammar)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)), vocab_size_(vocab_size) {
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
}

std::span<const uint8_t> GrammarConstraint::mask() {
  matcher_.fill_mask(*vocab_, mask_, end_ids_);
  mask_.resize(static_cast<size_t>(vocab_size_), 0);  // model ids past the tokenizer: never allowed
  // Ids the model cannot produce (the tokenizer may be larger than the output head).
  bool any = false;
  for (int64_t i = 0; i < vocab_size_ && !any; ++i) any = mask_[static_cast<size_t>(i)] != 0;
  if (!any) return {};
  return std::span<const uint8_t>(mask_.data(), static_cast<size_t>(vocab_size_));
}

bool GrammarConstraint::try_accept(int32_t id) {
  if (id < 0 || id >= vocab_size_) return false;
  if (std::binary_search(end_ids_.begin(), end_ids_.end(), id)) return matcher_.can_end();
  return matcher_.accept_token(id, *vocab_);
}

}  // namespace kapitsa::runtime
