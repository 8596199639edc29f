// Batch bookkeeping shared by the architectures' forward_batch: validates every item before any state
// changes, lays all sequences' tokens side by side (so matrices are read once per step), and runs the
// output head once over the rows that asked for logits.
#pragma once

#include "models/model.h"

#include <cstdint>
#include <span>
#include <vector>

namespace kapitsa::models {

struct BatchLayout {
  std::vector<int32_t> ids;     // all items' tokens, concatenated
  std::vector<int64_t> begins;  // first row of each item
  int64_t total_tokens = 0;
  int64_t logit_rows = 0;       // rows of logits requested over all items
};

// Errors (nothing changed): no tokens or state, ids outside [0, vocab), more tokens than a state holds.
Expected<BatchLayout> layout_batch(std::span<const Model::BatchItem> items, int64_t vocab_size);

// logits of each item = head(normed rows it asked for).  normed: [total_tokens, H];  head: [V, H].
void write_batch_logits(std::span<const Model::BatchItem> items, const BatchLayout& layout, const Tensor& normed,
                        const Tensor& head);

}  // namespace kapitsa::models
