// HybridDecoder's multi-token-prediction plumbing: the fused input of a family's head (mtp_fuse) and
// forward_mtp, the head's steps over a sequence's rows (see hybrid_decoder.h and model.h).
#include "models/hybrid_decoder.h"
#include "models/hybrid_state.h"
#include "models/hybrid_steps.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>

namespace kapitsa::models {
using namespace hybrid;

Tensor HybridDecoder::mtp_fuse(const Tensor& e, const Tensor& h, const Buffer& norm_e, const Buffer& norm_h,
                               const Linear& fc, Workspace& ws) const {
  const int64_t T = e.dim(0), H = info_.hidden_size;
  const Tensor both = ws.take(DType::f32, {T, 2 * H}), x = ws.take(DType::f32, {T, H});
  ops::rms_norm(e, norm_e, norm_eps_, norm_weight_offset_, e);
  ops::rms_norm(h, norm_h, norm_eps_, norm_weight_offset_, h);
  const Tensor halves[] = {e, h};
  ops::concat_columns(halves, both);
  ops::matmul(both, fc, x);
  return x;
}

Status HybridDecoder::forward_mtp(std::span<const MtpRows> sequences, ForwardContext& ctx) const {
  if (info_.mtp_layers == 0)
    return error("{} has no multi-token-prediction head (no mtp.* tensors loaded)", info_.model_type);
  const int64_t H = info_.hidden_size, V = info_.vocab_size;
  if (sequences.empty()) return error("forward_mtp: no sequences");
  std::vector<ForwardBatch::Sequence> batch_seqs;
  std::vector<int64_t> positions0;
  for (const MtpRows& s : sequences) {
    const int64_t n = static_cast<int64_t>(s.ids.size());
    if (s.state == nullptr || n == 0) return error("forward_mtp: a sequence has no state or no tokens");
    for (size_t i = 0; i < s.ids.size(); ++i)
      if (s.ids[i] < 0 || s.ids[i] >= V) return error("forward_mtp: token id {} at index {} is outside [0, {})", s.ids[i], i, V);
    if (s.position0 < 0 || s.position0 + n > s.state->capacity())
      return error("forward_mtp: rows at positions [{}, {}) for a state of {} tokens (capacity {})", s.position0,
                   s.position0 + n, s.state->n_past(), s.state->capacity());
    KAPITSA_CHECK(s.hidden.shape() == Shape({n, H}) && s.hidden.dtype() == DType::f32, "forward_mtp hidden {}",
                  s.hidden.shape().str());
    for (const Tensor* t : {&s.logits, &s.out_hidden, &s.argmax})
      KAPITSA_CHECK(t->empty() || (t->rank() == 2 && (t->dim(0) == n || t->dim(0) == 1) &&
                                   t->dtype() == (t == &s.argmax ? DType::i32 : DType::f32) &&
                                   t->dim(1) == (t == &s.logits ? V : t == &s.argmax ? 1 : H)),
                    "forward_mtp output {}", t->shape().str());
    if (s.state->kv_pool() != sequences.front().state->kv_pool())
      return error("forward_mtp: the sequences must share their KV page pool");
    batch_seqs.push_back({s.ids, s.state});
    positions0.push_back(s.position0);
  }
  // KV pages for the rows past n_past (recursive drafting), as the next forward would take them.
  std::vector<ForwardBatch::Sequence> ahead;
  std::vector<std::vector<int32_t>> ahead_ids;
  for (const MtpRows& s : sequences) {
    const int64_t past = s.position0 + static_cast<int64_t>(s.ids.size()) - s.state->n_past();
    if (past <= 0) continue;
    ahead_ids.emplace_back(static_cast<size_t>(past), 0);
  }
  for (size_t j = 0, a = 0; j < sequences.size(); ++j)
    if (sequences[j].position0 + static_cast<int64_t>(sequences[j].ids.size()) > sequences[j].state->n_past())
      ahead.push_back({ahead_ids[a++], sequences[j].state});
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages(ahead));

  Workspace& ws = ctx.workspace;
  const StepOnDevice on_device(device_, ws);
  const ForwardBatch batch{batch_seqs};
  const std::span<int32_t> ids = take_ids(batch, ws);
  KAPITSA_TRY(const StepBatch step, build_step(batch, ForwardOutputs{}, ws, positions0));
  const int64_t T = step.n_tokens;
  const Tensor e = ws.take(DType::f32, {T, H}), h = ws.take(DType::f32, {T, H});   // embedding, hidden
  const Tensor normed = ws.take(DType::f32, {T, H});                               // the head's output
  // With spec-step graphs on (the default) a step of a few rows may run as a graph: its ops then compute the
  // head's logits over every row into the workspace, and the wanted rows are copied out after.
  const bool few = ops::spec_step_graphs_enabled(device_) && static_cast<size_t>(T) <= kMaxGraphTokens;
  const bool want_argmax =
      std::any_of(sequences.begin(), sequences.end(), [](const MtpRows& s) { return !s.argmax.empty(); });
  const bool want_logits = want_argmax ||
      std::any_of(sequences.begin(), sequences.end(), [](const MtpRows& s) { return !s.logits.empty(); });
  const Tensor logits = few && want_logits ? ws.take(DType::f32, {T, V}) : Tensor();
  const Tensor best = few && want_argmax ? ws.take(DType::i32, {T, 1}) : Tensor();
  const MirroredMetadata mirrored(device_, ws);

  int64_t row = 0;
  for (const MtpRows& s : sequences) {  // before the graph: a captured step copies nothing from the host
    const Tensor dst = h.rows(row, row + s.hidden.dim(0));
    if (s.hidden.device() == device_) ops::copy(s.hidden, dst);
    else ops::copy_bytes(dst, s.hidden, /*wait=*/false);
    row += s.hidden.dim(0);
  }
  const auto body = [&] {
    ops::embedding(embedding_, ids, e);
    mtp_head(step, e, h, normed, ctx);
    if (!logits.empty()) ops::matmul(normed, head_, logits);
    if (!best.empty()) ops::argmax_rows(logits, V, best);
  };
  // The key as a verification step's (few_rows_key), without checkpoints.
  if (!(few && run_as_graph(few_rows_key(kMtpStep, step, want_logits, want_argmax), ops::StepKind::mtp_head, step,
                            ws, body)))
    body();
  row = 0;
  for (const MtpRows& s : sequences) {
    const int64_t n = static_cast<int64_t>(s.ids.size());
    auto rows_for = [&](const Tensor& src, const Tensor& out) {
      return out.dim(0) == n ? src.rows(row, row + n) : src.rows(row + n - 1, row + n);
    };
    if (!s.out_hidden.empty()) store(rows_for(normed, s.out_hidden), s.out_hidden);
    if (!s.logits.empty() && !logits.empty()) {
      store(rows_for(logits, s.logits), s.logits);
    } else if (!s.logits.empty()) {
      const Tensor out = s.logits.device() == device_ ? s.logits : ws.take(DType::f32, s.logits.shape());
      ops::matmul(rows_for(normed, s.logits), head_, out);
      if (out.data() != s.logits.data()) store(out, s.logits);
    }
    if (!s.argmax.empty() && !best.empty()) {
      store(rows_for(best, s.argmax), s.argmax);
    } else if (!s.argmax.empty()) {
      const Tensor rows = rows_for(normed, s.argmax);
      const Tensor head_logits = ws.take(DType::f32, {rows.dim(0), V}), ids = ws.take(DType::i32, {rows.dim(0), 1});
      ops::matmul(rows, head_, head_logits);
      ops::argmax_rows(head_logits, V, ids);
      store(ids, s.argmax);
    }
    row += n;
  }
  ops::synchronize(device_);
  return ok_status();
}

void HybridDecoder::mtp_head(const StepBatch&, const Tensor&, const Tensor&, const Tensor&, ForwardContext&) const {
  KAPITSA_CHECK(false, "{}: mtp_head without a loaded head", info_.model_type);
}

}  // namespace kapitsa::models
