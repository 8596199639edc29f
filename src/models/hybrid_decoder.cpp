// HybridDecoder: step metadata, the residual trunk, forward and its outputs, steps as graphs (see
// hybrid_decoder.h; the MTP head's steps in hybrid_mtp.cpp, chained greedy steps in hybrid_chain.cpp).
#include "models/hybrid_decoder.h"

#include "base/log.h"
#include "models/hybrid_state.h"
#include "models/hybrid_steps.h"
#include "models/layers/moe.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>
#include <cstddef>

namespace kapitsa::models {
using namespace hybrid;

std::shared_ptr<StateSlotPool> HybridDecoder::slot_pool() const {
  std::lock_guard lock(slot_pool_mu_);
  if (!slot_pool_) {
    RecurrentLayout layout = recurrent_layout_;
    layout.device = device_;
    slot_pool_ = std::make_shared<StateSlotPool>(layout);
  }
  return slot_pool_;
}

KvLayout HybridDecoder::kv_layout() const {
  KvLayout layout = kv_layout_;
  layout.device = device_;
  return layout;
}

void HybridDecoder::keep_device_weights(WeightLoader& loader) {
  invariant_rows_ = loader.invariant_rows();
  if (device_ == Device::cpu) {
    device_weights_ = loader.take_device_weights();  // FP8 weights dequantized at load, if any
    return;
  }
  log::info("weights on {}: {:.2f} GiB", device_ == Device::cuda ? "the GPU" : "the device",
            static_cast<double>(loader.device_bytes()) / (1ull << 30));
  device_weights_ = loader.take_device_weights();
}

HybridDecoder::MirroredMetadata::MirroredMetadata(Device d, Workspace& ws) : device(d) {
  const std::span<const std::byte> metadata = ws.host_taken();
  ops::mirror_step_metadata(device, metadata.data(), metadata.size());
}

HybridDecoder::MirroredMetadata::~MirroredMetadata() { ops::clear_step_metadata(device); }

void HybridDecoder::store(const Tensor& src, const Tensor& out) const {
  if (out.device() == device_) ops::copy(src, out);
  else ops::copy_bytes(out, src, /*wait=*/false);
}

std::unique_ptr<SequenceState> HybridDecoder::new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool) const {
  auto state = std::make_unique<HybridState>(max_tokens, pool ? std::move(pool) : default_kv_pool(), slot_pool());
  const KvLayout& have = state->pool().layout();
  KAPITSA_CHECK(have.n_layers == kv_layout_.n_layers && have.n_kv_heads == kv_layout_.n_kv_heads &&
                    have.head_dim == kv_layout_.head_dim,
                "KV pool made for {} attention layers, model has {}", have.n_layers, kv_layout_.n_layers);
  KAPITSA_CHECK(have.device == device_, "KV pool on another device than the model (make it from kv_layout())");
  return state;
}

Status HybridDecoder::load_embedding_and_head(WeightLoader& loader, const std::string& embedding_name,
                                              const std::string& head_name, bool tied) {
  const int64_t V = info_.vocab_size, H = info_.hidden_size;
  {
    WeightLoader::Share gathered(loader, 0.0);  // a token reads one row of it
    KAPITSA_TRY(embedding_, loader.linear(embedding_name, {V, H}));
  }
  if (tied && !loader.contains(head_name)) {
    head_ = embedding_;
    loader.count(head_);
  } else {
    KAPITSA_TRY(head_, loader.linear(head_name, {V, H}));
  }
  return ok_status();
}

std::span<int32_t> HybridDecoder::take_block_tables(const ForwardBatch& batch, Workspace& ws) const {
  size_t n_blocks = 0;
  for (const auto& s : batch.sequences) n_blocks += s.state->kv_pages().size();
  std::span<int32_t> tables = ws.take_span<int32_t>(n_blocks);
  size_t at = 0;
  for (const auto& s : batch.sequences) {
    const std::span<const int32_t> table = s.state->kv_pages();
    std::copy(table.begin(), table.end(), tables.begin() + static_cast<std::ptrdiff_t>(at));
    at += table.size();
  }
  return tables;
}

Expected<StepBatch> HybridDecoder::build_step(const ForwardBatch& batch, const ForwardOutputs& outputs,
                                              Workspace& ws, std::span<const int64_t> first_positions,
                                              bool with_block_tables) const {
  const size_t n = batch.sequences.size();
  StepBatch step;
  for (const auto& s : batch.sequences) step.n_tokens += static_cast<int64_t>(s.ids.size());
  // Sizes fixed by the step's shape first, the block tables (which grow with the context) last: a
  // decode graph reads each array at the same place every step (ops/step_graph.h).
  std::span<int64_t> row_offsets = ws.take_span<int64_t>(n + 1);
  std::span<int64_t> positions0 = ws.take_span<int64_t>(n);
  std::span<int32_t> state_slots = ws.take_span<int32_t>(n);
  std::span<int32_t> block_offsets = ws.take_span<int32_t>(n + 1);
  std::span<int32_t> positions = ws.take_span<int32_t>(static_cast<size_t>(step.n_tokens));
  std::span<int32_t> ckpt_offsets, ckpt_slots;
  if (!outputs.checkpoints.empty()) {
    size_t n_ckpts = 0;
    for (const auto& c : outputs.checkpoints) n_ckpts += c.slots.size();
    ckpt_offsets = ws.take_span<int32_t>(n + 1);
    ckpt_slots = ws.take_span<int32_t>(n_ckpts);
  }
  row_offsets[0] = 0;
  block_offsets[0] = 0;
  for (size_t j = 0; j < n; ++j) {
    const SequenceState& state = *batch.sequences[j].state;
    const int64_t begin = row_offsets[j], length = static_cast<int64_t>(batch.sequences[j].ids.size());
    row_offsets[j + 1] = begin + length;
    positions0[j] = first_positions.empty() ? state.n_past() : first_positions[j];
    state_slots[j] = state.state_slot();
    block_offsets[j + 1] = block_offsets[j] + static_cast<int32_t>(state.kv_pages().size());
    for (int64_t t = 0; t < length; ++t) positions[static_cast<size_t>(begin + t)] = static_cast<int32_t>(positions0[j] + t);
  }
  step.seqs.row_offsets = row_offsets;
  step.seqs.state_slots = state_slots;
  step.seqs.positions0 = positions0;
  step.seqs.block_offsets = block_offsets;
  if (with_block_tables) step.seqs.block_tables = take_block_tables(batch, ws);
  if (!outputs.checkpoints.empty()) {
    // Checkpoint slots in sequence order.
    std::fill(ckpt_offsets.begin(), ckpt_offsets.end(), 0);
    for (const auto& c : outputs.checkpoints) {
      KAPITSA_CHECK(ckpt_offsets[c.sequence + 1] == 0, "checkpoints of sequence {} given twice", c.sequence);
      ckpt_offsets[c.sequence + 1] = static_cast<int32_t>(c.slots.size());
    }
    for (size_t j = 0; j < n; ++j) ckpt_offsets[j + 1] += ckpt_offsets[j];
    for (const auto& c : outputs.checkpoints)
      std::copy(c.slots.begin(), c.slots.end(), ckpt_slots.begin() + ckpt_offsets[c.sequence]);
    step.seqs.ckpt_offsets = ckpt_offsets;
    step.seqs.ckpt_slots = ckpt_slots;
  }
  step.positions = positions;
  const SequenceState& first = *batch.sequences.front().state;
  step.kv = first.kv_pool();
  step.slots = first.slot_pool();
  return step;
}

namespace {

// A plain decode step: one new token per sequence (at most kMaxGraphTokens), the logits (or their argmax)
// of each token and nothing else. Such a step computes the head over its rows into the workspace and
// copies each row out, and on cuda may run as a graph (graphs on or off, the same ops in the same order).
bool plain_decode(const ForwardBatch& batch, const ForwardOutputs& outputs) {
  if (batch.sequences.size() > kMaxGraphTokens || !outputs.hidden.empty() || !outputs.all_layers.empty() ||
      !outputs.checkpoints.empty() || outputs.logits.size() + outputs.argmax.size() != batch.sequences.size())
    return false;
  for (const auto& s : batch.sequences)
    if (s.ids.size() != 1) return false;
  for (const auto& r : outputs.logits)
    if (r.rows.size() != 1 || r.rows[0] != 0) return false;
  for (const auto& r : outputs.argmax)
    if (r.rows.size() != 1 || r.rows[0] != 0) return false;
  return true;
}

// Any other step of at most kMaxGraphTokens rows in all (a speculative verification: several rows a
// sequence, logits of several rows, recurrent-state checkpoints, hidden rows for the MTP head), except
// one that wants every layer's output (stored between the layers). With spec-step graphs on (the default) such
// a step runs like plain decode: the head over every row into the workspace, the wanted logits and
// hidden rows copied out after the step's ops, so the ops may be captured as a graph.
bool few_rows(const ForwardBatch& batch, const ForwardOutputs& outputs) {
  size_t n = 0;
  for (const auto& s : batch.sequences) n += s.ids.size();
  return outputs.all_layers.empty() && n <= kMaxGraphTokens;
}

}  // namespace

int64_t HybridDecoder::max_graph_rows() const {
  if (!ops::step_graphs_enabled(device_)) return 0;
  return static_cast<int64_t>(ops::spec_step_graphs_enabled(device_) ? kMaxGraphTokens : 1);
}

Status HybridDecoder::forward(const ForwardBatch& batch, const ForwardOutputs& outputs, ForwardContext& ctx) const {
  KAPITSA_RETURN_IF_ERROR(validate(batch, outputs, info_));
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages(batch.sequences));
  Workspace& ws = ctx.workspace;
  const StepOnDevice on_device(device_, ws);
  // The ids, then the step's metadata: one host range, mirrored to the device below.
  const std::span<int32_t> ids = take_ids(batch, ws);
  KAPITSA_TRY(const StepBatch step, build_step(batch, outputs, ws));
  const int64_t T = step.n_tokens, H = info_.hidden_size;
  const Tensor& all_layers = outputs.all_layers;

  const bool decode = device_ != Device::cpu && plain_decode(batch, outputs);
  const bool few = !decode && ops::spec_step_graphs_enabled(device_) && few_rows(batch, outputs);
  // The head over every row into the workspace (and the argmax of every row when any is wanted), the
  // wanted rows copied out after the step's ops.
  const bool whole = decode || few;
  const bool want_argmax = !outputs.argmax.empty(), want_head = want_argmax || !outputs.logits.empty();
  const Tensor logits = whole && want_head ? ws.take(DType::f32, {T, info_.vocab_size}) : Tensor();
  const Tensor best = whole && want_argmax ? ws.take(DType::i32, {T, 1}) : Tensor();
  const Tensor x = ws.take(DType::f32, {T, H});  // the residual stream
  const Tensor normed = ws.take(DType::f32, {T, H});
  const Tensor mixed = ws.take(DType::f32, {T, H});
  const MirroredMetadata mirrored(device_, ws);

  const auto body = [&](const Tensor& layers_out) {
    trunk(step, ids, x, normed, mixed, layers_out, logits, ctx);
    if (!best.empty()) ops::argmax_rows(logits, info_.vocab_size, best);
  };
  const auto graph_body = [&] { body(Tensor()); };
  const bool replayed =
      (decode && run_as_graph({static_cast<uint64_t>(T), want_argmax}, ops::StepKind::decode, step, ws, graph_body)) ||
      (few && run_as_graph(few_rows_key(kVerifyStep, step, want_head, want_argmax), ops::StepKind::verify, step, ws,
                           graph_body));
  if (!replayed) body(all_layers);
  if (decode) {
    for (const auto& r : outputs.logits) {
      const int64_t row = step.seqs.row_offsets[r.sequence];
      store(logits.rows(row, row + 1), r.out);
    }
    for (const auto& r : outputs.argmax) {
      const int64_t row = step.seqs.row_offsets[r.sequence];
      store(best.rows(row, row + 1), r.out);
    }
  } else if (few) {
    for (const auto& r : outputs.logits) store_rows(logits, step.seqs.row_offsets[r.sequence], r.rows, r.out);
    for (const auto& r : outputs.argmax) store_rows(best, step.seqs.row_offsets[r.sequence], r.rows, r.out);
    for (const auto& r : outputs.hidden) store_rows(normed, step.seqs.row_offsets[r.sequence], r.rows, r.out);
  } else {
    write_outputs(batch, outputs, normed, ws);
  }
  ops::synchronize(device_);  // the one wait of a step: outputs copied to the host are complete
  for (const auto& s : batch.sequences) static_cast<HybridState&>(*s.state).advance(static_cast<int64_t>(s.ids.size()));
  return ok_status();
}

void HybridDecoder::trunk(const StepBatch& step, std::span<const int32_t> ids, const Tensor& x, const Tensor& normed,
                          const Tensor& mixed, const Tensor& all_layers, const Tensor& logits,
                          ForwardContext& ctx) const {
  const int64_t L = info_.n_layers;
  ops::embedding(embedding_, ids, x);
  if (!all_layers.empty()) store(x, all_layers.index(0));
  // A block's output (mixed) is added to the residual stream by the next norm, in one op (one kernel
  // on a GPU instead of two); `pending` says mixed still waits for that.
  bool pending = false;
  auto norm = [&](const Tensor& w) {
    if (pending) ops::add_rms_norm(x, mixed, w, norm_eps_, norm_weight_offset_, normed);
    else ops::rms_norm(x, w, norm_eps_, norm_weight_offset_, normed);
    pending = false;
  };
  for (size_t i = 0; i < static_cast<size_t>(L); ++i) {
    for (size_t b = 0; b < block_norms_[i].size(); ++b) {
      norm(block_norms_[i][b]);
      block_forward(i, b, step, normed, mixed, ctx);
      pending = true;
    }
    if (!all_layers.empty() && static_cast<int64_t>(i) + 1 < L) {
      ops::add(x, mixed, x);
      pending = false;
      store(x, all_layers.index(static_cast<int64_t>(i) + 1));
    }
  }
  norm(final_norm_);
  if (!all_layers.empty()) store(normed, all_layers.index(L));
  if (!logits.empty()) ops::matmul(normed, head_, logits);
}

void HybridDecoder::store_rows(const Tensor& src, int64_t begin, std::span<const int32_t> rows,
                              const Tensor& out) const {
  // One copy per run of consecutive rows (usually the whole span).
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    const int64_t from = begin + rows[i], n = static_cast<int64_t>(j - i);
    store(src.rows(from, from + n), out.rows(static_cast<int64_t>(i), static_cast<int64_t>(j)));
    i = j;
  }
}

bool HybridDecoder::run_as_graph(std::vector<uint64_t> key, ops::StepKind kind, const StepBatch& step, Workspace& ws,
                                 const std::function<void()>& body) const {
  if (!ops::step_graphs_enabled(device_) || ws.overflowed() || ws.host_taken().empty()) return false;
  // Everything a captured op bakes in besides the caller's part (the step's kind and shape): the split-K
  // bucket of the longest sequence, memory generation, the workspace's and the pools' arrays (they move
  // when they grow).
  int64_t max_keys = 0;
  for (int64_t i = 0; i < step.seqs.n_seqs(); ++i)
    max_keys = std::max(max_keys, step.seqs.positions0[static_cast<size_t>(i)] + step.seqs.rows(i));
  key.insert(key.end(), {static_cast<uint64_t>(ops::attention_key_bucket(max_keys)), ops::step_graph_generation(device_),
                         reinterpret_cast<uintptr_t>(ws.tensor_block()), ws.capacity_bytes(),
                         reinterpret_cast<uintptr_t>(step.kv), reinterpret_cast<uintptr_t>(step.slots)});
  auto add_tensor = [&](const Tensor& t) {
    key.push_back(reinterpret_cast<uintptr_t>(t.data()));
    key.push_back(t.rank() > 0 ? static_cast<uint64_t>(t.dim(0)) : 0);
  };
  if (step.kv != nullptr)
    for (int64_t l = 0; l < step.kv->layout().n_layers; ++l) add_tensor(step.kv->k(l)), add_tensor(step.kv->v(l));
  if (step.slots != nullptr)
    for (int64_t l = 0; l < step.slots->layout().n_layers; ++l) add_tensor(step.slots->conv(l)), add_tensor(step.slots->ssm(l));

  std::lock_guard lock(graphs_mu_);
  if (graphs_.size() > 64 && graphs_.find(key) == graphs_.end()) graphs_.clear();  // mostly stale keys
  CapturedStep& entry = graphs_[key];
  if (!entry.graph) {
    // The first step of a key runs eagerly (the workspace and scratch reach their sizes); a capture
    // that failed twice is not tried again.
    if (++entry.seen < 2 || entry.failures >= 2) return false;
    ops::begin_step_capture(device_);
    body();
    entry.graph = ops::end_step_capture(device_, kind);
    if (entry.graph && ws.overflowed()) entry.graph.reset();  // it would point into this step's overflow
    if (!entry.graph) {
      ++entry.failures;
      log::debug("{} step of {} tokens not captured: {}",
                 kind == ops::StepKind::decode ? "decode" : kind == ops::StepKind::verify ? "verification" : "MTP head",
                 step.n_tokens, ws.overflowed() ? "workspace overflow" : ops::step_capture_failure());
      return false;
    }
  }
  entry.graph->launch();
  return true;
}

void HybridDecoder::write_outputs(const ForwardBatch& batch, const ForwardOutputs& outputs, const Tensor& normed,
                                  Workspace& ws) const {
  Workspace::Scope scope(ws);
  // Row r of sequence j is row begin(j) + r of the step.
  std::span<int64_t> begins = ws.take_span<int64_t>(batch.sequences.size());
  int64_t at = 0;
  for (size_t j = 0; j < batch.sequences.size(); ++j) {
    begins[j] = at;
    at += static_cast<int64_t>(batch.sequences[j].ids.size());
  }
  auto contiguous = [](std::span<const int32_t> rows) {
    for (size_t i = 1; i < rows.size(); ++i)
      if (rows[i] != rows[i - 1] + 1) return false;
    return !rows.empty();
  };
  // Where an output is computed: itself when it lives on the model's device, else a scratch copy
  // stored into it (copied back) afterwards.
  auto on_device = [&](const Tensor& out) { return out.device() == device_ ? out : ws.take(out.dtype(), out.shape()); };
  for (const auto& r : outputs.hidden) {
    std::span<int32_t> rows = ws.take_span<int32_t>(r.rows.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(begins[r.sequence] + r.rows[i]);
    const Tensor out = on_device(r.out);
    ops::gather_rows(normed, rows, out);
    if (out.data() != r.out.data()) store(out, r.out);
  }
  // The head over the requested rows: their logits, or the argmax of each row's logits.
  if (outputs.logits.empty() && outputs.argmax.empty()) return;
  if (outputs.argmax.empty() && outputs.logits.size() == 1 && contiguous(outputs.logits[0].rows)) {
    const auto& r = outputs.logits[0];
    const int64_t first = begins[r.sequence] + r.rows.front();
    const Tensor out = on_device(r.out);
    ops::matmul(normed.rows(first, first + static_cast<int64_t>(r.rows.size())), head_, out);
    if (out.data() != r.out.data()) store(out, r.out);
    return;
  }
  // Every requested row through the head in one matmul (its weights read once), in sequence order
  // whichever output a sequence asked for: a row's logits are then the same bits whether the other
  // sequences asked for logits or for argmaxes (a GPU matmul's sums depend on its row count).
  struct Request {
    const ForwardOutputs::Rows* rows;
    bool argmax;
  };
  std::vector<Request> requests;
  for (const auto& r : outputs.logits) requests.push_back({&r, false});
  for (const auto& r : outputs.argmax) requests.push_back({&r, true});
  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.rows->sequence < b.rows->sequence; });
  size_t total = 0;
  for (const Request& q : requests) total += q.rows->rows.size();
  std::span<int32_t> rows = ws.take_span<int32_t>(total);
  size_t n = 0;
  for (const Request& q : requests)
    for (int32_t row : q.rows->rows) rows[n++] = static_cast<int32_t>(begins[q.rows->sequence] + row);
  const int64_t R = static_cast<int64_t>(total);
  const Tensor picked = ws.take(DType::f32, {R, info_.hidden_size});
  const Tensor logits = ws.take(DType::f32, {R, info_.vocab_size});
  ops::gather_rows(normed, rows, picked);
  ops::matmul(picked, head_, logits);
  const Tensor best = outputs.argmax.empty() ? Tensor() : ws.take(DType::i32, {R, 1});
  if (!best.empty()) ops::argmax_rows(logits, info_.vocab_size, best);
  int64_t from = 0;
  for (const Request& q : requests) {
    const int64_t len = static_cast<int64_t>(q.rows->rows.size());
    store((q.argmax ? best : logits).rows(from, from + len), q.rows->out);
    from += len;
  }
}

}  // namespace kapitsa::models
