// HybridDecoder::forward_greedy_chain: a draft model's k greedy steps in one call, on a GPU one graph
// (see model.h and docs/speculative-decoding.md, "The draft model's steps chained on the device").
#include "models/hybrid_decoder.h"
#include "models/hybrid_state.h"
#include "models/hybrid_steps.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>

namespace kapitsa::models {
using namespace hybrid;

// One workspace step holds every step of the chain: step 0's ids, the guesses G ([steps, n]: step j's
// argmax writes G[j], which step j + 1 embeds as its ids), each step's metadata, then one block table
// for all of them (KV pages are taken for the whole chain first). Mirrored once; the steps' ops run back
// to back, as one graph when every step is small enough, and the guesses come back in one copy.
Status HybridDecoder::forward_greedy_chain(const ForwardBatch& batch, int steps, int64_t columns,
                                           std::span<const std::span<const int32_t>> checkpoint_slots,
                                           std::span<int32_t> guesses, ForwardContext& ctx) const {
  const size_t n = batch.sequences.size();
  const int64_t H = info_.hidden_size, V = info_.vocab_size;
  KAPITSA_CHECK(steps >= 1 && columns >= 1 && columns <= V && guesses.size() == n * static_cast<size_t>(steps),
                "forward_greedy_chain: {} steps, {} columns of {}, {} guesses for {} sequences", steps, columns, V,
                guesses.size(), n);
  KAPITSA_CHECK(checkpoint_slots.empty() || checkpoint_slots.size() == n, "forward_greedy_chain: checkpoints of {} sequences",
                checkpoint_slots.size());
  for (const auto& slots : checkpoint_slots)
    KAPITSA_CHECK(slots.size() == static_cast<size_t>(steps - 1), "forward_greedy_chain: {} checkpoints for {} steps",
                  slots.size(), steps);
  KAPITSA_RETURN_IF_ERROR(validate(batch, ForwardOutputs{}, info_));
  // The whole chain's tokens (placeholders): room in every state, and KV pages taken for all of them.
  std::vector<std::vector<int32_t>> placeholders(n);
  std::vector<ForwardBatch::Sequence> whole(n);
  for (size_t i = 0; i < n; ++i) {
    placeholders[i].assign(batch.sequences[i].ids.size() + static_cast<size_t>(steps) - 1, 0);
    whole[i] = {placeholders[i], batch.sequences[i].state};
  }
  KAPITSA_RETURN_IF_ERROR(validate(ForwardBatch{whole}, ForwardOutputs{}, info_));
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages(whole));

  Workspace& ws = ctx.workspace;
  const StepOnDevice on_device(device_, ws);
  const std::span<int32_t> ids0 = take_ids(batch, ws);
  std::span<int32_t> G = ws.take_span<int32_t>(n * static_cast<size_t>(steps));
  std::fill(G.begin(), G.end(), 0);  // valid ids on the host (the embedding checks them there)
  std::span<int32_t> last_rows = ws.take_span<int32_t>(n);  // step 0's row of each sequence's guess
  std::vector<StepBatch> chain;
  // Every step's few_rows_key (rows and checkpoints) and attention bucket are appended below.
  std::vector<uint64_t> key = {kChainStep, static_cast<uint64_t>(steps), static_cast<uint64_t>(columns)};
  bool small = ops::spec_step_graphs_enabled(device_);
  std::vector<ForwardBatch::Sequence> rows(n);
  std::vector<ForwardOutputs::Checkpoints> checkpoints;
  std::vector<int64_t> positions0(n);
  for (int j = 0; j < steps; ++j) {
    for (size_t i = 0; j > 0 && i < n; ++i) {
      const ForwardBatch::Sequence& s = batch.sequences[i];
      rows[i] = {G.subspan((static_cast<size_t>(j) - 1) * n + i, 1), s.state};
      positions0[i] = s.state->n_past() + static_cast<int64_t>(s.ids.size()) + j - 1;
    }
    checkpoints.clear();
    if (j + 1 < steps)
      for (size_t i = 0; i < checkpoint_slots.size(); ++i) checkpoints.push_back({i, checkpoint_slots[i].subspan(static_cast<size_t>(j), 1)});
    ForwardOutputs outputs;
    outputs.checkpoints = checkpoints;
    KAPITSA_TRY(StepBatch step, j == 0 ? build_step(batch, outputs, ws, {}, false)
                                       : build_step(ForwardBatch{rows}, outputs, ws, positions0, false));
    const std::vector<uint64_t> part = few_rows_key(0, step, true);
    key.insert(key.end(), part.begin(), part.end());
    small = small && static_cast<size_t>(step.n_tokens) <= kMaxGraphTokens;
    chain.push_back(std::move(step));
  }
  const std::span<int32_t> tables = take_block_tables(batch, ws);
  for (StepBatch& step : chain) {
    step.seqs.block_tables = tables;
    int64_t max_keys = 0;  // each step's split-K bucket (run_as_graph adds the last step's)
    for (int64_t i = 0; i < step.seqs.n_seqs(); ++i)
      max_keys = std::max(max_keys, step.seqs.positions0[static_cast<size_t>(i)] + step.seqs.rows(i));
    key.push_back(static_cast<uint64_t>(ops::attention_key_bucket(max_keys)));
  }
  for (size_t i = 0; i < n; ++i) last_rows[i] = static_cast<int32_t>(chain[0].seqs.row_offsets[i + 1] - 1);
  const int64_t T0 = chain[0].n_tokens;
  const Tensor x = ws.take(DType::f32, {T0, H}), normed = ws.take(DType::f32, {T0, H}), mixed = ws.take(DType::f32, {T0, H});
  // The head as forward computes it, so that the guesses are the ones `steps` forwards give: over every
  // row of a small step (its few-rows path), else over the picked rows.
  const Tensor picked = ws.take(DType::f32, {static_cast<int64_t>(n), H});
  const Tensor logits = ws.take(DType::f32, {static_cast<int64_t>(n), V});
  const Tensor all_logits = small && T0 != static_cast<int64_t>(n) ? ws.take(DType::f32, {T0, V}) : Tensor();
  // The first step of a larger shape overflows the workspace's host block: nothing is mirrored then, each
  // op copies its spans, and each step's guesses come back through the host (a wait a step) before the
  // next step copies them as its ids.
  const bool on_host = device_ != Device::cpu && ws.host_taken().empty();
  const Tensor guess_scratch = on_host ? ws.take(DType::i32, {static_cast<int64_t>(n)}) : Tensor();
  const MirroredMetadata mirrored(device_, ws);

  const auto body = [&] {
    for (int j = 0; j < steps; ++j) {
      const StepBatch& step = chain[static_cast<size_t>(j)];
      const int64_t T = step.n_tokens;
      const std::span<const int32_t> ids = j == 0 ? std::span<const int32_t>(ids0) : G.subspan((static_cast<size_t>(j) - 1) * n, n);
      trunk(step, ids, x.rows(0, T), normed.rows(0, T), mixed.rows(0, T), Tensor(), Tensor(), ctx);
      if (T == static_cast<int64_t>(n)) {
        ops::matmul(normed.rows(0, T), head_, logits);
      } else if (!all_logits.empty()) {
        ops::matmul(normed.rows(0, T), head_, all_logits);
        ops::gather_rows(all_logits, last_rows, logits);
      } else {
        ops::gather_rows(normed.rows(0, T), last_rows, picked);
        ops::matmul(picked, head_, logits);
      }
      const std::span<int32_t> guess = G.subspan(static_cast<size_t>(j) * n, n);
      if (!on_host) {
        ops::argmax_rows(logits, columns, ops::step_metadata_tensor(device_, guess));
        continue;
      }
      ops::argmax_rows(logits, columns, guess_scratch);
      ops::copy_bytes(Tensor(DType::i32, {static_cast<int64_t>(n)}, guess.data()), guess_scratch);
    }
  };
  if (!(small && run_as_graph(key, ops::StepKind::greedy_chain, chain.back(), ws, body))) body();
  std::vector<int32_t> by_step(G.begin(), G.end());
  if (device_ != Device::cpu && !on_host)  // (waits: the chain's one sync)
    ops::copy_bytes(by_step.data(), Device::cpu, ops::step_metadata_tensor(device_, G).data(), device_, G.size_bytes());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < static_cast<size_t>(steps); ++j) guesses[i * static_cast<size_t>(steps) + j] = by_step[j * n + i];
  for (const auto& s : batch.sequences)
    static_cast<HybridState&>(*s.state).advance(static_cast<int64_t>(s.ids.size()) + steps - 1);
  return ok_status();
}

}  // namespace kapitsa::models
