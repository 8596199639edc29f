// SeqBatch: how the batched, variable-length ops see a step's sequences. A view built once per step by
// the model (all spans are host memory the caller keeps alive during the call); not owning.
// Sequences lie side by side in the rows of the activations: sequence i owns rows
// [row_offsets[i], row_offsets[i+1]). Recurrent ops: its state lives in slot state_slots[i] of a slot
// array ([n_slots, ...], in/out). Optional checkpoints: for the last n_i = ckpt_offsets[i+1] -
// ckpt_offsets[i] tokens of sequence i, the state after each of them is also written into slot
// ckpt_slots[ckpt_offsets[i] + j] (j = 0 … n_i - 1; the last one equals the final state). Attention
// ops: sequence i's first row sits at position positions0[i] (the keys before it are already cached)
// and its block table is block_tables[block_offsets[i] … block_offsets[i+1]).
// Invariants (checked by ops.cpp): row_offsets starts at 0, never decreases and ends at the rows of
// the activations; slots are in range and no slot is written twice in one call.
#pragma once

#include <cstdint>
#include <span>

namespace kapitsa::ops {

struct SeqBatch {
  std::span<const int64_t> row_offsets;  // [n_seqs + 1]
  // recurrent layers
  std::span<const int32_t> state_slots;   // [n_seqs]
  std::span<const int32_t> ckpt_offsets;  // [n_seqs + 1], or empty: no checkpoints
  std::span<const int32_t> ckpt_slots;    // [ckpt_offsets[n_seqs]]
  // attention layers
  std::span<const int64_t> positions0;     // [n_seqs]
  std::span<const int32_t> block_offsets;  // [n_seqs + 1]
  std::span<const int32_t> block_tables;   // [block_offsets[n_seqs]] page ids

  int64_t n_seqs() const { return row_offsets.empty() ? 0 : static_cast<int64_t>(row_offsets.size()) - 1; }
  int64_t rows(int64_t i) const { return row_offsets[size_t(i + 1)] - row_offsets[size_t(i)]; }
  int64_t n_ckpts(int64_t i) const {
    return ckpt_offsets.empty() ? 0 : ckpt_offsets[size_t(i + 1)] - ckpt_offsets[size_t(i)];
  }
  // Checkpoint j of sequence i.
  int32_t ckpt_slot(int64_t i, int64_t j) const { return ckpt_slots[size_t(ckpt_offsets[size_t(i)] + j)]; }
  std::span<const int32_t> block_table(int64_t i) const {
    return block_tables.subspan(size_t(block_offsets[size_t(i)]),
                                size_t(block_offsets[size_t(i + 1)] - block_offsets[size_t(i)]));
  }
};

}  // namespace kapitsa::ops
