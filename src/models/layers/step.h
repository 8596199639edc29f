// StepBatch: the metadata of one forward step, built once per step by the decoder and read by every
// layer — the step's sequences as the batched ops see them (ops::SeqBatch: where each sequence's rows
// sit in the step's activations, its first position and KV block table, its recurrent-state slot and
// checkpoint slots), every row's position, and the pools the block tables and slots point into.
// Views only: it lives in the step's workspace. Layers make one op call per step for all sequences.
#pragma once

#include "models/kv_pages.h"
#include "models/state_slots.h"
#include "ops/seq_batch.h"

#include <cstdint>
#include <span>

namespace kapitsa::models {

struct StepBatch {
  int64_t n_tokens = 0;
  ops::SeqBatch seqs;                  // every sequence's rows, positions, block table, slots
  std::span<const int32_t> positions;  // [n_tokens]
  const KvPagePool* kv = nullptr;      // every sequence's KV pages
  const StateSlotPool* slots = nullptr;
};

}  // namespace kapitsa::models
