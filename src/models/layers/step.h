// StepBatch: the metadata of one forward step, built once per step by the decoder and read by every
// layer — where each sequence's rows sit in the step's activations, its positions, KV block table,
// recurrent-state slot and checkpoint slots. Views only: it lives in the step's workspace.
#pragma once

#include "models/kv_pages.h"
#include "models/state_slots.h"
#include "ops/ops.h"

#include <cstdint>
#include <span>

namespace kapitsa::models {

struct StepSequence {
  int64_t begin = 0;   // rows [begin, begin + length) of the step's activations
  int64_t length = 0;
  int64_t pos0 = 0;    // position of its first new token
  std::span<const int32_t> block_table;       // KV pages covering positions [0, pos0 + length)
  int32_t slot = -1;                          // its recurrent state in every recurrent layer
  std::span<const int32_t> checkpoint_slots;  // slot j ← state after token length - k + j + 1
};

struct StepBatch {
  int64_t n_tokens = 0;
  std::span<const StepSequence> sequences;
  std::span<const int32_t> positions;  // [n_tokens]
  const KvPagePool* kv = nullptr;      // every sequence's KV pages
  const StateSlotPool* slots = nullptr;
};

// Runs a recurrent op over one sequence's rows: run(first, n) on rows [first, first + n) of it — one
// call, or, when it checkpoints its last k tokens, the rows before them and then one token at a time,
// calling checkpoint(j) after token length - k + j.
template <typename Run, typename Checkpoint>
void run_with_checkpoints(const StepSequence& s, Run&& run, Checkpoint&& checkpoint) {
  const int64_t k = static_cast<int64_t>(s.checkpoint_slots.size());
  if (s.length > k) run(int64_t{0}, s.length - k);
  for (int64_t j = 0; j < k; ++j) {
    run(s.length - k + j, int64_t{1});
    checkpoint(static_cast<size_t>(j));
  }
}

// The causal conv of a recurrent layer for every sequence of the step, each continuing (and leaving)
// its window in its slot, checkpointing windows like the scan.
// x, y: [n_tokens, C];  w: [C, K] f32;  bias: [C] f32 or empty;  windows: [n_slots, K-1, C] (the pool's).
inline void conv_per_sequence(const StepBatch& step, const Tensor& windows, const Tensor& x, const Tensor& w,
                              const Tensor& bias, const Tensor& y) {
  for (const StepSequence& s : step.sequences) {
    const Tensor window = windows.index(s.slot);
    run_with_checkpoints(
        s,
        [&](int64_t first, int64_t n) {
          const int64_t r = s.begin + first;
          ops::conv1d_causal(x.rows(r, r + n), w, bias, window, /*silu=*/true, y.rows(r, r + n));
        },
        [&](size_t j) { ops::copy(window, windows.index(s.checkpoint_slots[j])); });
  }
}

}  // namespace kapitsa::models
