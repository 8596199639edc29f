// HybridDecoder::forward_mtp_greedy_chain: the MTP head's k greedy steps in one call, on a GPU one graph
// (see model.h, and hybrid_chain.cpp, whose draft-model chain this mirrors for the head).
#include "models/hybrid_decoder.h"
#include "models/hybrid_state.h"
#include "models/hybrid_steps.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>
#include <numeric>

namespace kapitsa::models {
using namespace hybrid;

// One workspace step holds every step of the chain: step 0's ids, the guesses G ([steps, n]: step j's
// argmax writes G[j], which step j + 1 embeds as its ids), each step's metadata, then one block table for
// all of them (the head's KV pages are taken for the whole chain first). Step j + 1's hidden rows are
// step j's output rows of each sequence's last row, gathered on the device. Mirrored once; the guesses
// come back in one copy.
Status HybridDecoder::forward_mtp_greedy_chain(std::span<const MtpRows> sequences, int steps,
                                               std::span<int32_t> guesses, ForwardContext& ctx) const {
  if (info_.mtp_layers == 0)
    return error("{} has no multi-token-prediction head (no mtp.* tensors loaded)", info_.model_type);
  const size_t n = sequences.size();
  const int64_t H = info_.hidden_size, V = info_.vocab_size;
  if (n == 0) return error("forward_mtp_greedy_chain: no sequences");
  KAPITSA_CHECK(steps >= 1 && guesses.size() == n * static_cast<size_t>(steps),
                "forward_mtp_greedy_chain: {} steps, {} guesses for {} sequences", steps, guesses.size(), n);
  std::vector<ForwardBatch::Sequence> batch_seqs;
  std::vector<int64_t> positions0;
  std::vector<std::vector<int32_t>> ahead_ids;
  std::vector<ForwardBatch::Sequence> ahead;
  for (const MtpRows& s : sequences) {
    const int64_t rows = static_cast<int64_t>(s.ids.size()), last = s.position0 + rows + steps - 1;
    if (s.state == nullptr || rows == 0) return error("forward_mtp_greedy_chain: a sequence has no state or no tokens");
    for (size_t i = 0; i < s.ids.size(); ++i)
      if (s.ids[i] < 0 || s.ids[i] >= V)
        return error("forward_mtp_greedy_chain: token id {} at index {} is outside [0, {})", s.ids[i], i, V);
    if (s.position0 < 0 || last > s.state->capacity())
      return error("forward_mtp_greedy_chain: rows at positions [{}, {}) for a state of {} tokens (capacity {})",
                   s.position0, last, s.state->n_past(), s.state->capacity());
    KAPITSA_CHECK(s.hidden.shape() == Shape({rows, H}) && s.hidden.dtype() == DType::f32,
                  "forward_mtp_greedy_chain hidden {}", s.hidden.shape().str());
    if (s.state->kv_pool() != sequences.front().state->kv_pool())
      return error("forward_mtp_greedy_chain: the sequences must share their KV page pool");
    batch_seqs.push_back({s.ids, s.state});
    positions0.push_back(s.position0);
    if (last > s.state->n_past()) ahead_ids.emplace_back(static_cast<size_t>(last - s.state->n_past()), 0);
  }
  // KV pages for every position past n_past the chain writes, as the next forward over them would take.
  for (size_t i = 0, a = 0; i < n; ++i) {
    const MtpRows& s = sequences[i];
    if (s.position0 + static_cast<int64_t>(s.ids.size()) + steps - 1 > s.state->n_past())
      ahead.push_back({ahead_ids[a++], s.state});
  }
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages(ahead));

  Workspace& ws = ctx.workspace;
  const StepOnDevice on_device(device_, ws);
  const ForwardBatch batch{batch_seqs};
  const std::span<int32_t> ids0 = take_ids(batch, ws);
  std::span<int32_t> G = ws.take_span<int32_t>(n * static_cast<size_t>(steps));
  std::fill(G.begin(), G.end(), 0);  // valid ids on the host (the embedding checks them there)
  std::span<int32_t> last_rows = ws.take_span<int32_t>(n);  // step 0's last row of each sequence
  std::span<int32_t> each_row = ws.take_span<int32_t>(n);   // 0 … n − 1: a later step's rows
  std::iota(each_row.begin(), each_row.end(), 0);
  std::vector<StepBatch> chain;
  std::vector<uint64_t> key = {kMtpChainStep, static_cast<uint64_t>(steps)};
  bool small = ops::spec_step_graphs_enabled(device_);
  std::vector<ForwardBatch::Sequence> rows(n);
  std::vector<int64_t> positions(n);
  for (int j = 0; j < steps; ++j) {
    for (size_t i = 0; j > 0 && i < n; ++i) {
      const MtpRows& s = sequences[i];
      rows[i] = {G.subspan((static_cast<size_t>(j) - 1) * n + i, 1), s.state};
      positions[i] = s.position0 + static_cast<int64_t>(s.ids.size()) + j - 1;
    }
    KAPITSA_TRY(StepBatch step, j == 0 ? build_step(batch, ForwardOutputs{}, ws, positions0, false)
                                       : build_step(ForwardBatch{rows}, ForwardOutputs{}, ws, positions, false));
    const std::vector<uint64_t> part = few_rows_key(0, step, true, true);
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
  const Tensor e = ws.take(DType::f32, {T0, H}), h = ws.take(DType::f32, {T0, H});  // embedding, hidden
  const Tensor normed = ws.take(DType::f32, {T0, H}), carried = ws.take(DType::f32, {static_cast<int64_t>(n), H});
  // The head's logits as forward_mtp computes them, so that the guesses are the ones it gives: over every
  // row of a small step, else over the last rows (one matmul for all sequences: forward_mtp runs one a
  // sequence there, the same sums on the cpu).
  const Tensor logits = ws.take(DType::f32, {static_cast<int64_t>(n), V});
  const Tensor all_logits = small && T0 != static_cast<int64_t>(n) ? ws.take(DType::f32, {T0, V}) : Tensor();
  // A larger shape's first step overflows the workspace's host block: nothing is mirrored then, and each
  // guess comes back through the host before the next step copies it as its ids.
  const bool on_host = device_ != Device::cpu && ws.host_taken().empty();
  const Tensor guess_scratch = on_host ? ws.take(DType::i32, {static_cast<int64_t>(n)}) : Tensor();
  const MirroredMetadata mirrored(device_, ws);

  int64_t row = 0;
  for (const MtpRows& s : sequences) {  // before the graph: a captured step copies nothing from the host
    const Tensor dst = h.rows(row, row + s.hidden.dim(0));
    if (s.hidden.device() == device_) ops::copy(s.hidden, dst);
    else ops::copy_bytes(dst, s.hidden, /*wait=*/false);
    row += s.hidden.dim(0);
  }
  const auto body = [&] {
    for (int j = 0; j < steps; ++j) {
      const StepBatch& step = chain[static_cast<size_t>(j)];
      const int64_t T = step.n_tokens;
      const std::span<const int32_t> ids = j == 0 ? std::span<const int32_t>(ids0) : G.subspan((static_cast<size_t>(j) - 1) * n, n);
      if (j > 0) ops::copy(carried, h.rows(0, T));  // (the head normalises h in place)
      ops::embedding(embedding_, ids, e.rows(0, T));
      mtp_head(step, e.rows(0, T), h.rows(0, T), normed.rows(0, T), ctx);
      ops::gather_rows(normed.rows(0, T), j == 0 ? last_rows : each_row, carried);
      if (T == static_cast<int64_t>(n)) {
        ops::matmul(normed.rows(0, T), head_, logits);
      } else if (!all_logits.empty()) {
        ops::matmul(normed.rows(0, T), head_, all_logits);
        ops::gather_rows(all_logits, last_rows, logits);
      } else {
        ops::matmul(carried, head_, logits);
      }
      const std::span<int32_t> guess = G.subspan(static_cast<size_t>(j) * n, n);
      if (!on_host) {
        ops::argmax_rows(logits, V, ops::step_metadata_tensor(device_, guess));
        continue;
      }
      ops::argmax_rows(logits, V, guess_scratch);
      ops::copy_bytes(Tensor(DType::i32, {static_cast<int64_t>(n)}, guess.data()), guess_scratch);
    }
  };
  if (!(small && run_as_graph(key, ops::StepKind::mtp_head, chain.back(), ws, body))) body();
  std::vector<int32_t> by_step(G.begin(), G.end());
  if (device_ != Device::cpu && !on_host)  // (waits: the chain's one sync)
    ops::copy_bytes(by_step.data(), Device::cpu, ops::step_metadata_tensor(device_, G).data(), device_, G.size_bytes());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < static_cast<size_t>(steps); ++j) guesses[i * static_cast<size_t>(steps) + j] = by_step[j * n + i];
  ops::synchronize(device_);
  return ok_status();
}

}  // namespace kapitsa::models
