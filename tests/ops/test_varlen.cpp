// Tests of the batched, variable-length ops (SeqBatch): on random ragged batches (lengths 1, 2, 63, 64,
// 65, 130 and mixes), with states in shuffled slots of a larger slot array, every backend (ref included)
// must give what the single-sequence ref op gives on each sequence alone: outputs and final states,
// checkpoint j equal to the state after the sequence's first len - n + j + 1 tokens (n = min(k, len)
// for k in {1, 2, 5, 16}; windows that cross chunk boundaries included), and slots the batch does not
// name untouched bit for bit. Tolerance 1e-5 relative (the op tests' cpu-vs-ref bound).
#include "op_test_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

// Batch metadata plus the vectors it views.
struct Ragged {
  std::vector<int64_t> lens, offsets;
  std::vector<int32_t> slots, ckpt_offsets, ckpt_slots;
  std::vector<int64_t> positions0;
  std::vector<int32_t> block_offsets, block_tables;
  int64_t n_slots = 0;
  int64_t rows() const { return offsets.back(); }
  int64_t n_ckpts(size_t i) const { return ckpt_offsets.empty() ? 0 : ckpt_offsets[i + 1] - ckpt_offsets[i]; }
  SeqBatch batch() const { return {offsets, slots, ckpt_offsets, ckpt_slots, positions0, block_offsets, block_tables}; }
};

// Sequences of the given lengths with min(k, len) checkpoints each (none when k = 0), every slot drawn
// without repetition from a shuffled array with 3 slots to spare.
Ragged make_ragged(Rng& r, const std::vector<int64_t>& lens, int64_t k) {
  Ragged g;
  g.lens = lens;
  g.offsets = {0};
  for (int64_t n : lens) g.offsets.push_back(g.offsets.back() + n);
  int64_t total_ckpts = 0;
  for (int64_t n : lens) total_ckpts += std::min(k, n);
  g.n_slots = static_cast<int64_t>(lens.size()) + total_ckpts + 3;
  std::vector<int32_t> ids(static_cast<size_t>(g.n_slots));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), r.gen);
  size_t next = 0;
  for (size_t i = 0; i < lens.size(); ++i) g.slots.push_back(ids[next++]);
  if (k > 0) {
    g.ckpt_offsets = {0};
    for (int64_t n : lens) {
      for (int64_t j = 0; j < std::min(k, n); ++j) g.ckpt_slots.push_back(ids[next++]);
      g.ckpt_offsets.push_back(static_cast<int32_t>(g.ckpt_slots.size()));
    }
  }
  return g;
}

const std::vector<std::vector<int64_t>> kLengths = {{1, 2, 63, 64, 65, 130}, {1, 1, 1, 1, 1}, {130}, {5, 1, 64, 2, 1}};
const std::vector<int64_t> kCheckpoints = {0, 1, 2, 5, 16};

// Runs one case: `single(state, a, b)` runs the single-sequence ref op on rows [a, b) of sequence
// rows with that state (writing outputs into `want`); `varlen(b, states, batch, out)` runs the op under
// test on backend b (through test::run, so device backends get device copies of every tensor).
// states0: [n_slots, state...]; outputs compared over all rows.
struct VarlenCase {
  const Ragged& g;
  const Buffer& states0;
  Shape out_shape;
  std::function<void(const Tensor& state, int64_t a, int64_t b, const Tensor& out)> single;
  std::function<void(const BackendTable& b, const Tensor& states, const SeqBatch& batch, const Tensor& out)> varlen;
};

// The expectation is computed once (the single-sequence ref ops) and checked against each backend of
// `on` (ref's varlen op and the backend under test).
void check_varlen(const VarlenCase& c, const std::vector<const BackendTable*>& on) {
  const Ragged& g = c.g;
  // Expected: each sequence alone from its initial state (the final state and outputs in one call;
  // checkpoint 0 from a fresh run over its first len - n + 1 tokens, each next one a token further from
  // the one before: a ref varlen op that split the rows anywhere else, or wrote a checkpoint into
  // another slot, differs).
  Buffer want_out = Buffer::zeros(DType::f32, c.out_shape), want_states = test::clone(c.states0);
  Buffer scratch_out = Buffer::zeros(DType::f32, c.out_shape);
  for (size_t i = 0; i < g.lens.size(); ++i) {
    const int64_t r0 = g.offsets[i], len = g.lens[i], n = g.n_ckpts(i);
    Buffer state = test::clone(c.states0.tensor().index(g.slots[i]));
    c.single(state, r0, r0 + len, want_out);
    std::memcpy(want_states.tensor().index(g.slots[i]).data(), state.tensor().data(), state.tensor().nbytes());
    Buffer s = test::clone(c.states0.tensor().index(g.slots[i]));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t end = r0 + len - n + j + 1;
      c.single(s, j == 0 ? r0 : end - 1, end, scratch_out);
      const int32_t slot = g.ckpt_slots[static_cast<size_t>(g.ckpt_offsets[i] + j)];
      std::memcpy(want_states.tensor().index(slot).data(), s.tensor().data(), s.tensor().nbytes());
    }
  }
  std::vector<bool> named(static_cast<size_t>(g.n_slots), false);
  for (int32_t s : g.slots) named[static_cast<size_t>(s)] = true;
  for (int32_t s : g.ckpt_slots) named[static_cast<size_t>(s)] = true;
  for (const BackendTable* b : on) {
    SCOPED_TRACE(std::string(b->name));
    Buffer states = test::clone(c.states0), out = Buffer::zeros(DType::f32, c.out_shape);
    c.varlen(*b, states, g.batch(), out);
    EXPECT_LE(relative_error(out, want_out), 1e-5) << "outputs";
    for (int64_t s = 0; s < g.n_slots; ++s) {
      const Tensor got = states.tensor().index(s), want = want_states.tensor().index(s);
      if (named[static_cast<size_t>(s)])
        EXPECT_LE(relative_error(got, want), 1e-5) << "slot " << s;
      else
        EXPECT_TRUE(test::bit_equal(got, c.states0.tensor().index(s))) << "unused slot " << s << " was written";
    }
  }
}

// The backend under test and, in the "cpu" instance, ref's varlen op too (it composes the single ones;
// once is enough: the other instances, cpu levels and cuda, would check the same code again).
std::vector<const BackendTable*> with_ref(const BackendTable& b) {
  if (b.name == "cpu") return {&test::ref(), &b};
  return {&b};
}

std::string label(const std::vector<int64_t>& lens, int64_t k) {
  std::string s = "lens";
  for (int64_t n : lens) s += " " + std::to_string(n);
  return s + " k=" + std::to_string(k);
}

// Rows of N(0,1)-ish values scaled to unit L2 norm times `scale` (q, k of Gated DeltaNet).
Buffer unit_rows(Rng& r, Shape shape, float scale) {
  Buffer b = test::random_f32(r, shape);
  const int64_t D = shape[shape.rank - 1];
  for (int64_t row = 0; row < shape.numel() / D; ++row) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(b.f32()[row * D + i]) * b.f32()[row * D + i];
    for (int64_t i = 0; i < D; ++i) b.f32()[row * D + i] *= static_cast<float>(scale / std::sqrt(ss + 1e-6));
  }
  return b;
}

TEST_P(OnBackend, GatedDeltaRuleVarlenMatchesEachSequenceAlone) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t Hk = 1, Hv = 2, Dk = 32, Dv = 40;
  for (const auto& lens : kLengths)
    for (int64_t k : kCheckpoints) {
      SCOPED_TRACE(label(lens, k));
      const Ragged g = make_ragged(r, lens, k);
      const int64_t T = g.rows();
      Buffer q = unit_rows(r, {T, Hk, Dk}, 1.0f / std::sqrt(float(Dk))), kk = unit_rows(r, {T, Hk, Dk}, 1.0f);
      Buffer v = test::random_f32(r, {T, Hv, Dv}), gate = test::random_f32(r, {T, Hv}, -2.0f, -1e-3f);
      Buffer beta = test::random_f32(r, {T, Hv}, 0.01f, 0.99f);
      Buffer states0 = test::random_f32(r, {g.n_slots, Hv, Dk, Dv}, -0.5f, 0.5f);
      VarlenCase c{g,
                   states0,
                   {T, Hv, Dv},
                   [&](const Tensor& state, int64_t a, int64_t b, const Tensor& out) {
                     auto form = b - a == 1 ? gated_delta_rule_recurrent : gated_delta_rule_chunked;
                     test::run(test::ref(), form, q.tensor().rows(a, b), kk.tensor().rows(a, b), v.tensor().rows(a, b),
                               gate.tensor().rows(a, b), beta.tensor().rows(a, b), state, out.rows(a, b));
                   },
                   [&](const BackendTable& on, const Tensor& states, const SeqBatch& batch, const Tensor& out) {
                     test::run(on, gated_delta_rule_varlen, q, kk, v, gate, beta, states, batch, out);
                   }};
      check_varlen(c, with_ref(backend()));
    }
}

// gdn_core_varlen (norms, gates, delta rule and output norm in one op) against ref's, which composes the
// separate ref ops: decode batches (one token a sequence, as the models call it) and ragged ones with
// checkpoints; head shapes for each of the cuda kernel's variants (Dk 32, Dv 40: 160 threads; the
// Qwen3.5 head 128/128: 512 threads; Dv 256: 1024 threads). Outputs and every slot within 1e-5; qkv
// (read only) and the slots the batch does not name stay bit-equal.
TEST_P(OnBackend, GdnCoreVarlenMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Heads {
    int64_t Hk, Hv, Dk, Dv;
  };
  const std::vector<std::vector<int64_t>> lengths = {{1, 1, 1}, {1}, {5, 1, 64, 2, 1}};
  for (const Heads h : {Heads{2, 4, 32, 40}, Heads{1, 2, 128, 128}, Heads{1, 1, 64, 256}})
    for (const auto& lens : lengths)
      for (int64_t k : {int64_t{0}, int64_t{2}}) {
        SCOPED_TRACE(label(lens, k) + " Dk=" + std::to_string(h.Dk) + " Dv=" + std::to_string(h.Dv));
        const Ragged g = make_ragged(r, lens, k);
        const int64_t T = g.rows();
        Buffer qkv = test::random_f32(r, {T, 2 * h.Hk * h.Dk + h.Hv * h.Dv});
        Buffer a = test::random_f32(r, {T, h.Hv}, -3.0f, 3.0f), b = test::random_f32(r, {T, h.Hv}, -3.0f, 3.0f);
        Buffer A_log = test::random_f32(r, {h.Hv}, -1.0f, 1.0f), dt_bias = test::random_f32(r, {h.Hv});
        Buffer z = test::random_f32(r, {T, h.Hv, h.Dv}, -2.0f, 2.0f), w = test::random_f32(r, {h.Dv}, 0.5f, 1.5f);
        Buffer states0 = test::random_f32(r, {g.n_slots, h.Hv, h.Dk, h.Dv}, -0.5f, 0.5f);
        auto call = [&](const BackendTable& on, Buffer& states, Buffer& out) {
          test::run(on, gdn_core_varlen, qkv, a, b, A_log, dt_bias, z, w, 1e-6f, states, g.batch(), out);
        };
        Buffer want_states = test::clone(states0), want = Buffer::zeros(DType::f32, {T, h.Hv, h.Dv});
        call(test::ref(), want_states, want);
        Buffer qkv0 = test::clone(qkv), states = test::clone(states0), out = Buffer::zeros(DType::f32, {T, h.Hv, h.Dv});
        call(backend(), states, out);
        EXPECT_LE(relative_error(out, want), 1e-5) << "outputs";
        EXPECT_TRUE(test::bit_equal(qkv, qkv0)) << "qkv was written";
        std::vector<bool> named(static_cast<size_t>(g.n_slots), false);
        for (int32_t s : g.slots) named[static_cast<size_t>(s)] = true;
        for (int32_t s : g.ckpt_slots) named[static_cast<size_t>(s)] = true;
        for (int64_t s = 0; s < g.n_slots; ++s) {
          const Tensor got = states.tensor().index(s);
          if (named[static_cast<size_t>(s)])
            EXPECT_LE(relative_error(got, want_states.tensor().index(s)), 1e-5) << "slot " << s;
          else
            EXPECT_TRUE(test::bit_equal(got, states0.tensor().index(s))) << "unused slot " << s << " was written";
        }
      }
}

// Speculative decoding keeps a verified row only where it equals the row decoding would have given: so
// a sequence's rows computed together (a verification: 5 rows with checkpoints, beside a one-row
// sequence) must equal, bit for bit, the same rows computed one call each (decoding), for the fused
// GDN op and the conv — outputs, the final state and each checkpoint.
TEST_P(OnBackend, RowsTogetherEqualRowsOneByOne) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t Hk = 1, Hv = 2, Dk = 128, Dv = 128, n = 5, C = 2 * Hk * Dk + Hv * Dv, K = 4;
  const Ragged together = make_ragged(r, {n, 1}, n);
  const int64_t T = together.rows();
  Buffer qkv = test::random_f32(r, {T, C}), a = test::random_f32(r, {T, Hv}, -3, 3), b = test::random_f32(r, {T, Hv}, -3, 3);
  Buffer A_log = test::random_f32(r, {Hv}, -1, 1), dt_bias = test::random_f32(r, {Hv});
  Buffer z = test::random_f32(r, {T, Hv, Dv}, -2, 2), norm_w = test::random_f32(r, {Dv}, 0.5f, 1.5f);
  Buffer conv_w = test::random_f32(r, {C, K}), conv_b = test::random_f32(r, {C});
  Buffer states0 = test::random_f32(r, {together.n_slots, Hv, Dk, Dv}, -0.5f, 0.5f);
  Buffer windows0 = test::random_f32(r, {together.n_slots, K - 1, C}, -2, 2);
  const int32_t slot = together.slots[0];

  Buffer states = test::clone(states0), windows = test::clone(windows0);
  Buffer out = Buffer::zeros(DType::f32, {T, Hv, Dv}), conv_out = Buffer::zeros(DType::f32, {T, C});
  test::run(backend(), gdn_core_varlen, qkv, a, b, A_log, dt_bias, z, norm_w, 1e-6f, states, together.batch(), out);
  test::run(backend(), conv1d_causal_varlen, qkv, conv_w, conv_b, windows, true, together.batch(), conv_out);

  // The first sequence's rows one call each, from the same state and window.
  Buffer states1 = test::clone(states0), windows1 = test::clone(windows0);
  const std::vector<int64_t> offsets = {0, 1};
  const std::vector<int32_t> slots = {slot};
  const SeqBatch one{offsets, slots, {}, {}, {}, {}, {}};
  for (int64_t t = 0; t < n; ++t) {
    SCOPED_TRACE("row " + std::to_string(t));
    Buffer o1 = Buffer::zeros(DType::f32, {1, Hv, Dv}), c1 = Buffer::zeros(DType::f32, {1, C});
    const auto row = [&](const Buffer& x) { return x.tensor().rows(t, t + 1); };
    test::run(backend(), gdn_core_varlen, row(qkv), row(a), row(b), A_log, dt_bias, row(z), norm_w, 1e-6f, states1, one, o1);
    test::run(backend(), conv1d_causal_varlen, row(qkv), conv_w, conv_b, windows1, true, one, c1);
    EXPECT_TRUE(test::bit_equal(o1, out.tensor().rows(t, t + 1))) << "GDN output";
    EXPECT_TRUE(test::bit_equal(c1, conv_out.tensor().rows(t, t + 1))) << "conv output";
    const int32_t ckpt = together.ckpt_slots[static_cast<size_t>(t)];
    EXPECT_TRUE(test::bit_equal(states1.tensor().index(slot), states.tensor().index(ckpt))) << "GDN checkpoint";
    EXPECT_TRUE(test::bit_equal(windows1.tensor().index(slot), windows.tensor().index(ckpt))) << "conv checkpoint";
  }
  EXPECT_TRUE(test::bit_equal(states1.tensor().index(slot), states.tensor().index(slot))) << "GDN state";
  EXPECT_TRUE(test::bit_equal(windows1.tensor().index(slot), windows.tensor().index(slot))) << "conv window";
}

TEST_P(OnBackend, SsdScanVarlenMatchesEachSequenceAlone) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t H = 4, P = 8, G = 2, chunk = 32;
  // N = 128 (the released models') and 16: the cuda kernel's float4 rows at 16 and 2 registers a lane.
  for (int64_t N : {16, 128})
    for (const auto& lens : kLengths)
      for (int64_t k : kCheckpoints) {
        SCOPED_TRACE(label(lens, k) + " N=" + std::to_string(N));
      const Ragged g = make_ragged(r, lens, k);
      const int64_t T = g.rows();
      Buffer x = test::random_f32(r, {T, H, P}), dt = test::random_f32(r, {T, H}, -4.0f, 2.0f);
      Buffer B = test::random_f32(r, {T, G, N}), C = test::random_f32(r, {T, G, N});
      // The op reads them as the columns of one array (the conv output's x | B | C).
      Buffer xbc = Buffer::allocate(DType::f32, {T, H * P + 2 * G * N});
      const Tensor columns[] = {x.tensor().reshape({T, H * P}), B.tensor().reshape({T, G * N}),
                                C.tensor().reshape({T, G * N})};
      test::run(test::ref(), concat_columns, std::span<const Tensor>(columns), xbc);
      Buffer A_log = test::random_f32(r, {H}, -1.0f, 2.0f), D = test::random_f32(r, {H}, 0.5f, 1.5f);
      Buffer dt_bias = test::random_f32(r, {H}, -2.0f, 0.5f);
      Buffer states0 = test::random_f32(r, {g.n_slots, H, P, N}, -0.5f, 0.5f);
      const float inf = std::numeric_limits<float>::infinity();
      VarlenCase c{g,
                   states0,
                   {T, H, P},
                   [&](const Tensor& state, int64_t a, int64_t b, const Tensor& out) {
                     const Tensor xa = x.tensor().rows(a, b), dta = dt.tensor().rows(a, b);
                     const Tensor Ba = B.tensor().rows(a, b), Ca = C.tensor().rows(a, b);
                     if (b - a == 1)
                       test::run(test::ref(), ssd_scan_recurrent, xa, dta, Ba, Ca, A_log, D, dt_bias, 0.0f, inf, state,
                                 out.rows(a, b));
                     else
                       test::run(test::ref(), ssd_scan_chunked, xa, dta, Ba, Ca, A_log, D, dt_bias, 0.0f, inf, chunk,
                                 state, out.rows(a, b));
                   },
                   [&](const BackendTable& on, const Tensor& states, const SeqBatch& batch, const Tensor& out) {
                     test::run(on, ssd_scan_varlen, xbc, G, dt, A_log, D, dt_bias, 0.0f, inf, chunk, states, batch,
                               out);
                   }};
      check_varlen(c, with_ref(backend()));
    }
}

TEST_P(OnBackend, Conv1dVarlenMatchesEachSequenceAlone) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t K : {4, 3})
    for (const auto& lens : kLengths)
      for (int64_t k : kCheckpoints) {
        SCOPED_TRACE(label(lens, k) + " K=" + std::to_string(K));
        const int64_t C = 37;  // a SIMD body and a scalar tail
        const Ragged g = make_ragged(r, lens, k);
        const int64_t T = g.rows();
        Buffer x = test::random_f32(r, {T, C}, -2, 2), w = test::random_f32(r, {C, K}), bias = test::random_f32(r, {C});
        Buffer windows0 = test::random_f32(r, {g.n_slots, K - 1, C}, -2, 2);
        VarlenCase c{g,
                     windows0,
                     {T, C},
                     [&](const Tensor& window, int64_t a, int64_t b, const Tensor& out) {
                       test::run(test::ref(), conv1d_causal, x.tensor().rows(a, b), w, bias, window, true,
                                 out.rows(a, b));
                     },
                     [&](const BackendTable& on, const Tensor& windows, const SeqBatch& batch, const Tensor& out) {
                       test::run(on, conv1d_causal_varlen, x, w, bias, windows, true, batch, out);
                     }};
        check_varlen(c, with_ref(backend()));
      }
}

// Attention metadata for g's sequences: a random past (0 … 300 cached tokens) each, and block tables
// over shuffled ids of pages of P tokens (those needed plus `spare`). Returns the page count.
int64_t add_pages(Rng& r, Ragged& g, int64_t P, int64_t spare, int64_t max_past = 300) {
  std::uniform_int_distribution<int64_t> past(0, max_past);
  int64_t pages_needed = 0;
  for (int64_t len : g.lens) {
    g.positions0.push_back(past(r.gen));
    pages_needed += (g.positions0.back() + len + P - 1) / P;
  }
  const int64_t n_pages = pages_needed + spare;
  std::vector<int32_t> ids(static_cast<size_t>(n_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), r.gen);
  g.block_offsets = {0};
  size_t next = 0;
  for (size_t i = 0; i < g.lens.size(); ++i) {
    for (int64_t p = 0; p < (g.positions0[i] + g.lens[i] + P - 1) / P; ++p) g.block_tables.push_back(ids[next++]);
    g.block_offsets.push_back(static_cast<int32_t>(g.block_tables.size()));
  }
  return n_pages;
}

// Attention over every sequence's pages in one call against attention_paged per sequence (ref), and
// write_paged_rows_varlen against write_paged_rows per sequence (bit for bit), for each KV dtype. Head
// dims 32 (every length mix) and the models' 64, 128, 256 with grouped queries on the first mix and on
// one 130-row prompt without history (batches of 64 rows or more take the cuda backend's tiled prompt
// kernel, whose 32-row tiles then hold several sequences, or one starting at position 0).
TEST_P(OnBackend, AttentionPagedVarlenMatchesEachSequenceAlone) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Heads {
    int64_t Hq, Hkv, D;
    std::vector<std::vector<int64_t>> mixes;
    int64_t max_past;
  };
  std::vector<Heads> heads = {{4, 2, 32, kLengths, 300},        {4, 1, 256, {kLengths[0]}, 300},
                              {4, 2, 128, {kLengths[0]}, 300},   {2, 1, 64, {kLengths[0]}, 300},
                              {8, 2, 256, {{130}}, 0}};
  // Under AddressSanitizer (no cuda there) the head dim 32 mixes only: the wide heads were ~75 s of cpu
  // time in the sanitizer pass, for the cpu kernel the release pass checks at them anyway.
  if (testing::kUnderAddressSanitizer) heads.resize(1);
  const int64_t P = 16;
  for (const Heads& hd : heads) {
    for (DType dt : {DType::f32, DType::bf16})
      for (const auto& lens : hd.mixes) {
        const int64_t Hq = hd.Hq, Hkv = hd.Hkv, D = hd.D;
        const float scale = 1.0f / std::sqrt(float(D));
        SCOPED_TRACE(label(lens, 0) + " " + std::string(dtype_name(dt)) + fmt::format(" Hq={} Hkv={} D={}", Hq, Hkv, D));
        Ragged g = make_ragged(r, lens, 0);
        const int64_t n_pages = add_pages(r, g, P, 5, hd.max_past);
        const int64_t T = g.rows();
        Buffer q = test::random_f32(r, {T, Hq, D}, -2, 2);
        Buffer k_new = test::random_f32(r, {T, Hkv, D}, -2, 2), v_new = test::random_f32(r, {T, Hkv, D});
        // Pages: random history (in the pages' dtype) everywhere, then the new rows written per sequence by ref.
        Buffer k_pages = kapitsa::testing::random_buffer(r.gen, dt, {n_pages, P, Hkv, D}, -2, 2);
        Buffer v_pages = kapitsa::testing::random_buffer(r.gen, dt, {n_pages, P, Hkv, D});
        Buffer k_want = test::clone(k_pages), v_want = test::clone(v_pages);
        const SeqBatch batch = g.batch();
        for (size_t i = 0; i < lens.size(); ++i) {
          const Tensor kr = k_new.tensor().rows(g.offsets[i], g.offsets[i + 1]);
          const Tensor vr = v_new.tensor().rows(g.offsets[i], g.offsets[i + 1]);
          test::run(test::ref(), write_paged_rows, kr, k_want, batch.block_table(int64_t(i)), g.positions0[i]);
          test::run(test::ref(), write_paged_rows, vr, v_want, batch.block_table(int64_t(i)), g.positions0[i]);
        }
        Buffer o_want = Buffer::zeros(DType::f32, {T, Hq, D});
        for (size_t i = 0; i < lens.size(); ++i) {
          const int64_t r0 = g.offsets[i], r1 = g.offsets[i + 1];
          test::run(test::ref(), attention_paged, q.tensor().rows(r0, r1), k_want, v_want, batch.block_table(int64_t(i)),
                    g.positions0[i] + r1 - r0, g.positions0[i], scale, o_want.tensor().rows(r0, r1));
        }
        for (const BackendTable* b : with_ref(backend())) {
          SCOPED_TRACE(std::string(b->name));
          Buffer kp = test::clone(k_pages), vp = test::clone(v_pages), o = Buffer::zeros(DType::f32, {T, Hq, D});
          test::run(*b, write_paged_rows_varlen, k_new, kp, batch);
          test::run(*b, write_paged_rows_varlen, v_new, vp, batch);
          EXPECT_TRUE(test::bit_equal(kp, k_want) && test::bit_equal(vp, v_want)) << "pages written";
          test::run(*b, attention_paged_varlen, q, kp, vp, batch, scale, o);
          EXPECT_LE(relative_error(o, o_want), 1e-5);
        }
      }
  }
}

// attention_prep_varlen against ref's composition (split, rms_norm, rope_neox, write_paged_rows_varlen),
// for f32 and bf16 pages, a partial rotary dim as Qwen3.5's (a quarter of the head) and a full one:
// q and gate within 1e-5 (gate exactly: a copy), the pages of f32 within 1e-5 and of bf16 within bf16
// rounding (an element may round the other way after a 1e-7 difference), k and v unchanged.
TEST_P(OnBackend, AttentionPrepVarlenMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t Hq = 4, Hkv = 2, P = 16;
  for (const int64_t D : {int64_t{64}, int64_t{256}})
    for (DType dt : {DType::f32, DType::bf16})
      for (const auto& lens : std::vector<std::vector<int64_t>>{{1, 1, 1}, {5, 1, 64, 2, 1}}) {
        SCOPED_TRACE(label(lens, 0) + " D=" + std::to_string(D) + " " + std::string(dtype_name(dt)));
        Ragged g = make_ragged(r, lens, 0);
        const int64_t n_pages = add_pages(r, g, P, 3);
        std::vector<int32_t> positions;  // each row's position
        for (size_t i = 0; i < lens.size(); ++i)
          for (int64_t j = 0; j < lens[i]; ++j) positions.push_back(static_cast<int32_t>(g.positions0[i] + j));
        const int64_t T = g.rows(), rotary = D == 256 ? 64 : D;
        std::vector<float> inv_freq(static_cast<size_t>(rotary / 2));
        for (size_t i = 0; i < inv_freq.size(); ++i)
          inv_freq[i] = static_cast<float>(std::pow(1e6, -2.0 * double(i) / double(rotary)));
        Buffer qg = test::random_f32(r, {T, Hq * 2 * D}, -2, 2);
        Buffer k = test::random_f32(r, {T, Hkv, D}, -2, 2), v = test::random_f32(r, {T, Hkv, D});
        Buffer qn = test::random_f32(r, {D}, -0.5f, 0.5f), kn = test::random_f32(r, {D}, -0.5f, 0.5f);
        Buffer k_pages = kapitsa::testing::random_buffer(r.gen, dt, {n_pages, P, Hkv, D}, -2, 2);
        Buffer v_pages = kapitsa::testing::random_buffer(r.gen, dt, {n_pages, P, Hkv, D});
        const SeqBatch batch = g.batch();
        auto call = [&](const BackendTable& on, Buffer& kp, Buffer& vp, Buffer& q, Buffer& gate) {
          test::run(on, attention_prep_varlen, qg, k, v, qn, kn, 1e-6f, 1.0f, std::span<const int32_t>(positions),
                    std::span<const float>(inv_freq), kp, vp, batch, q, gate);
        };
        Buffer kp_want = test::clone(k_pages), vp_want = test::clone(v_pages);
        Buffer q_want = Buffer::zeros(DType::f32, {T, Hq, D}), gate_want = Buffer::zeros(DType::f32, {T, Hq, D});
        call(test::ref(), kp_want, vp_want, q_want, gate_want);
        Buffer kp = test::clone(k_pages), vp = test::clone(v_pages), k0 = test::clone(k), v0 = test::clone(v);
        Buffer q = Buffer::zeros(DType::f32, {T, Hq, D}), gate = Buffer::zeros(DType::f32, {T, Hq, D});
        call(backend(), kp, vp, q, gate);
        EXPECT_LE(relative_error(q, q_want), 1e-5) << "q";
        EXPECT_TRUE(test::bit_equal(gate, gate_want)) << "gate";
        EXPECT_TRUE(test::bit_equal(vp, vp_want)) << "v pages";
        EXPECT_LE(relative_error(kp, kp_want), dt == DType::f32 ? 1e-5 : 1e-3) << "k pages";
        EXPECT_TRUE(test::bit_equal(k, k0) && test::bit_equal(v, v0)) << "k or v written";
      }
}

// Metadata errors are caught in front of the table: a slot named twice, a checkpoint count above the
// sequence's length, row offsets that do not cover the activations.
TEST(Varlen, BadBatchesAreClearErrors) {
  test::threadsafe_death_tests();
  Rng r;
  const int64_t C = 8, K = 4;
  Buffer x = test::random_f32(r, {3, C}), w = test::random_f32(r, {C, K}), y = Buffer::zeros(DType::f32, {3, C});
  Buffer windows = test::random_f32(r, {4, K - 1, C});
  const std::vector<int64_t> offsets = {0, 1, 3}, short_offsets = {0, 1, 2};
  const std::vector<int32_t> slots = {1, 1}, good_slots = {1, 2}, ckpt_offsets = {0, 2, 2}, ckpt_slots = {0, 3};
  EXPECT_DEATH(conv1d_causal_varlen(x, w, Tensor(), windows, true, SeqBatch{offsets, slots}, y),
               "slot 1 written twice");
  EXPECT_DEATH(conv1d_causal_varlen(x, w, Tensor(), windows, true, SeqBatch{short_offsets, good_slots}, y),
               "row offsets must run from 0 to the 3 rows");
  EXPECT_DEATH(
      conv1d_causal_varlen(x, w, Tensor(), windows, true, SeqBatch{offsets, good_slots, ckpt_offsets, ckpt_slots}, y),
      "2 checkpoints for the 1 tokens of sequence 0");
}

}  // namespace
}  // namespace kapitsa::ops
