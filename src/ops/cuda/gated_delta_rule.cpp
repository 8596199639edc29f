// CUDA Gated DeltaNet: gates and the delta rule, for one sequence or a SeqBatch (its spans copied to the
// device in one transfer). The recurrent op and decode-sized calls run the token-by-token kernel
// (gated_delta_rule.cu); the chunked op and varlen calls of at least kStateChunk rows without checkpoints
// (prefill) the chunked WY kernels (gated_delta_rule_chunked.cu): the op contract makes them one
// function. Checkpoints (the state after single tokens, for speculative verification) need the
// token-by-token kernel.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <span>
#include <vector>

namespace kapitsa::ops::cuda {
using detail::check_f32;

// a, b, g, beta: [T, Hv];  A_log, dt_bias: [Hv] f32.
void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  for (const Tensor* t : {&a, &b, &A_log, &dt_bias, &g, &beta}) check_f32(*t, "gdn_gates", "input");
  const int64_t Hv = A_log.numel();
  KAPITSA_CHECK(Hv > 0 && dt_bias.numel() == Hv && a.numel() % Hv == 0 && b.numel() == a.numel() &&
                    g.numel() == a.numel() && beta.numel() == a.numel(),
                "gdn_gates: a {} b {} A_log {} dt_bias {} g {} beta {}", a.shape().str(), b.shape().str(),
                A_log.shape().str(), dt_bias.shape().str(), g.shape().str(), beta.shape().str());
  kernels::gdn_gates(a.f32(), b.f32(), A_log.f32(), dt_bias.f32(), g.f32(), beta.f32(), a.numel(), Hv,
                     detail::stream());
  detail::check_launch("gdn_gates");
}

namespace {
// q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv] (for a batch: one slot of it).
kernels::GdnArgs delta_rule_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                 const Tensor& beta, const Tensor& state, const Tensor& o) {
  for (const Tensor* t : {&q, &k, &v, &g, &beta, &state, &o}) check_f32(*t, "gated_delta_rule", "input");
  KAPITSA_CHECK(q.rank() == 3 && k.shape() == q.shape(), "gated_delta_rule: q {} k {}", q.shape().str(), k.shape().str());
  KAPITSA_CHECK(v.rank() == 3 && o.shape() == v.shape() && v.dim(0) == q.dim(0), "gated_delta_rule: v {} o {} q {}",
                v.shape().str(), o.shape().str(), q.shape().str());
  const int64_t T = q.dim(0), Hk = q.dim(1), Dk = q.dim(2), Hv = v.dim(1), Dv = v.dim(2);
  KAPITSA_CHECK(Hk > 0 && Hv % Hk == 0, "gated_delta_rule: Hv {} not a multiple of Hk {}", Hv, Hk);
  KAPITSA_CHECK(Dk <= kernels::kGdnMaxKeyDim, "gated_delta_rule: key head dim {} above the kernel's {}", Dk,
                kernels::kGdnMaxKeyDim);
  KAPITSA_CHECK(g.numel() == T * Hv && beta.numel() == T * Hv, "gated_delta_rule: g {} beta {} for T={} Hv={}",
                g.shape().str(), beta.shape().str(), T, Hv);
  KAPITSA_CHECK(state.rank() == 3 && state.dim(0) == Hv && state.dim(1) == Dk && state.dim(2) == Dv,
                "gated_delta_rule: state {} for Hv={} Dk={} Dv={}", state.shape().str(), Hv, Dk, Dv);
  return kernels::GdnArgs{q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(), state.f32(), o.f32(), T, Hk, Hv, Dk, Dv, {}};
}

void delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                const Tensor& state, const Tensor& o) {
  kernels::gated_delta_rule(delta_rule_args(q, k, v, g, beta, state, o), detail::stream());
  detail::check_launch("gated_delta_rule");
}

// Where the chunked kernels apply: a prefill-sized call (at least one chunk of rows; fewer walk as fast
// token by token), head dims within their shared-memory tiles (Dk in float4s), no checkpoints.
bool chunked_applies(const kernels::GdnArgs& a, std::span<const int32_t> ckpt_offsets) {
  return a.T >= kernels::kStateChunk && a.Dk <= kernels::kStateChunkMaxDim && a.Dk % 4 == 0 &&
         a.Dv <= kernels::kStateChunkMaxDim &&
         (ckpt_offsets.empty() || ckpt_offsets.back() == 0);
}

// After pack.upload(): the two chunked kernels, their scratch in Slot::temp0.
void run_chunked(const kernels::GdnArgs& a, const detail::ChunksInPack& chunks, const detail::HostPack& pack) {
  auto* scratch = static_cast<float*>(detail::scratch(
      detail::Slot::temp0, kernels::gdn_chunk_scratch_floats(a.T, chunks.n, a.Hv, a.Dk, a.Dv) * sizeof(float)));
  kernels::gated_delta_rule_chunked(a, detail::device_chunks(pack, chunks), scratch, detail::stream());
  detail::check_launch("gated_delta_rule (chunked)");
}
}  // namespace

void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  delta_rule(q, k, v, g, beta, state, o);
}

void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  const kernels::GdnArgs a = delta_rule_args(q, k, v, g, beta, state, o);
  if (!chunked_applies(a, {})) return delta_rule(q, k, v, g, beta, state, o);
  detail::HostPack pack;
  const int64_t rows[] = {0, a.T};
  const detail::ChunksInPack chunks = detail::add_chunks(pack, rows);
  pack.upload();
  run_chunked(a, chunks, pack);
}

// states: [n_slots, Hv, Dk, Dv] (checked with the batch in ops.cpp).
void gated_delta_rule_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const Tensor& states, const SeqBatch& batch, const Tensor& o) {
  if (states.dim(0) == 0 || batch.n_seqs() == 0) return;
  kernels::GdnArgs a = delta_rule_args(q, k, v, g, beta, states.index(0), o);
  a.state = states.f32();
  detail::HostPack pack;
  const detail::SeqsInPack at = detail::add_seqs(pack, batch);
  const bool chunked = chunked_applies(a, batch.ckpt_offsets);
  const detail::ChunksInPack chunks = chunked ? detail::add_chunks(pack, batch.row_offsets) : detail::ChunksInPack{};
  pack.upload();
  a.seqs = detail::device_seqs(pack, at, batch);
  if (chunked) return run_chunked(a, chunks, pack);
  kernels::gated_delta_rule(a, detail::stream());
  detail::check_launch("gated_delta_rule_varlen");
}

// Shapes checked in ops.cpp; the kernel's limits here.
void gdn_core_varlen(const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& z, const Tensor& norm_w, float norm_eps, const Tensor& states, const SeqBatch& batch,
                     const Tensor& o) {
  for (const Tensor* t : {&qkv, &a, &b, &A_log, &dt_bias, &z, &norm_w, &states, &o})
    check_f32(*t, "gdn_core_varlen", "input");
  if (states.dim(0) == 0 || batch.n_seqs() == 0) return;
  const int64_t T = qkv.dim(0), Hv = states.dim(1), Dk = states.dim(2), Dv = states.dim(3);
  KAPITSA_CHECK(Dk <= kernels::kGdnMaxKeyDim && Dv <= kernels::kGdnCoreMaxValueDim,
                "gdn_core_varlen: head dims {} / {} above the kernel's {} / {}", Dk, Dv, kernels::kGdnMaxKeyDim,
                kernels::kGdnCoreMaxValueDim);
  kernels::GdnCoreArgs args{qkv.f32(), a.f32(),    b.f32(),  A_log.f32(), dt_bias.f32(), z.f32(), norm_w.f32(),
                            norm_eps,  states.f32(), o.f32(), T, (qkv.dim(1) - Hv * Dv) / (2 * Dk), Hv, Dk, Dv, {}};
  detail::HostPack pack;
  const detail::SeqsInPack at = detail::add_seqs(pack, batch);
  pack.upload();
  args.seqs = detail::device_seqs(pack, at, batch);
  kernels::gdn_core(args, detail::stream());
  detail::check_launch("gdn_core_varlen");
}

}  // namespace kapitsa::ops::cuda
