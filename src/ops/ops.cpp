// The op functions of ops.h: each checks its arguments once — shapes, dtypes, that data is present
// and lives on the selected backend's device — then calls that backend's table entry (ops/backend.h).
// Backends do not repeat these checks. Tensors are contiguous by construction (tensor.h), so there is
// no layout to check; spans (ids, positions, block tables) are host memory and are checked here too.
#include "ops/backend.h"
#include "ops/memory.h"

#include <vector>

namespace kapitsa::ops {
namespace {

// The table entry for `op`, or a clear error when the backend leaves it out.
template <class Fn>
Fn entry(const BackendTable& b, Fn fn, const char* op) {
  KAPITSA_CHECK(fn != nullptr, "op {} is not implemented by backend {}", op, b.name);
  return fn;
}
#define KAPITSA_CALL(b, op, ...) entry(b, b.op, #op)(__VA_ARGS__)

// Rows when t is taken as 2-D [rows, last dim].
int64_t rows_of(const Tensor& t) {
  const int64_t cols = t.rank() == 0 ? 0 : t.dim(-1);
  return cols == 0 ? 0 : t.numel() / cols;
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

bool is_float(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

// t has data (unless it has no elements) on b's device.
void present(const BackendTable& b, const Tensor& t, const char* op, const char* name) {
  KAPITSA_CHECK(t.rank() >= 1, "{}: {} has no shape", op, name);
  KAPITSA_CHECK(t.numel() == 0 || t.data() != nullptr, "{}: {} has no data", op, name);
  KAPITSA_CHECK(t.device() == b.device, "{}: {} is on {}, backend {} runs on {}", op, name, device_name(t.device()),
                b.name, device_name(b.device));
}

// t is present and F32.
void f32(const BackendTable& b, const Tensor& t, const char* op, const char* name) {
  present(b, t, op, name);
  KAPITSA_CHECK(t.dtype() == DType::f32, "{}: {} must be F32, got {}", op, name, dtype_name(t.dtype()));
}

// A matmul weight or embedding table of logical shape [N, K], checked for its format: dense f32/f16/bf16
// [N, K], affine u32 codes [N, K·bits/32] with scales and biases [N, K/group] of one float dtype, or
// ggml blocks u8 [N, K/block·block_bytes].
void weight(const BackendTable& b, const Linear& w, const char* op, const char* name) {
  const Tensor& t = w.weight();
  present(b, t, op, name);
  KAPITSA_CHECK(t.rank() == 2, "{}: {} must be [N, K], got {}", op, name, t.shape().str());
  switch (w.format()) {
    case WeightFormat::dense:
      KAPITSA_CHECK(is_float(t.dtype()), "{}: {} dtype {} (F32, F16 or BF16)", op, name, dtype_name(t.dtype()));
      return;
    case WeightFormat::affine: {
      present(b, w.scales(), op, "scales"), present(b, w.biases(), op, "biases");
      const Shape groups{w.rows(), w.group_size() > 0 ? w.cols() / w.group_size() : 0};
      KAPITSA_CHECK(t.dtype() == DType::u32 && w.scales().shape() == groups && w.biases().shape() == groups &&
                        is_float(w.scales().dtype()) && w.biases().dtype() == w.scales().dtype(),
                    "{}: {} affine {}-bit, group {}: codes {} {}, scales {} {}, biases {} {}", op, name, w.bits(),
                    w.group_size(), dtype_name(t.dtype()), t.shape().str(), dtype_name(w.scales().dtype()),
                    w.scales().shape().str(), dtype_name(w.biases().dtype()), w.biases().shape().str());
      return;
    }
    case WeightFormat::ggml: {
      const auto info = ggml_type_info(static_cast<uint32_t>(w.ggml_type()));
      KAPITSA_CHECK(info && t.dtype() == DType::u8 && w.cols() % info->block_size == 0 &&
                        t.dim(1) == w.cols() / info->block_size * info->block_bytes,
                    "{}: {} {} blocks {} {} for {} inputs", op, name, ggml_type_name(w.ggml_type()),
                    dtype_name(t.dtype()), t.shape().str(), w.cols());
      return;
    }
  }
  KAPITSA_CHECK(false, "{}: {} has an unknown weight format", op, name);
}

void same_numel(const Tensor& a, const Tensor& b, const char* op) {
  KAPITSA_CHECK(a.numel() == b.numel(), "{}: {} vs {}", op, a.shape().str(), b.shape().str());
}

// index in [0, n).
void in_range(int64_t index, int64_t n, const char* op, const char* what, size_t at) {
  KAPITSA_CHECK(0 <= index && index < n, "{}: {} {} at {} outside [0, {})", op, what, index, at, n);
}

// KV pages: [n_pages, P, Hkv, D] in one of the KV cache dtypes, P > 0.
void check_pages(const BackendTable& b, const Tensor& pages, const char* op, const char* name) {
  present(b, pages, op, name);
  KAPITSA_CHECK(pages.rank() == 4 && pages.dim(1) > 0, "{}: {} must be [n_pages, P, Hkv, D], got {}", op, name,
                pages.shape().str());
  KAPITSA_CHECK(is_float(pages.dtype()), "{}: {} dtype {} (F32, BF16 or F16)", op, name, dtype_name(pages.dtype()));
}

// block_table covers positions [0, n) of pages: enough entries, each a page id of the pool.
void check_block_table(const Tensor& pages, std::span<const int32_t> block_table, int64_t n, const char* op) {
  const int64_t P = pages.dim(1), used = (n + P - 1) / P;
  KAPITSA_CHECK(n >= 0 && static_cast<int64_t>(block_table.size()) >= used,
                "{}: {} pages of {} tokens do not hold {} positions", op, block_table.size(), P, n);
  for (size_t i = 0; i < static_cast<size_t>(used); ++i) in_range(block_table[i], pages.dim(0), op, "page id", i);
}

// Paged attention: q, o: [T, Hq, D] f32;  k_pages, v_pages: the same [n_pages, P, Hkv, D], same dtype.
void check_paged_attention(const BackendTable& b, const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                           const Tensor& o, const char* op) {
  f32(b, q, op, "q"), f32(b, o, op, "o");
  check_pages(b, k_pages, op, "k_pages"), check_pages(b, v_pages, op, "v_pages");
  KAPITSA_CHECK(k_pages.shape() == v_pages.shape() && k_pages.dtype() == v_pages.dtype(),
                "{}: k_pages {} {} and v_pages {} {} differ", op, k_pages.shape().str(), dtype_name(k_pages.dtype()),
                v_pages.shape().str(), dtype_name(v_pages.dtype()));
  KAPITSA_CHECK(q.rank() == 3 && o.shape() == q.shape() && k_pages.dim(3) == q.dim(2), "{}: q {}, k_pages {}, o {}", op,
                q.shape().str(), k_pages.shape().str(), o.shape().str());
  KAPITSA_CHECK(k_pages.dim(2) > 0 && q.dim(1) % k_pages.dim(2) == 0,
                "{}: {} query heads not a multiple of {} kv heads", op, q.dim(1), k_pages.dim(2));
}

// The batch describes activations of `rows` rows: offsets start at 0, never decrease, end at rows.
void check_batch_rows(const SeqBatch& batch, int64_t rows, const char* op) {
  KAPITSA_CHECK(!batch.row_offsets.empty() && batch.row_offsets.front() == 0 && batch.row_offsets.back() == rows,
                "{}: row offsets must run from 0 to the {} rows of the activations", op, rows);
  for (int64_t i = 0; i < batch.n_seqs(); ++i)
    KAPITSA_CHECK(batch.rows(i) >= 0, "{}: sequence {} has {} rows", op, i, batch.rows(i));
}

// State slots: one per sequence, checkpoints within each sequence's rows, every slot in [0, n_slots)
// and written at most once in the call (so sequences can run in parallel).
void check_batch_slots(const SeqBatch& batch, int64_t n_slots, const char* op) {
  const int64_t n = batch.n_seqs();
  KAPITSA_CHECK(static_cast<int64_t>(batch.state_slots.size()) == n, "{}: {} state slots for {} sequences", op,
                batch.state_slots.size(), n);
  std::vector<bool> used(static_cast<size_t>(n_slots), false);
  auto take = [&](int32_t slot, const char* what, int64_t seq) {
    KAPITSA_CHECK(0 <= slot && slot < n_slots, "{}: {} slot {} of sequence {} outside [0, {})", op, what, slot, seq,
                  n_slots);
    KAPITSA_CHECK(!used[static_cast<size_t>(slot)], "{}: slot {} written twice (sequence {})", op, slot, seq);
    used[static_cast<size_t>(slot)] = true;
  };
  for (int64_t i = 0; i < n; ++i) take(batch.state_slots[static_cast<size_t>(i)], "state", i);
  if (batch.ckpt_offsets.empty()) {
    KAPITSA_CHECK(batch.ckpt_slots.empty(), "{}: checkpoint slots without offsets", op);
    return;
  }
  KAPITSA_CHECK(static_cast<int64_t>(batch.ckpt_offsets.size()) == n + 1 && batch.ckpt_offsets.front() == 0 &&
                    static_cast<size_t>(batch.ckpt_offsets.back()) == batch.ckpt_slots.size(),
                "{}: checkpoint offsets ({}) must run from 0 to the {} checkpoint slots, one per sequence + 1", op,
                batch.ckpt_offsets.size(), batch.ckpt_slots.size());
  for (int64_t i = 0; i < n; ++i) {
    KAPITSA_CHECK(0 <= batch.n_ckpts(i) && batch.n_ckpts(i) <= batch.rows(i),
                  "{}: {} checkpoints for the {} tokens of sequence {}", op, batch.n_ckpts(i), batch.rows(i), i);
    for (int64_t j = 0; j < batch.n_ckpts(i); ++j) take(batch.ckpt_slot(i, j), "checkpoint", i);
  }
}

// Attention metadata: a start position and a block table per sequence, covering its keys.
void check_batch_pages(const SeqBatch& batch, const Tensor& pages, const char* op) {
  const int64_t n = batch.n_seqs();
  KAPITSA_CHECK(static_cast<int64_t>(batch.positions0.size()) == n &&
                    static_cast<int64_t>(batch.block_offsets.size()) == n + 1 && batch.block_offsets.front() == 0 &&
                    static_cast<size_t>(batch.block_offsets.back()) == batch.block_tables.size(),
                "{}: {} start positions and {} block offsets for {} sequences", op, batch.positions0.size(),
                batch.block_offsets.size(), n);
  for (int64_t i = 0; i < n; ++i) {
    KAPITSA_CHECK(batch.positions0[static_cast<size_t>(i)] >= 0 &&
                      batch.block_offsets[size_t(i)] <= batch.block_offsets[size_t(i + 1)],
                  "{}: sequence {} starts at {}", op, i, batch.positions0[static_cast<size_t>(i)]);
    check_block_table(pages, batch.block_table(i), batch.positions0[static_cast<size_t>(i)] + batch.rows(i), op);
  }
}

// Column blocks of a [R, W] matrix: same dtype and device, R rows each, W columns in all.
void check_blocks(const BackendTable& b, const Tensor& wide, std::span<const Tensor> parts, const char* op) {
  present(b, wide, op, "the matrix");
  const int64_t R = rows_of(wide);
  int64_t total = 0;
  for (const Tensor& p : parts) {
    present(b, p, op, "a block");
    KAPITSA_CHECK(p.dtype() == wide.dtype(), "{}: dtype {} vs {}", op, dtype_name(p.dtype()), dtype_name(wide.dtype()));
    KAPITSA_CHECK(rows_of(p) == R && p.numel() == R * p.dim(-1), "{}: block {} has not the {} rows of {}", op,
                  p.shape().str(), R, wide.shape().str());
    total += p.dim(-1);
  }
  KAPITSA_CHECK(total == wide.dim(-1), "{}: blocks have {} columns in all, the matrix has {}", op, total, wide.dim(-1));
}

// Gated delta rule: q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv].
void check_gdn(const BackendTable& b, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
               const Tensor& beta, const Tensor& state, const Tensor& o, const char* op) {
  for (const Tensor* t : {&q, &k, &v, &g, &beta, &state, &o}) f32(b, *t, op, "every tensor");
  KAPITSA_CHECK(q.rank() == 3 && k.shape() == q.shape(), "{}: q {} k {}", op, q.shape().str(), k.shape().str());
  KAPITSA_CHECK(v.rank() == 3 && o.shape() == v.shape() && v.dim(0) == q.dim(0), "{}: v {} o {} q {}", op,
                v.shape().str(), o.shape().str(), q.shape().str());
  const int64_t T = q.dim(0), Hk = q.dim(1), Hv = v.dim(1), Dk = q.dim(2), Dv = v.dim(2);
  KAPITSA_CHECK(Hk > 0 && Hv % Hk == 0, "{}: Hv {} not a multiple of Hk {}", op, Hv, Hk);
  KAPITSA_CHECK(g.numel() == T * Hv && beta.numel() == T * Hv, "{}: g {} beta {} for T={} Hv={}", op, g.shape().str(),
                beta.shape().str(), T, Hv);
  KAPITSA_CHECK(state.rank() == 3 && state.dim(0) == Hv && state.dim(1) == Dk && state.dim(2) == Dv,
                "{}: state {} for Hv={} Dk={} Dv={}", op, state.shape().str(), Hv, Dk, Dv);
}

// Mamba-2 scan: x, y: [T, H, P];  dt: [T, H];  B, C: [T, G, N];  A_log, D, dt_bias: [H];  state: [H, P, N].
void check_ssd(const BackendTable& b, const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C,
               const Tensor& A_log, const Tensor& D, const Tensor& dt_bias, const Tensor& state, const Tensor& y,
               const char* op) {
  for (const Tensor* t : {&x, &dt, &B, &C, &A_log, &D, &dt_bias, &state, &y}) f32(b, *t, op, "every tensor");
  KAPITSA_CHECK(x.rank() == 3 && y.shape() == x.shape(), "{}: x {} y {}", op, x.shape().str(), y.shape().str());
  KAPITSA_CHECK(B.rank() == 3 && C.shape() == B.shape() && B.dim(0) == x.dim(0), "{}: B {} C {} for T={}", op,
                B.shape().str(), C.shape().str(), x.dim(0));
  const int64_t T = x.dim(0), H = x.dim(1), P = x.dim(2), G = B.dim(1), N = B.dim(2);
  KAPITSA_CHECK(G > 0 && H % G == 0, "{}: {} heads not a multiple of {} groups", op, H, G);
  KAPITSA_CHECK(dt.numel() == T * H, "{}: dt {} for T={} H={}", op, dt.shape().str(), T, H);
  KAPITSA_CHECK(A_log.numel() == H && D.numel() == H && dt_bias.numel() == H,
                "{}: A_log {}, D {}, dt_bias {} for {} heads", op, A_log.shape().str(), D.shape().str(),
                dt_bias.shape().str(), H);
  KAPITSA_CHECK(state.rank() == 3 && state.dim(0) == H && state.dim(1) == P && state.dim(2) == N,
                "{}: state {} for H={} P={} N={}", op, state.shape().str(), H, P, N);
}

}  // namespace

int64_t matmul_invariant_rows(Device device, const Linear& w) {
  const BackendTable* b = device == Device::cpu ? &current_backend() : backend_for(device);
  if (b == nullptr) return 0;
  return entry(*b, b->matmul_invariant_rows, "matmul_invariant_rows")(w);
}

// ---- basic -----------------------------------------------------------------------------------
void embedding(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const BackendTable& b = current_backend();
  weight(b, table, "embedding", "table");
  f32(b, out, "embedding", "out");
  const int64_t V = table.rows(), H = table.cols(), T = static_cast<int64_t>(ids.size());
  KAPITSA_CHECK(out.numel() == T * H && out.dim(-1) == H, "embedding: out {} for {} ids of width {}", out.shape().str(),
                T, H);
  for (size_t i = 0; i < ids.size(); ++i) in_range(ids[i], V, "embedding", "id", i);
  KAPITSA_CALL(b, embedding, table, ids, out);
}

namespace {
// matmul's (and matmul_relu_squared's) argument checks, naming op.
void check_matmul(const BackendTable& b, const Tensor& x, const Linear& w, const Tensor& y, const char* op) {
  weight(b, w, op, "w");
  f32(b, x, op, "x"), f32(b, y, op, "y");
  const int64_t N = w.rows(), K = w.cols();
  KAPITSA_CHECK(x.dim(-1) == K, "{}: x {} does not match w [{}, {}]", op, x.shape().str(), N, K);
  KAPITSA_CHECK(y.dim(-1) == N, "{}: y {} does not match w [{}, {}]", op, y.shape().str(), N, K);
  KAPITSA_CHECK(rows_of(y) == rows_of(x), "{}: y {} has not the {} rows of x {}", op, y.shape().str(), rows_of(x),
                x.shape().str());
  KAPITSA_CHECK(x.data() != y.data() || x.numel() == 0, "{}: y must not alias x", op);
}
}  // namespace

void matmul(const Tensor& x, const Linear& w, const Tensor& y) {
  const BackendTable& b = current_backend();
  check_matmul(b, x, w, y, "matmul");
  KAPITSA_CALL(b, matmul, x, w, y);
}

void matmul_relu_squared(const Tensor& x, const Linear& w, const Tensor& y) {
  const BackendTable& b = current_backend();
  check_matmul(b, x, w, y, "matmul_relu_squared");
  KAPITSA_CALL(b, matmul_relu_squared, x, w, y);
}

void matmul_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  const BackendTable& b = current_backend();
  const char* op = "matmul_many";
  f32(b, x, op, "x");
  KAPITSA_CHECK(w.size() == y.size(), "{}: {} weights but {} outputs", op, w.size(), y.size());
  for (size_t i = 0; i < w.size(); ++i) {
    weight(b, w[i], op, "w[i]");
    f32(b, y[i], op, "y[i]");
    const int64_t N = w[i].rows(), K = w[i].cols();
    KAPITSA_CHECK(x.dim(-1) == K, "{}: x {} does not match w[{}] [{}, {}]", op, x.shape().str(), i, N, K);
    KAPITSA_CHECK(y[i].dim(-1) == N && rows_of(y[i]) == rows_of(x), "{}: y[{}] {} is not [{}, {}] for x {}", op, i,
                  y[i].shape().str(), rows_of(x), N, x.shape().str());
    KAPITSA_CHECK(x.data() != y[i].data() || x.numel() == 0, "{}: y[{}] must not alias x", op, i);
  }
  KAPITSA_CALL(b, matmul_many, x, w, y);
}

void matmul_swiglu(const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up, const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "matmul_swiglu";
  f32(b, x, op, "x"), f32(b, up, op, "up"), f32(b, y, op, "y");
  weight(b, w_gate, op, "w_gate"), weight(b, w_up, op, "w_up");
  const int64_t I = w_gate.rows(), K = w_gate.cols();
  KAPITSA_CHECK(w_up.rows() == I && w_up.cols() == K && x.dim(-1) == K, "{}: x {}, w_gate [{}, {}], w_up [{}, {}]", op,
                x.shape().str(), I, K, w_up.rows(), w_up.cols());
  for (const Tensor* t : {&up, &y})
    KAPITSA_CHECK(t->dim(-1) == I && rows_of(*t) == rows_of(x), "{}: output {} is not [{}, {}]", op, t->shape().str(),
                  rows_of(x), I);
  KAPITSA_CHECK(x.numel() == 0 || (y.data() != x.data() && up.data() != x.data() && up.data() != y.data()),
                "{}: x, up and y must be three different tensors", op);
  KAPITSA_CALL(b, matmul_swiglu, x, w_gate, w_up, up, y);
}

void add(const Tensor& a, const Tensor& c, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, a, "add", "a"), f32(b, c, "add", "b"), f32(b, y, "add", "y");
  same_numel(a, c, "add"), same_numel(a, y, "add");
  KAPITSA_CALL(b, add, a, c, y);
}

void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, gate, "silu_mul", "gate"), f32(b, up, "silu_mul", "up"), f32(b, y, "silu_mul", "y");
  same_numel(gate, up, "silu_mul"), same_numel(gate, y, "silu_mul");
  KAPITSA_CALL(b, silu_mul, gate, up, y);
}

void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, x, "mul_sigmoid", "x"), f32(b, gate, "mul_sigmoid", "gate"), f32(b, y, "mul_sigmoid", "y");
  same_numel(x, y, "mul_sigmoid");
  KAPITSA_CHECK(gate.numel() == x.numel() || gate.numel() == rows_of(x),
                "mul_sigmoid: gate {} is neither {} nor [{}, 1]", gate.shape().str(), x.shape().str(), rows_of(x));
  KAPITSA_CALL(b, mul_sigmoid, x, gate, y);
}

void relu_squared(const Tensor& x, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, x, "relu_squared", "x"), f32(b, y, "relu_squared", "y");
  same_numel(x, y, "relu_squared");
  KAPITSA_CALL(b, relu_squared, x, y);
}

void copy(const Tensor& src, const Tensor& dst) {
  const BackendTable& b = current_backend();
  present(b, src, "copy", "src"), present(b, dst, "copy", "dst");
  KAPITSA_CHECK(src.numel() == dst.numel(), "copy: {} elements into {}", src.shape().str(), dst.shape().str());
  KAPITSA_CHECK(src.dtype() == dst.dtype() || (is_float(src.dtype()) && is_float(dst.dtype())),
                "copy: cannot convert {} to {}", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  KAPITSA_CALL(b, copy, src, dst);
}

void split_columns(const Tensor& x, std::span<const Tensor> outs) {
  const BackendTable& b = current_backend();
  check_blocks(b, x, outs, "split_columns");
  KAPITSA_CALL(b, split_columns, x, outs);
}

void concat_columns(std::span<const Tensor> ins, const Tensor& y) {
  const BackendTable& b = current_backend();
  check_blocks(b, y, ins, "concat_columns");
  KAPITSA_CALL(b, concat_columns, ins, y);
}

// ---- normalisation ---------------------------------------------------------------------------
void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, x, "rms_norm", "x"), f32(b, w, "rms_norm", "w"), f32(b, y, "rms_norm", "y");
  KAPITSA_CHECK(w.numel() == x.dim(-1), "rms_norm: w {} for rows of {}", w.shape().str(), x.dim(-1));
  same_numel(x, y, "rms_norm");
  KAPITSA_CALL(b, rms_norm, x, w, eps, weight_offset, y);
}

void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, float weight_offset,
                  const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "add_rms_norm";
  f32(b, x, op, "x"), f32(b, delta, op, "delta"), f32(b, w, op, "w"), f32(b, y, op, "y");
  KAPITSA_CHECK(w.numel() == x.dim(-1), "{}: w {} for rows of {}", op, w.shape().str(), x.dim(-1));
  same_numel(x, delta, op), same_numel(x, y, op);
  KAPITSA_CHECK(x.numel() == 0 || (y.data() != x.data() && y.data() != delta.data() && delta.data() != x.data()),
                "{}: x, delta and y must be three different tensors", op);
  KAPITSA_CALL(b, add_rms_norm, x, delta, w, eps, weight_offset, y);
}

void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, x, "rms_norm_gated", "x"), f32(b, z, "rms_norm_gated", "z");
  f32(b, w, "rms_norm_gated", "w"), f32(b, y, "rms_norm_gated", "y");
  KAPITSA_CHECK(w.numel() == x.dim(-1), "rms_norm_gated: w {} for rows of {}", w.shape().str(), x.dim(-1));
  same_numel(x, y, "rms_norm_gated"), same_numel(x, z, "rms_norm_gated");
  KAPITSA_CALL(b, rms_norm_gated, x, z, w, eps, y);
}

void l2_norm(const Tensor& x, float eps, float scale, const Tensor& y) {
  const BackendTable& b = current_backend();
  f32(b, x, "l2_norm", "x"), f32(b, y, "l2_norm", "y");
  same_numel(x, y, "l2_norm");
  KAPITSA_CALL(b, l2_norm, x, eps, scale, y);
}

void rms_norm_group_gated(const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, float eps,
                          const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "rms_norm_group_gated";
  f32(b, x, op, "x"), f32(b, z, op, "z"), f32(b, w, op, "w"), f32(b, y, op, "y");
  const int64_t D = x.dim(-1);
  KAPITSA_CHECK(group_size >= 1 && D % group_size == 0, "{}: group size {} for rows of {}", op, group_size, D);
  KAPITSA_CHECK(w.numel() == D, "{}: w {} for rows of {}", op, w.shape().str(), D);
  same_numel(x, y, op), same_numel(x, z, op);
  KAPITSA_CALL(b, rms_norm_group_gated, x, z, w, group_size, eps, y);
}

// ---- attention -------------------------------------------------------------------------------
void rope_neox(const Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  const BackendTable& b = current_backend();
  f32(b, x, "rope_neox", "x");
  KAPITSA_CHECK(x.rank() == 3, "rope_neox: x must be [T, n_heads, D], got {}", x.shape().str());
  KAPITSA_CHECK(static_cast<int64_t>(positions.size()) == x.dim(0), "rope_neox: {} positions for {} tokens",
                positions.size(), x.dim(0));
  const int64_t rotary_dim = static_cast<int64_t>(2 * inv_freq.size());
  KAPITSA_CHECK(rotary_dim > 0 && rotary_dim <= x.dim(2), "rope_neox: rotary_dim {} must be within head_dim {}",
                rotary_dim, x.dim(2));
  KAPITSA_CALL(b, rope_neox, x, positions, inv_freq);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  const BackendTable& b = current_backend();
  f32(b, q, "attention", "q"), f32(b, k, "attention", "k"), f32(b, v, "attention", "v"), f32(b, o, "attention", "o");
  KAPITSA_CHECK(
      q.rank() == 3 && k.rank() == 3 && k.shape() == v.shape() && k.dim(2) == q.dim(2) && o.shape() == q.shape(),
      "attention: q {}, k {}, v {}, o {}", q.shape().str(), k.shape().str(), v.shape().str(), o.shape().str());
  const int64_t T = q.dim(0), Hq = q.dim(1), Hkv = k.dim(1), S = k.dim(0);
  KAPITSA_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: {} query heads not a multiple of {} kv heads", Hq, Hkv);
  KAPITSA_CHECK(q_pos0 >= 0 && S >= q_pos0 + T, "attention: {} keys for queries at {}..{}", S, q_pos0, q_pos0 + T);
  KAPITSA_CHECK(o.data() != q.data() || T == 0, "attention: o must not alias q");
  KAPITSA_CALL(b, attention, q, k, v, q_pos0, scale, o);
}

void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  const BackendTable& b = current_backend();
  const char* op = "attention_paged";
  check_paged_attention(b, q, k_pages, v_pages, o, op);
  const int64_t T = q.dim(0);
  KAPITSA_CHECK(q_pos0 >= 0 && n_kv >= q_pos0 + T, "{}: {} keys for queries at {}..{}", op, n_kv, q_pos0, q_pos0 + T);
  check_block_table(k_pages, block_table, n_kv, op);
  KAPITSA_CHECK(o.data() != q.data() || T == 0, "{}: o must not alias q", op);
  KAPITSA_CALL(b, attention_paged, q, k_pages, v_pages, block_table, n_kv, q_pos0, scale, o);
}

void write_paged_rows(const Tensor& rows, const Tensor& pages, std::span<const int32_t> block_table, int64_t pos0) {
  const BackendTable& b = current_backend();
  const char* op = "write_paged_rows";
  f32(b, rows, op, "rows");
  check_pages(b, pages, op, "pages");
  KAPITSA_CHECK(rows.rank() == 3 && rows.dim(1) == pages.dim(2) && rows.dim(2) == pages.dim(3),
                "{}: rows {} for pages {}", op, rows.shape().str(), pages.shape().str());
  KAPITSA_CHECK(pos0 >= 0, "{}: position {}", op, pos0);
  check_block_table(pages, block_table, pos0 + rows.dim(0), op);
  KAPITSA_CALL(b, write_paged_rows, rows, pages, block_table, pos0);
}

// ---- recurrent mixers ------------------------------------------------------------------------
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "conv1d_causal";
  f32(b, x, op, "x"), f32(b, w, op, "w"), f32(b, y, op, "y");
  KAPITSA_CHECK(w.rank() == 2, "{}: w must be [C, K], got {}", op, w.shape().str());
  const int64_t C = w.dim(0), K = w.dim(1);
  KAPITSA_CHECK(K >= 1 && K <= kMaxConvWidth, "{}: kernel width {} outside [1, {}]", op, K, kMaxConvWidth);
  KAPITSA_CHECK(x.dim(-1) == C && y.shape() == x.shape(), "{}: x {}, y {} for {} channels", op, x.shape().str(),
                y.shape().str(), C);
  f32(b, window, op, "window");
  KAPITSA_CHECK(window.numel() == (K - 1) * C, "{}: window {} must be [{}, {}]", op, window.shape().str(), K - 1, C);
  if (!bias.empty()) {
    f32(b, bias, op, "bias");
    KAPITSA_CHECK(bias.numel() == C, "{}: bias {} for {} channels", op, bias.shape().str(), C);
  }
  KAPITSA_CALL(b, conv1d_causal, x, w, bias, window, silu, y);
}

void gdn_gates(const Tensor& a, const Tensor& bb, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  const BackendTable& b = current_backend();
  for (const Tensor* t : {&a, &bb, &A_log, &dt_bias, &g, &beta}) f32(b, *t, "gdn_gates", "every tensor");
  const int64_t Hv = A_log.numel();
  KAPITSA_CHECK(Hv > 0 && dt_bias.numel() == Hv && a.numel() % Hv == 0 && bb.numel() == a.numel() &&
                    g.numel() == a.numel() && beta.numel() == a.numel(),
                "gdn_gates: a {} b {} A_log {} dt_bias {} g {} beta {}", a.shape().str(), bb.shape().str(),
                A_log.shape().str(), dt_bias.shape().str(), g.shape().str(), beta.shape().str());
  KAPITSA_CALL(b, gdn_gates, a, bb, A_log, dt_bias, g, beta);
}

void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  const BackendTable& b = current_backend();
  check_gdn(b, q, k, v, g, beta, state, o, "gated_delta_rule_recurrent");
  KAPITSA_CALL(b, gated_delta_rule_recurrent, q, k, v, g, beta, state, o);
}

void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  const BackendTable& b = current_backend();
  check_gdn(b, q, k, v, g, beta, state, o, "gated_delta_rule_chunked");
  KAPITSA_CALL(b, gated_delta_rule_chunked, q, k, v, g, beta, state, o);
}

void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  const BackendTable& b = current_backend();
  check_ssd(b, x, dt, B, C, A_log, D, dt_bias, state, y, "ssd_scan_recurrent");
  KAPITSA_CALL(b, ssd_scan_recurrent, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
}

void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  const BackendTable& b = current_backend();
  check_ssd(b, x, dt, B, C, A_log, D, dt_bias, state, y, "ssd_scan_chunked");
  KAPITSA_CHECK(chunk_size >= 1, "ssd_scan_chunked: chunk_size {}", chunk_size);
  KAPITSA_CALL(b, ssd_scan_chunked, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, chunk_size, state, y);
}

// ---- mixture of experts ----------------------------------------------------------------------
void moe_route_softmax(const Tensor& logits, int k, bool renormalize, const Tensor& expert_ids,
                       const Tensor& expert_weights) {
  const BackendTable& b = current_backend();
  const char* op = "moe_route_softmax";
  f32(b, logits, op, "logits"), f32(b, expert_weights, op, "expert_weights"), present(b, expert_ids, op, "expert_ids");
  KAPITSA_CHECK(expert_ids.dtype() == DType::i32, "{}: expert_ids must be I32, got {}", op,
                dtype_name(expert_ids.dtype()));
  const int64_t E = logits.dim(-1), T = rows_of(logits);
  KAPITSA_CHECK(k >= 1 && k <= E, "{}: k = {} with {} experts", op, k, E);
  KAPITSA_CHECK(expert_ids.numel() == T * k && expert_weights.numel() == T * k,
                "{}: expert_ids {} / expert_weights {} must be [{}, {}]", op, expert_ids.shape().str(),
                expert_weights.shape().str(), T, k);
  KAPITSA_CALL(b, moe_route_softmax, logits, k, renormalize, expert_ids, expert_weights);
}

void moe_route_sigmoid(const Tensor& logits, const Tensor& bias, int k, int n_group, int topk_group, bool renormalize,
                       float scaling, const Tensor& expert_ids, const Tensor& expert_weights) {
  const BackendTable& b = current_backend();
  const char* op = "moe_route_sigmoid";
  f32(b, logits, op, "logits"), f32(b, expert_weights, op, "expert_weights"), present(b, expert_ids, op, "expert_ids");
  KAPITSA_CHECK(expert_ids.dtype() == DType::i32, "{}: expert_ids must be I32, got {}", op,
                dtype_name(expert_ids.dtype()));
  const int64_t E = logits.dim(-1), T = rows_of(logits);
  KAPITSA_CHECK(n_group >= 1 && E % n_group == 0 && topk_group >= 1 && topk_group <= n_group,
                "{}: {} experts in {} groups, topk_group {}", op, E, n_group, topk_group);
  KAPITSA_CHECK(k >= 1 && k <= topk_group * (E / n_group), "{}: k = {} with {} experts in reach", op, k,
                topk_group * (E / n_group));
  KAPITSA_CHECK(expert_ids.numel() == T * k && expert_weights.numel() == T * k,
                "{}: expert_ids {} / expert_weights {} must be [{}, {}]", op, expert_ids.shape().str(),
                expert_weights.shape().str(), T, k);
  if (!bias.empty()) {
    f32(b, bias, op, "bias");
    KAPITSA_CHECK(bias.numel() == E, "{}: bias {} for {} experts", op, bias.shape().str(), E);
  }
  KAPITSA_CALL(b, moe_route_sigmoid, logits, bias, k, n_group, topk_group, renormalize, scaling, expert_ids,
               expert_weights);
}

void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  const BackendTable& b = current_backend();
  f32(b, x, "gather_rows", "x"), f32(b, out, "gather_rows", "out");
  const int64_t H = x.dim(-1), T = rows_of(x), R = static_cast<int64_t>(rows.size());
  KAPITSA_CHECK(out.dim(-1) == H && out.numel() == R * H, "gather_rows: out {} for {} rows of width {}",
                out.shape().str(), R, H);
  for (size_t r = 0; r < rows.size(); ++r) in_range(rows[r], T, "gather_rows", "row", r);
  KAPITSA_CALL(b, gather_rows, x, rows, out);
}

void scale_add_rows(const Tensor& src, std::span<const int32_t> rows, std::span<const float> weights,
                    const Tensor& dst) {
  const BackendTable& b = current_backend();
  f32(b, src, "scale_add_rows", "src"), f32(b, dst, "scale_add_rows", "dst");
  const int64_t H = dst.dim(-1), T = rows_of(dst), R = static_cast<int64_t>(rows.size());
  KAPITSA_CHECK(weights.size() == rows.size(), "scale_add_rows: {} weights for {} rows", weights.size(), rows.size());
  KAPITSA_CHECK(src.dim(-1) == H && src.numel() == R * H, "scale_add_rows: src {} for {} rows of width {}",
                src.shape().str(), R, H);
  for (size_t r = 0; r < rows.size(); ++r) in_range(rows[r], T, "scale_add_rows", "row", r);
  KAPITSA_CALL(b, scale_add_rows, src, rows, weights, dst);
}

namespace {
// matmul_experts' (and matmul_experts_relu_squared's) argument checks, naming op.
void check_experts(const BackendTable& b, const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids,
                   const Tensor& y, const char* op) {
  f32(b, x, op, "x"), f32(b, y, op, "y"), present(b, expert_ids, op, "expert_ids");
  KAPITSA_CHECK(!experts.empty(), "{}: no experts", op);
  for (const Linear& w : experts) weight(b, w, op, "experts[e]");
  const Linear& w0 = experts[0];
  for (size_t e = 1; e < experts.size(); ++e) {
    const Linear& w = experts[e];
    KAPITSA_CHECK(w.format() == w0.format() && w.weight().dtype() == w0.weight().dtype() && w.rows() == w0.rows() &&
                      w.cols() == w0.cols() && w.bits() == w0.bits() && w.group_size() == w0.group_size(),
                  "{}: expert {} is {} {} [{}, {}], expert 0 {} {} [{}, {}]", op, e, weight_format_name(w.format()),
                  dtype_name(w.weight().dtype()), w.rows(), w.cols(), weight_format_name(w0.format()),
                  dtype_name(w0.weight().dtype()), w0.rows(), w0.cols());
  }
  KAPITSA_CHECK(expert_ids.dtype() == DType::i32 && expert_ids.rank() == 2, "{}: expert_ids must be [T, k] I32, got {} {}",
                op, dtype_name(expert_ids.dtype()), expert_ids.shape().str());
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1), N = w0.rows(), K = w0.cols();
  KAPITSA_CHECK(x.rank() == 2 && x.dim(0) == T && x.dim(1) == K, "{}: x {} must be [{}, {}]", op, x.shape().str(), T, K);
  KAPITSA_CHECK(y.rank() == 2 && y.dim(0) == T * k && y.dim(1) == N, "{}: y {} must be [{}, {}]", op, y.shape().str(),
                T * k, N);
  KAPITSA_CHECK(x.data() != y.data() || x.numel() == 0, "{}: y must not alias x", op);
  if (expert_ids.device() == Device::cpu) {
    const int32_t* ids = expert_ids.data_as<const int32_t>();
    for (int64_t i = 0; i < T * k; ++i)
      in_range(ids[i], static_cast<int64_t>(experts.size()), op, "expert id", static_cast<size_t>(i));
  }
}
}  // namespace

void matmul_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y) {
  const BackendTable& b = current_backend();
  check_experts(b, x, experts, expert_ids, y, "matmul_experts");
  KAPITSA_CALL(b, matmul_experts, x, experts, expert_ids, y);
}

void matmul_experts_relu_squared(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids,
                                 const Tensor& y) {
  const BackendTable& b = current_backend();
  check_experts(b, x, experts, expert_ids, y, "matmul_experts_relu_squared");
  KAPITSA_CALL(b, matmul_experts_relu_squared, x, experts, expert_ids, y);
}

void moe_combine(const Tensor& y, const Tensor& expert_weights, const Tensor& addend, const Tensor& out) {
  const BackendTable& b = current_backend();
  const char* op = "moe_combine";
  f32(b, y, op, "y"), f32(b, expert_weights, op, "expert_weights"), f32(b, out, op, "out");
  KAPITSA_CHECK(expert_weights.rank() == 2, "{}: expert_weights {} must be [T, k]", op, expert_weights.shape().str());
  const int64_t T = expert_weights.dim(0), k = expert_weights.dim(1), H = out.dim(-1);
  KAPITSA_CHECK(out.rank() == 2 && out.dim(0) == T, "{}: out {} must be [{}, H]", op, out.shape().str(), T);
  KAPITSA_CHECK(y.rank() == 2 && y.dim(0) == T * k && y.dim(1) == H, "{}: y {} must be [{}, {}]", op, y.shape().str(),
                T * k, H);
  KAPITSA_CHECK(y.data() != out.data() || y.numel() == 0, "{}: out must not alias y", op);
  if (!addend.empty()) {
    f32(b, addend, op, "addend");
    KAPITSA_CHECK(addend.shape() == out.shape(), "{}: addend {} must be out's shape {}", op, addend.shape().str(),
                  out.shape().str());
  }
  KAPITSA_CALL(b, moe_combine, y, expert_weights, addend, out);
}

// ---- batched, variable-length ----------------------------------------------------------------
void conv1d_causal_varlen(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& windows, bool silu,
                          const SeqBatch& batch, const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "conv1d_causal_varlen";
  f32(b, x, op, "x"), f32(b, w, op, "w"), f32(b, y, op, "y"), f32(b, windows, op, "windows");
  KAPITSA_CHECK(w.rank() == 2 && x.rank() == 2, "{}: x {} w {} must be [T, C] and [C, K]", op, x.shape().str(),
                w.shape().str());
  const int64_t C = w.dim(0), K = w.dim(1);
  KAPITSA_CHECK(K >= 1 && K <= kMaxConvWidth, "{}: kernel width {} outside [1, {}]", op, K, kMaxConvWidth);
  KAPITSA_CHECK(x.dim(1) == C && y.shape() == x.shape(), "{}: x {}, y {} for {} channels", op, x.shape().str(),
                y.shape().str(), C);
  KAPITSA_CHECK(windows.rank() == 3 && windows.dim(1) == K - 1 && windows.dim(2) == C,
                "{}: windows {} must be [n_slots, {}, {}]", op, windows.shape().str(), K - 1, C);
  if (!bias.empty()) {
    f32(b, bias, op, "bias");
    KAPITSA_CHECK(bias.numel() == C, "{}: bias {} for {} channels", op, bias.shape().str(), C);
  }
  check_batch_rows(batch, x.dim(0), op);
  check_batch_slots(batch, windows.dim(0), op);
  KAPITSA_CALL(b, conv1d_causal_varlen, x, w, bias, windows, silu, batch, y);
}

void gated_delta_rule_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const Tensor& states, const SeqBatch& batch, const Tensor& o) {
  const BackendTable& b = current_backend();
  const char* op = "gated_delta_rule_varlen";
  f32(b, states, op, "states");
  KAPITSA_CHECK(states.rank() == 4, "{}: states {} must be [n_slots, Hv, Dk, Dv]", op, states.shape().str());
  if (states.dim(0) > 0) check_gdn(b, q, k, v, g, beta, states.index(0), o, op);
  check_batch_rows(batch, q.dim(0), op);
  check_batch_slots(batch, states.dim(0), op);
  KAPITSA_CALL(b, gated_delta_rule_varlen, q, k, v, g, beta, states, batch, o);
}

void gdn_core_varlen(const Tensor& qkv, const Tensor& a, const Tensor& b_, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& z, const Tensor& norm_w, float norm_eps, const Tensor& states, const SeqBatch& batch,
                     const Tensor& o) {
  const BackendTable& b = current_backend();
  const char* op = "gdn_core_varlen";
  for (const Tensor* t : {&qkv, &a, &b_, &A_log, &dt_bias, &z, &norm_w, &states, &o}) f32(b, *t, op, "every tensor");
  KAPITSA_CHECK(states.rank() == 4 && qkv.rank() == 2, "{}: states {} must be [n_slots, Hv, Dk, Dv], qkv {} [T, C]",
                op, states.shape().str(), qkv.shape().str());
  const int64_t T = qkv.dim(0), Hv = states.dim(1), Dk = states.dim(2), Dv = states.dim(3);
  const int64_t qk = qkv.dim(1) - Hv * Dv, Hk = Dk > 0 ? qk / (2 * Dk) : 0;
  KAPITSA_CHECK(Hk > 0 && qk == 2 * Hk * Dk && Hv % Hk == 0, "{}: qkv {} is not [T, 2·Hk·{} + {}·{}] with Hv a multiple of Hk",
                op, qkv.shape().str(), Dk, Hv, Dv);
  KAPITSA_CHECK(o.rank() == 3 && o.dim(0) == T && o.dim(1) == Hv && o.dim(2) == Dv && z.shape() == o.shape(),
                "{}: o {} z {} for T={} Hv={} Dv={}", op, o.shape().str(), z.shape().str(), T, Hv, Dv);
  KAPITSA_CHECK(a.numel() == T * Hv && b_.numel() == T * Hv && A_log.numel() == Hv && dt_bias.numel() == Hv &&
                    norm_w.numel() == Dv,
                "{}: a {} b {} A_log {} dt_bias {} norm_w {} for T={} Hv={} Dv={}", op, a.shape().str(),
                b_.shape().str(), A_log.shape().str(), dt_bias.shape().str(), norm_w.shape().str(), T, Hv, Dv);
  for (const Tensor* t : {&qkv, &a, &b_, &z})
    KAPITSA_CHECK(o.numel() == 0 || t->data() != o.data(), "{}: o must not alias an input", op);
  check_batch_rows(batch, T, op);
  check_batch_slots(batch, states.dim(0), op);
  KAPITSA_CALL(b, gdn_core_varlen, qkv, a, b_, A_log, dt_bias, z, norm_w, norm_eps, states, batch, o);
}

void ssd_scan_varlen(const Tensor& xbc, int64_t n_groups, const Tensor& dt, const Tensor& A_log, const Tensor& D,
                     const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size, const Tensor& states,
                     const SeqBatch& batch, const Tensor& y) {
  const BackendTable& b = current_backend();
  const char* op = "ssd_scan_varlen";
  for (const Tensor* t : {&xbc, &dt, &A_log, &D, &dt_bias, &states, &y}) f32(b, *t, op, "every tensor");
  KAPITSA_CHECK(states.rank() == 4, "{}: states {} must be [n_slots, H, P, N]", op, states.shape().str());
  const int64_t H = states.dim(1), P = states.dim(2), N = states.dim(3), G = n_groups, T = xbc.dim(0);
  KAPITSA_CHECK(G > 0 && H % G == 0, "{}: {} heads not a multiple of {} groups", op, H, G);
  KAPITSA_CHECK(xbc.rank() == 2 && xbc.dim(1) == H * P + 2 * G * N, "{}: xbc {} must be [T, {}] (H·P + 2·G·N)", op,
                xbc.shape().str(), H * P + 2 * G * N);
  KAPITSA_CHECK(y.rank() == 3 && y.dim(0) == T && y.dim(1) == H && y.dim(2) == P, "{}: y {} must be [{}, {}, {}]", op,
                y.shape().str(), T, H, P);
  KAPITSA_CHECK(dt.numel() == T * H, "{}: dt {} for T={} H={}", op, dt.shape().str(), T, H);
  KAPITSA_CHECK(A_log.numel() == H && D.numel() == H && dt_bias.numel() == H,
                "{}: A_log {}, D {}, dt_bias {} for {} heads", op, A_log.shape().str(), D.shape().str(),
                dt_bias.shape().str(), H);
  KAPITSA_CHECK(y.numel() == 0 || y.data() != xbc.data(), "{}: y must not alias xbc", op);
  KAPITSA_CHECK(chunk_size >= 1, "{}: chunk_size {}", op, chunk_size);
  check_batch_rows(batch, T, op);
  check_batch_slots(batch, states.dim(0), op);
  KAPITSA_CALL(b, ssd_scan_varlen, xbc, n_groups, dt, A_log, D, dt_bias, dt_min, dt_max, chunk_size, states, batch, y);
}

void attention_paged_varlen(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const SeqBatch& batch,
                            float scale, const Tensor& o) {
  const BackendTable& b = current_backend();
  const char* op = "attention_paged_varlen";
  check_paged_attention(b, q, k_pages, v_pages, o, op);
  KAPITSA_CHECK(o.data() != q.data() || q.dim(0) == 0, "{}: o must not alias q", op);
  check_batch_rows(batch, q.dim(0), op);
  check_batch_pages(batch, k_pages, op);
  KAPITSA_CALL(b, attention_paged_varlen, q, k_pages, v_pages, batch, scale, o);
}

void write_paged_rows_varlen(const Tensor& rows, const Tensor& pages, const SeqBatch& batch) {
  const BackendTable& b = current_backend();
  const char* op = "write_paged_rows_varlen";
  f32(b, rows, op, "rows");
  check_pages(b, pages, op, "pages");
  KAPITSA_CHECK(rows.rank() == 3 && rows.dim(1) == pages.dim(2) && rows.dim(2) == pages.dim(3),
                "{}: rows {} for pages {}", op, rows.shape().str(), pages.shape().str());
  check_batch_rows(batch, rows.dim(0), op);
  check_batch_pages(batch, pages, op);
  KAPITSA_CALL(b, write_paged_rows_varlen, rows, pages, batch);
}

void attention_prep_varlen(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float weight_offset, std::span<const int32_t> positions,
                           std::span<const float> inv_freq, const Tensor& k_pages, const Tensor& v_pages,
                           const SeqBatch& batch, const Tensor& q, const Tensor& gate) {
  const BackendTable& b = current_backend();
  const char* op = "attention_prep_varlen";
  for (const Tensor* t : {&qg, &k, &v, &q_norm, &k_norm, &q, &gate}) f32(b, *t, op, "every tensor but the pages");
  check_pages(b, k_pages, op, "k_pages"), check_pages(b, v_pages, op, "v_pages");
  KAPITSA_CHECK(q.rank() == 3 && gate.shape() == q.shape() && k.rank() == 3 && v.shape() == k.shape(),
                "{}: q {} gate {} k {} v {}", op, q.shape().str(), gate.shape().str(), k.shape().str(), v.shape().str());
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  KAPITSA_CHECK(qg.numel() == T * Hq * 2 * D && k.dim(0) == T && k.dim(2) == D, "{}: qg {} k {} for q {}", op,
                qg.shape().str(), k.shape().str(), q.shape().str());
  KAPITSA_CHECK(k_pages.shape() == v_pages.shape() && k_pages.dtype() == v_pages.dtype() && k_pages.dim(2) == Hkv &&
                    k_pages.dim(3) == D,
                "{}: k_pages {} v_pages {} for {} kv heads of {}", op, k_pages.shape().str(), v_pages.shape().str(),
                Hkv, D);
  KAPITSA_CHECK(q_norm.numel() == D && k_norm.numel() == D, "{}: q_norm {} k_norm {} for head_dim {}", op,
                q_norm.shape().str(), k_norm.shape().str(), D);
  KAPITSA_CHECK(static_cast<int64_t>(positions.size()) == T, "{}: {} positions for {} tokens", op, positions.size(), T);
  const int64_t rotary_dim = static_cast<int64_t>(2 * inv_freq.size());
  KAPITSA_CHECK(rotary_dim > 0 && rotary_dim <= D, "{}: rotary_dim {} must be within head_dim {}", op, rotary_dim, D);
  for (const Tensor* t : {&q, &gate})
    KAPITSA_CHECK(T == 0 || (t->data() != qg.data() && t->data() != k.data() && t->data() != v.data()),
                  "{}: q and gate must not alias an input", op);
  check_batch_rows(batch, T, op);
  check_batch_pages(batch, k_pages, op);
  KAPITSA_CALL(b, attention_prep_varlen, qg, k, v, q_norm, k_norm, eps, weight_offset, positions, inv_freq, k_pages,
               v_pages, batch, q, gate);
}

void argmax_rows(const Tensor& x, int64_t columns, const Tensor& out) {
  const BackendTable& b = current_backend();
  const char* op = "argmax_rows";
  f32(b, x, op, "x"), present(b, out, op, "out");
  KAPITSA_CHECK(out.dtype() == DType::i32, "{}: out must be I32, got {}", op, dtype_name(out.dtype()));
  KAPITSA_CHECK(x.rank() == 2 && out.numel() == x.dim(0), "{}: x {} and out {} must be [R, V] and [R]", op,
                x.shape().str(), out.shape().str());
  KAPITSA_CHECK(columns >= 1 && columns <= x.dim(1), "{}: {} columns of rows of {}", op, columns, x.dim(1));
  KAPITSA_CALL(b, argmax_rows, x, columns, out);
}

}  // namespace kapitsa::ops
