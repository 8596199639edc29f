// Internal to HybridDecoder's files (hybrid_decoder.cpp: forward and the trunk; hybrid_mtp.cpp: the
// MTP head's steps; hybrid_chain.cpp: chained greedy steps): what their steps share — the checks of a
// batch, the ids span, and the keys of steps captured as CUDA graphs.
#pragma once

#include "models/layers/moe.h"
#include "models/layers/step.h"
#include "models/model.h"
#include "ops/ops.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kapitsa::models::hybrid {

// A step's start on the model's device, for the step's lifetime: the workspace (checked to be on that
// device) begun, and the device's backend current (a model on the GPU runs on its backend whatever the
// thread's).
class StepOnDevice {
 public:
  StepOnDevice(Device device, Workspace& ws) {
    KAPITSA_CHECK(ws.device() == device, "a workspace on another device than the model");
    if (device != Device::cpu) backend_.emplace(ops::backend_for(device));
    ws.begin_step();
  }

 private:
  std::optional<ops::ScopedBackend> backend_;
};

// Errors a caller can cause (nothing changed then); shape contracts are checks.
inline Status validate(const ForwardBatch& batch, const ForwardOutputs& outputs, const ModelInfo& info) {
  if (batch.sequences.empty()) return error("forward: an empty batch");
  const ForwardBatch::Sequence& first = batch.sequences.front();
  for (const ForwardBatch::Sequence& s : batch.sequences) {
    const int64_t n = static_cast<int64_t>(s.ids.size());
    if (s.state == nullptr || n == 0) return error("forward: a sequence has no state or no tokens");
    for (size_t i = 0; i < s.ids.size(); ++i)
      if (s.ids[i] < 0 || s.ids[i] >= info.vocab_size)
        return error("token id {} at index {} is outside the vocabulary [0, {})", s.ids[i], i, info.vocab_size);
    if (s.state->n_past() + n > s.state->capacity())
      return error("sequence of {} tokens exceeds this state's capacity of {} tokens", s.state->n_past() + n,
                   s.state->capacity());
    if (first.state != nullptr && (s.state->kv_pool() != first.state->kv_pool() || s.state->slot_pool() != first.state->slot_pool()))
      return error("forward: the sequences of one step must share their KV page pool and state slot pool");
  }
  auto check_rows = [&](const ForwardOutputs::Rows& r, int64_t width, const char* what, DType dtype = DType::f32) {
    KAPITSA_CHECK(r.sequence < batch.sequences.size(), "{} rows of sequence {} of {}", what, r.sequence,
                  batch.sequences.size());
    const int64_t n = static_cast<int64_t>(batch.sequences[r.sequence].ids.size());
    for (int32_t row : r.rows) KAPITSA_CHECK(row >= 0 && row < n, "{} row {} of {} new tokens", what, row, n);
    KAPITSA_CHECK(r.out.shape() == Shape({static_cast<int64_t>(r.rows.size()), width}) && r.out.dtype() == dtype,
                  "{} out {} for {} rows of width {}", what, r.out.shape().str(), r.rows.size(), width);
  };
  for (const auto& r : outputs.logits) check_rows(r, info.vocab_size, "logits");
  for (const auto& r : outputs.argmax) check_rows(r, 1, "argmax", DType::i32);
  for (const auto& r : outputs.hidden) check_rows(r, info.hidden_size, "hidden");
  if (!outputs.all_layers.empty()) {
    const int64_t T = static_cast<int64_t>(first.ids.size());
    KAPITSA_CHECK(batch.sequences.size() == 1 &&
                      outputs.all_layers.shape() == Shape({info.n_layers + 1, T, info.hidden_size}),
                  "all-layers hidden {} for {} sequences", outputs.all_layers.shape().str(), batch.sequences.size());
  }
  for (const auto& c : outputs.checkpoints) {
    KAPITSA_CHECK(c.sequence < batch.sequences.size(), "checkpoints of sequence {}", c.sequence);
    const SequenceState& state = *batch.sequences[c.sequence].state;
    KAPITSA_CHECK(c.slots.size() <= batch.sequences[c.sequence].ids.size(), "{} checkpoints for {} tokens",
                  c.slots.size(), batch.sequences[c.sequence].ids.size());
    for (int32_t slot : c.slots)
      KAPITSA_CHECK(state.slot_pool() != nullptr && slot >= 0 && slot != state.state_slot(), "checkpoint slot {}", slot);
  }
  return ok_status();
}

// The step's ids, sequence after sequence: the first span of the step's host range (mirrored to the
// device with the metadata taken after it).
inline std::span<int32_t> take_ids(const ForwardBatch& batch, Workspace& ws) {
  size_t n_ids = 0;
  for (const auto& s : batch.sequences) n_ids += s.ids.size();
  std::span<int32_t> ids = ws.take_span<int32_t>(n_ids);
  n_ids = 0;
  for (const auto& s : batch.sequences) {
    std::copy(s.ids.begin(), s.ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(n_ids));
    n_ids += s.ids.size();
  }
  return ids;
}

// The most rows a step may have and still be captured as a graph. Up to 16: dense matmuls of 2+ rows
// run in cuBLAS (its own fixed workspace), and routed MoE layers keep the router's choices on the
// device up to kDeviceRoutedMaxTokens (16) — beyond, they wait for them on the host, which a graph
// cannot repeat.
constexpr size_t kMaxGraphTokens = static_cast<size_t>(kDeviceRoutedMaxTokens);

// Tags that keep keys of other steps apart from plain decode's (whose first element is a token count).
constexpr uint64_t kVerifyStep = uint64_t{1} << 40, kMtpStep = uint64_t{2} << 40, kChainStep = uint64_t{3} << 40;

// What a few-row step's captured ops bake in beyond run_as_graph's shared part:
// - every sequence's row count: the sizes of the step's host spans (the mirror's layout), and launch
//   shapes decided on the host from them (the conv's longest sequence; the fused decode op of the GDN
//   layers when every sequence has one row);
// - every sequence's checkpoint count, and whether checkpoints were given at all: the checkpoint spans
//   sit before the block tables in the mirror, and the scans write checkpoints only when given them;
// - whether the head's logits are computed (its matmul is one of the ops), and their argmax.
// What changes between two steps of one key (ids, positions, block tables, state and checkpoint slot
// ids) is read from the mirrored metadata. Hidden rows are copied out of `normed` after the step.
inline std::vector<uint64_t> few_rows_key(uint64_t tag, const StepBatch& step, bool logits, bool argmax = false) {
  const ops::SeqBatch& seqs = step.seqs;
  const bool ckpts = !seqs.ckpt_offsets.empty();
  std::vector<uint64_t> key = {tag, static_cast<uint64_t>(seqs.n_seqs()), ckpts, logits, argmax};
  for (size_t i = 0; i < static_cast<size_t>(seqs.n_seqs()); ++i) {
    key.push_back(static_cast<uint64_t>(seqs.rows(static_cast<int64_t>(i))));
    key.push_back(ckpts ? static_cast<uint64_t>(seqs.ckpt_offsets[i + 1] - seqs.ckpt_offsets[i]) : 0);
  }
  return key;
}

}  // namespace kapitsa::models::hybrid
