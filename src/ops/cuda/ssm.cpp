// CUDA Mamba-2 selective scan, for one sequence or a SeqBatch (its spans copied to the device in one
// transfer). The recurrent op and decode-sized calls run the token-by-token kernel (ssm.cu); the chunked op
// and varlen calls of at least kStateChunk rows without checkpoints (prefill) the chunked SSD kernels
// (ssm_chunked.cu): the op contract makes them one
// function (chunk_size only changes the reference's rounding; the kernels' chunks are kStateChunk rows).
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <span>

namespace kapitsa::ops::cuda {

namespace {
// x, y: [T, H, P];  dt: [T, H];  B, C: [T, G, N];  A_log, D, dt_bias: [H];  state: [H, P, N] (for a batch:
// one slot of it).
kernels::SsdArgs scan_args(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                           const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                           const Tensor& y) {
  for (const Tensor* t : {&x, &dt, &B, &C, &A_log, &D, &dt_bias, &state, &y}) detail::check_f32(*t, "ssd_scan", "input");
  KAPITSA_CHECK(x.rank() == 3 && y.shape() == x.shape(), "ssd_scan: x {} y {}", x.shape().str(), y.shape().str());
  const int64_t T = x.dim(0), H = x.dim(1), P = x.dim(2);
  KAPITSA_CHECK(B.rank() == 3 && C.shape() == B.shape() && B.dim(0) == T, "ssd_scan: B {} C {} for T={}", B.shape().str(),
                C.shape().str(), T);
  const int64_t G = B.dim(1), N = B.dim(2);
  KAPITSA_CHECK(G > 0 && H % G == 0, "ssd_scan: {} heads not a multiple of {} groups", H, G);
  KAPITSA_CHECK(N <= kernels::kSsdMaxStateDim, "ssd_scan: state size {} above the kernel's {}", N,
                kernels::kSsdMaxStateDim);
  KAPITSA_CHECK(dt.numel() == T * H && A_log.numel() == H && D.numel() == H && dt_bias.numel() == H,
                "ssd_scan: dt {}, A_log {}, D {}, dt_bias {} for T={} H={}", dt.shape().str(), A_log.shape().str(),
                D.shape().str(), dt_bias.shape().str(), T, H);
  KAPITSA_CHECK(state.rank() == 3 && state.dim(0) == H && state.dim(1) == P && state.dim(2) == N,
                "ssd_scan: state {} for H={} P={} N={}", state.shape().str(), H, P, N);
  return kernels::SsdArgs{x.f32(),     dt.f32(), B.f32(), C.f32(), A_log.f32(), D.f32(), dt_bias.f32(), dt_min, dt_max,
                          state.f32(), y.f32(),  T,       H,       P,           G,       N,             {},     H * P,
                          G * N};
}

// Where the chunked kernels apply: a prefill-sized call, the state's rows (N) within the scan's tiles
// and in float4s, no checkpoints.
bool chunked_applies(const kernels::SsdArgs& a, std::span<const int32_t> ckpt_offsets) {
  return a.T >= kernels::kStateChunk && a.N <= kernels::kStateChunkMaxDim && a.N % 4 == 0 &&
         (ckpt_offsets.empty() || ckpt_offsets.back() == 0);
}

// After pack.upload(): the two chunked kernels, their scratch in Slot::temp0.
void run_chunked(const kernels::SsdArgs& a, const detail::ChunksInPack& chunks, const detail::HostPack& pack) {
  auto* scratch = static_cast<float*>(
      detail::scratch(detail::Slot::temp0, kernels::ssd_chunk_scratch_floats(a.T, chunks.n, a.H) * sizeof(float)));
  kernels::ssd_scan_chunked(a, detail::device_chunks(pack, chunks), scratch, detail::stream());
  detail::check_launch("ssd_scan (chunked)");
}

void scan(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log, const Tensor& D,
          const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state, const Tensor& y) {
  kernels::ssd_scan(scan_args(x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y), detail::stream());
  detail::check_launch("ssd_scan");
}
}  // namespace

void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  scan(x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
}

void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  KAPITSA_CHECK(chunk_size >= 1, "ssd_scan_chunked: chunk_size {}", chunk_size);
  const kernels::SsdArgs a = scan_args(x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
  if (!chunked_applies(a, {})) return scan(x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
  detail::HostPack pack;
  const int64_t rows[] = {0, a.T};
  const detail::ChunksInPack chunks = detail::add_chunks(pack, rows);
  pack.upload();
  run_chunked(a, chunks, pack);
}

// xbc: [T, H·P + 2·G·N];  states: [n_slots, H, P, N] (checked with the batch in ops.cpp). Decode-sized
// calls read x, B and C in xbc's rows (strides); a prefill split xbc into arrays of their own first (in
// Slot::temp1), as the chunked kernels read them.
void ssd_scan_varlen(const Tensor& xbc, int64_t n_groups, const Tensor& dt, const Tensor& A_log, const Tensor& D,
                     const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size, const Tensor& states,
                     const SeqBatch& batch, const Tensor& y) {
  KAPITSA_CHECK(chunk_size >= 1, "ssd_scan_varlen: chunk_size {}", chunk_size);
  if (states.dim(0) == 0 || batch.n_seqs() == 0) return;
  const int64_t T = xbc.dim(0), H = states.dim(1), P = states.dim(2), N = states.dim(3), G = n_groups;
  const int64_t width = xbc.dim(1);
  // Shapes only: scan_args' checks over views of xbc's first columns (the data pointers are set below).
  const Tensor x(DType::f32, {T, H, P}, xbc.data(), Device::cuda), B(DType::f32, {T, G, N}, xbc.data(), Device::cuda);
  kernels::SsdArgs a = scan_args(x, dt, B, B, A_log, D, dt_bias, dt_min, dt_max, states.index(0), y);
  a.state = states.f32();
  a.x = xbc.f32(), a.B = xbc.f32() + H * P, a.C = xbc.f32() + H * P + G * N;
  a.x_stride = a.bc_stride = width;
  detail::HostPack pack;
  const detail::SeqsInPack at = detail::add_seqs(pack, batch);
  const bool chunked = chunked_applies(a, batch.ckpt_offsets);
  const detail::ChunksInPack chunks = chunked ? detail::add_chunks(pack, batch.row_offsets) : detail::ChunksInPack{};
  pack.upload();
  a.seqs = detail::device_seqs(pack, at, batch);
  if (chunked) {
    auto* split = static_cast<float*>(detail::scratch(detail::Slot::temp1, static_cast<size_t>(xbc.numel()) * sizeof(float)));
    const Tensor parts[] = {Tensor(DType::f32, {T, H * P}, split, Device::cuda),
                            Tensor(DType::f32, {T, G * N}, split + T * H * P, Device::cuda),
                            Tensor(DType::f32, {T, G * N}, split + T * (H * P + G * N), Device::cuda)};
    split_columns(xbc, parts);
    a.x = parts[0].f32(), a.B = parts[1].f32(), a.C = parts[2].f32();
    a.x_stride = H * P, a.bc_stride = G * N;
    return run_chunked(a, chunks, pack);
  }
  kernels::ssd_scan(a, detail::stream());
  detail::check_launch("ssd_scan_varlen");
}

}  // namespace kapitsa::ops::cuda
