// PromptEncoder (see prompt_encoder.h).
#include "text/tokenizer/prompt_encoder.h"

#include "text/tokenizer/utf8.h"

#include <algorithm>

namespace kapitsa::text {

PromptEncoder::PromptEncoder(std::shared_ptr<const Tokenizer> tokenizer, size_t entries)
    : tokenizer_(std::move(tokenizer)), capacity_(std::max<size_t>(entries, 1)) {}

PromptEncoder::Encoded PromptEncoder::encode(std::string_view text) {
  Encoded out;
  if (!utf8_is_valid(text)) {  // repaired text: its offsets are not ours (rare; encoded whole, not kept)
    out.ids = tokenizer_->encode(text);
    return out;
  }
  // The remembered prompt whose reusable part is longest: its last split that ends inside the prefix
  // both texts share (the split's token matches in both, so the text before it encodes the same).
  std::shared_ptr<const Entry> base;
  const Tokenizer::Split* at = nullptr;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const Entry& e = **it;
      const size_t n = std::min(e.text.size(), text.size());
      const size_t common = static_cast<size_t>(std::mismatch(e.text.begin(), e.text.begin() + static_cast<std::ptrdiff_t>(n), text.begin()).first -
                                                e.text.begin());
      auto split = std::upper_bound(e.splits.begin(), e.splits.end(), common,
                                    [](size_t c, const Tokenizer::Split& s) { return c < s.end; });
      if (split == e.splits.begin()) continue;
      const Tokenizer::Split* last = &*(split - 1);
      if (at == nullptr || last->index > at->index) {
        at = last;
        base = *it;
      }
    }
    if (base) entries_.splice(entries_.begin(), entries_, std::find(entries_.begin(), entries_.end(), base));
  }
  size_t from = 0;
  if (base) {
    from = at->start;
    out.ids.assign(base->ids.begin(), base->ids.begin() + static_cast<std::ptrdiff_t>(at->index));
    out.splits.assign(base->splits.begin(), base->splits.begin() + (at - base->splits.data()));
    out.reused_ids = at->index;
  }
  std::vector<Tokenizer::Split> tail_splits;
  const std::vector<int32_t> tail = tokenizer_->encode(text.substr(from), {}, &tail_splits);
  for (Tokenizer::Split s : tail_splits) out.splits.push_back({s.start + from, s.end + from, s.index + out.ids.size()});
  out.ids.insert(out.ids.end(), tail.begin(), tail.end());

  auto entry = std::make_shared<Entry>();
  entry->text.assign(text);
  entry->ids = out.ids;
  entry->splits = out.splits;
  std::lock_guard lock(mu_);
  entries_.push_front(std::move(entry));
  while (entries_.size() > capacity_) entries_.pop_back();
  return out;
}

}  // namespace kapitsa::text
