// Batch bookkeeping shared by forward_batch implementations.
#include "models/batch.h"

#include "ops/ops.h"

namespace kapitsa::models {

Expected<BatchLayout> layout_batch(std::span<const Model::BatchItem> items, int64_t vocab_size) {
  BatchLayout layout;
  if (items.empty()) return error("forward: an empty batch");
  for (const Model::BatchItem& item : items) {
    const int64_t n = static_cast<int64_t>(item.ids.size());
    if (item.state == nullptr || n == 0) return error("forward: an item has no state or no tokens");
    for (size_t i = 0; i < item.ids.size(); ++i)
      if (item.ids[i] < 0 || item.ids[i] >= vocab_size)
        return error("token id {} at index {} is outside the vocabulary [0, {})", item.ids[i], i, vocab_size);
    if (item.state->n_past() + n > item.state->capacity())
      return error("sequence of {} tokens exceeds this state's capacity of {} tokens", item.state->n_past() + n,
                   item.state->capacity());
    KAPITSA_CHECK(item.logits.rank() == 2 && item.logits.dim(1) == vocab_size &&
                      (item.logits.dim(0) == n || item.logits.dim(0) == 1),
                  "logits {} for {} tokens, V={}", item.logits.shape().str(), n, vocab_size);
    layout.begins.push_back(layout.total_tokens);
    layout.ids.insert(layout.ids.end(), item.ids.begin(), item.ids.end());
    layout.total_tokens += n;
    layout.logit_rows += item.logits.dim(0);
  }
  return layout;
}

void write_batch_logits(std::span<const Model::BatchItem> items, const BatchLayout& layout, const Tensor& normed,
                        const Tensor& head) {
  const int64_t H = normed.dim(1), V = head.dim(0);
  if (items.size() == 1) {
    const int64_t T = layout.total_tokens;
    ops::matmul(items[0].logits.dim(0) == 1 ? normed.rows(T - 1, T) : normed, head, items[0].logits);
    return;
  }
  std::vector<int32_t> rows;
  for (size_t j = 0; j < items.size(); ++j) {
    const int64_t n = static_cast<int64_t>(items[j].ids.size());
    for (int64_t r = items[j].logits.dim(0) == 1 ? n - 1 : 0; r < n; ++r)
      rows.push_back(static_cast<int32_t>(layout.begins[j] + r));
  }
  Buffer picked = Buffer::allocate(DType::f32, {layout.logit_rows, H});
  Buffer all_logits = Buffer::allocate(DType::f32, {layout.logit_rows, V});
  ops::gather_rows(normed, rows, picked);
  ops::matmul(picked, head, all_logits);
  int64_t at = 0;
  for (const Model::BatchItem& item : items) {
    ops::copy(all_logits.tensor().rows(at, at + item.logits.dim(0)), item.logits);
    at += item.logits.dim(0);
  }
}

}  // namespace kapitsa::models
