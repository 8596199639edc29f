// Kernels of the causal depthwise conv1d with a carried window, for one sequence or a batch of them
// (Seqs): a thread per (channel, sequence, run of kRunTokens tokens) walks its run in order, holding the
// last K-1 inputs in registers (K ≤ kConvMaxWidth, unrolled so the array stays in registers; a run
// starts from the K-1 inputs before it, from x or the carried window), and after each checkpointed token
// also stores them into its checkpoint slot; a second kernel then writes each sequence's new window.
// Each output is the same sum in the same order whatever the runs. Runs read inputs other threads'
// outputs may overwrite, so when y aliases x one run covers the whole sequence (each thread reads x[t, c]
// before writing y[t, c]) and the window is written at its end. (Prefill of a 512-token prompt: one
// thread walking 512 tokens took 360 µs a layer on the 4B shape, 10% of the step.)
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHistory = static_cast<int>(kConvMaxWidth) - 1;

// hist (K-1 values, oldest first) → window column c of slot `slot`.
__device__ __forceinline__ void store_window(const float* hist, float* windows, int64_t slot, int64_t C, int64_t c,
                                             int K) {
  float* window = windows + slot * (K - 1) * C;
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) window[j * C + c] = hist[j];
}

// The input before row r0 of a sequence: row r0 - (K-1) + j of the window is j (oldest first).
__device__ __forceinline__ float input_at(const float* x, const float* window, int64_t tau, const SeqRows& sq,
                                          int64_t C, int64_t c, int K) {
  return tau >= sq.r0 ? x[tau * C + c] : window[(tau - sq.r0 + K - 1) * C + c];
}

// blockIdx.y: the run; blockIdx.z: the sequence. run_tokens: tokens a run (the whole sequence when y
// aliases x, which also makes this thread write the window at the end).
__global__ void conv1d_causal_kernel(const float* x, const float* w, const float* bias, float* windows, bool silu,
                                     float* y, int64_t T, int64_t C, int K, Seqs seqs, int64_t run_tokens,
                                     bool store_window_here) {
  pdl_trigger();
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, i = blockIdx.z;
  if (c >= C) return;  // writes nothing
  float hist[kMaxHistory > 0 ? kMaxHistory : 1] = {};  // hist[0] is the oldest input
  float wc[kConvMaxWidth] = {};
#pragma unroll
  for (int j = 0; j < kConvMaxWidth; ++j)
    if (j < K) wc[j] = w[c * K + j];  // weights: read before pdl_wait()
  const float b = bias != nullptr ? bias[c] : 0.0f;
  pdl_wait();
  const SeqRows sq = seq_rows(seqs, i, T);
  const int64_t t0 = sq.r0 + blockIdx.y * run_tokens;
  if (t0 >= sq.r1 && !(store_window_here && blockIdx.y == 0)) return;
  const int64_t t1 = t0 + run_tokens < sq.r1 ? t0 + run_tokens : sq.r1;
  const float* window = windows != nullptr ? windows + sq.slot * (K - 1) * C : nullptr;
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) hist[j] = input_at(x, window, t0 - (K - 1) + j, sq, C, c, K);
  // Inputs and checkpoint slots in chunks of kChunk tokens, loaded before any of their outputs is
  // written: a load a token in the chain (the stores may alias x, so the compiler cannot hoist it)
  // cost ~0.7 µs a token.
  constexpr int kChunk = 8;
  for (int64_t tc = t0; tc < t1; tc += kChunk) {
    float xs[kChunk];
    int32_t ck[kChunk];  // checkpoint slots
#pragma unroll
    for (int u = 0; u < kChunk; ++u) {
      xs[u] = tc + u < t1 ? x[(tc + u) * C + c] : 0.0f;
      ck[u] = tc + u < t1 && tc + u >= sq.ckpt_begin ? ckpt_slot(seqs, sq, tc + u) : -1;
    }
#pragma unroll
    for (int u = 0; u < kChunk; ++u) {
      const int64_t t = tc + u;
      if (t >= t1) break;
      const float xt = xs[u];
      float acc = b;
#pragma unroll
      for (int j = 0; j < kMaxHistory; ++j)
        if (j < K - 1) acc += wc[j] * hist[j];
#pragma unroll
      for (int j = 0; j < kConvMaxWidth; ++j)
        if (j == K - 1) acc += wc[j] * xt;
      if (silu) acc = acc / (1.0f + expf(-acc));
      y[t * C + c] = acc;
#pragma unroll
      for (int j = 0; j < kMaxHistory; ++j) {
        if (j < K - 2) hist[j] = hist[j + 1 < kMaxHistory ? j + 1 : j];
        else if (j == K - 2) hist[j] = xt;
      }
      if (ck[u] >= 0 && K > 1) store_window(hist, windows, ck[u], C, c, K);
    }
  }
  if (store_window_here && K > 1) store_window(hist, windows, sq.slot, C, c, K);
}

// Each sequence's new window, after conv1d_causal_kernel's runs have read the old one: its last K-1
// inputs (from the old window where the sequence is shorter than that), read before any is written.
__global__ void conv1d_window_kernel(const float* x, float* windows, int64_t T, int64_t C, int K, Seqs seqs) {
  pdl_trigger();
  pdl_wait();
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, i = blockIdx.y;
  if (c >= C) return;
  const SeqRows sq = seq_rows(seqs, i, T);
  const float* window = windows + sq.slot * (K - 1) * C;
  float hist[kMaxHistory > 0 ? kMaxHistory : 1] = {};
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) hist[j] = input_at(x, window, sq.r1 - (K - 1) + j, sq, C, c, K);
  store_window(hist, windows, sq.slot, C, c, K);
}

}  // namespace

void conv1d_causal(const float* x, const float* w, const float* bias, float* windows, bool silu, float* y, int64_t T,
                   int64_t C, int64_t K, const Seqs& seqs, int64_t longest, cudaStream_t s) {
  if (C == 0 || seqs.n_seqs == 0) return;
  constexpr int64_t kRunTokens = 16;
  const bool runs = x != y && longest > kRunTokens;
  const int64_t run_tokens = runs ? kRunTokens : (longest > 0 ? longest : 1);
  const unsigned channel_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  const int64_t n_runs = longest > run_tokens ? (longest + run_tokens - 1) / run_tokens : 1;
  const dim3 grid(channel_blocks, static_cast<unsigned>(n_runs), static_cast<unsigned>(seqs.n_seqs));
  launch(conv1d_causal_kernel, grid, kThreads, s, x, w, bias, windows, silu, y, T, C, static_cast<int>(K), seqs,
         run_tokens, !runs);
  if (runs && K > 1 && windows != nullptr)
    launch(conv1d_window_kernel, dim3(channel_blocks, static_cast<unsigned>(seqs.n_seqs)), kThreads, s, x, windows, T, C,
           static_cast<int>(K), seqs);
}

}  // namespace kapitsa::ops::cuda::kernels
