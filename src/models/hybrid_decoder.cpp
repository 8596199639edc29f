// HybridDecoder: validation, step metadata, the residual trunk and the outputs (see hybrid_decoder.h).
#include "models/hybrid_decoder.h"

#include "base/log.h"
#include "models/hybrid_state.h"
#include "models/layers/moe.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>
#include <cstddef>
#include <optional>

namespace kapitsa::models {
namespace {

// Errors a caller can cause (nothing changed then); shape contracts are checks.
Status validate(const ForwardBatch& batch, const ForwardOutputs& outputs, const ModelInfo& info) {
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
  auto check_rows = [&](const ForwardOutputs::Rows& r, int64_t width, const char* what) {
    KAPITSA_CHECK(r.sequence < batch.sequences.size(), "{} rows of sequence {} of {}", what, r.sequence,
                  batch.sequences.size());
    const int64_t n = static_cast<int64_t>(batch.sequences[r.sequence].ids.size());
    for (int32_t row : r.rows) KAPITSA_CHECK(row >= 0 && row < n, "{} row {} of {} new tokens", what, row, n);
    KAPITSA_CHECK(r.out.shape() == Shape({static_cast<int64_t>(r.rows.size()), width}) && r.out.dtype() == DType::f32,
                  "{} out {} for {} rows of width {}", what, r.out.shape().str(), r.rows.size(), width);
  };
  for (const auto& r : outputs.logits) check_rows(r, info.vocab_size, "logits");
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
std::span<int32_t> take_ids(const ForwardBatch& batch, Workspace& ws) {
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

}  // namespace

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

// A plain decode step: one new token per sequence (at most kMaxGraphTokens), logits of each token and
// nothing else. Such a step computes the head over its rows into the workspace and copies each row
// out, and on cuda may run as a graph (graphs on or off, the same ops in the same order).
// Up to 16: dense matmuls of 2+ rows run in cuBLAS (its own fixed workspace), and routed MoE layers keep
// the router's choices on the device up to kDeviceRoutedMaxTokens (16) — beyond, they wait for them on
// the host, which a graph cannot repeat.
constexpr size_t kMaxGraphTokens = static_cast<size_t>(kDeviceRoutedMaxTokens);
bool plain_decode(const ForwardBatch& batch, const ForwardOutputs& outputs) {
  if (batch.sequences.size() > kMaxGraphTokens || !outputs.hidden.empty() || !outputs.all_layers.empty() ||
      !outputs.checkpoints.empty() || outputs.logits.size() != batch.sequences.size())
    return false;
  for (const auto& s : batch.sequences)
    if (s.ids.size() != 1) return false;
  for (const auto& r : outputs.logits)
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

// Tags that keep keys of other steps apart from plain decode's (whose first element is a token count).
constexpr uint64_t kVerifyStep = uint64_t{1} << 40, kMtpStep = uint64_t{2} << 40, kChainStep = uint64_t{3} << 40;

// What a few-row step's captured ops bake in beyond run_as_graph's shared part:
// - every sequence's row count: the sizes of the step's host spans (the mirror's layout), and launch
//   shapes decided on the host from them (the conv's longest sequence; the fused decode op of the GDN
//   layers when every sequence has one row);
// - every sequence's checkpoint count, and whether checkpoints were given at all: the checkpoint spans
//   sit before the block tables in the mirror, and the scans write checkpoints only when given them;
// - whether the head's logits are computed (its matmul is one of the ops).
// What changes between two steps of one key (ids, positions, block tables, state and checkpoint slot
// ids) is read from the mirrored metadata. Hidden rows are copied out of `normed` after the step.
std::vector<uint64_t> few_rows_key(uint64_t tag, const StepBatch& step, bool logits) {
  const ops::SeqBatch& seqs = step.seqs;
  const bool ckpts = !seqs.ckpt_offsets.empty();
  std::vector<uint64_t> key = {tag, static_cast<uint64_t>(seqs.n_seqs()), ckpts, logits};
  for (size_t i = 0; i < static_cast<size_t>(seqs.n_seqs()); ++i) {
    key.push_back(static_cast<uint64_t>(seqs.rows(static_cast<int64_t>(i))));
    key.push_back(ckpts ? static_cast<uint64_t>(seqs.ckpt_offsets[i + 1] - seqs.ckpt_offsets[i]) : 0);
  }
  return key;
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
  KAPITSA_CHECK(ws.device() == device_, "a workspace on another device than the model");
  std::optional<ops::ScopedBackend> on_device;  // a model on the GPU runs on its backend whatever the thread's
  if (device_ != Device::cpu) on_device.emplace(ops::backend_for(device_));
  ws.begin_step();
  // The ids, then the step's metadata: one host range, mirrored to the device below.
  const std::span<int32_t> ids = take_ids(batch, ws);
  KAPITSA_TRY(const StepBatch step, build_step(batch, outputs, ws));
  const int64_t T = step.n_tokens, H = info_.hidden_size;
  const Tensor& all_layers = outputs.all_layers;

  const bool decode = device_ != Device::cpu && plain_decode(batch, outputs);
  const bool few = !decode && ops::spec_step_graphs_enabled(device_) && few_rows(batch, outputs);
  // The head over every row into the workspace, the wanted rows copied out after the step's ops.
  const bool whole = decode || few;
  const bool want_logits = !outputs.logits.empty();
  const Tensor logits = whole && want_logits ? ws.take(DType::f32, {T, info_.vocab_size}) : Tensor();
  const Tensor x = ws.take(DType::f32, {T, H});  // the residual stream
  const Tensor normed = ws.take(DType::f32, {T, H});
  const Tensor mixed = ws.take(DType::f32, {T, H});
  const MirroredMetadata mirrored(device_, ws);

  const auto body = [&] { trunk(step, ids, x, normed, mixed, Tensor(), logits, ctx); };
  const bool replayed =
      (decode && run_as_graph({static_cast<uint64_t>(T)}, ops::StepKind::decode, step, ws, body)) ||
      (few && run_as_graph(few_rows_key(kVerifyStep, step, want_logits), ops::StepKind::verify, step, ws, body));
  if (!replayed) trunk(step, ids, x, normed, mixed, all_layers, logits, ctx);
  if (decode) {
    for (const auto& r : outputs.logits) {
      const int64_t row = step.seqs.row_offsets[r.sequence];
      store(logits.rows(row, row + 1), r.out);
    }
  } else if (few) {
    for (const auto& r : outputs.logits) store_rows(logits, step.seqs.row_offsets[r.sequence], r.rows, r.out);
    for (const auto& r : outputs.hidden) store_rows(normed, step.seqs.row_offsets[r.sequence], r.rows, r.out);
  } else {
    write_outputs(batch, outputs, normed, ws);
  }
  ops::synchronize(device_);  // the one wait of a step: outputs copied to the host are complete
  for (const auto& s : batch.sequences) static_cast<HybridState&>(*s.state).advance(static_cast<int64_t>(s.ids.size()));
  return ok_status();
}

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
  KAPITSA_CHECK(ws.device() == device_, "a workspace on another device than the model");
  std::optional<ops::ScopedBackend> on_device;
  if (device_ != Device::cpu) on_device.emplace(ops::backend_for(device_));
  ws.begin_step();
  const std::span<int32_t> ids0 = take_ids(batch, ws);
  std::span<int32_t> G = ws.take_span<int32_t>(n * static_cast<size_t>(steps));
  std::fill(G.begin(), G.end(), 0);
  std::span<int32_t> last_rows = ws.take_span<int32_t>(n);  // step 0's row of each sequence's guess
  std::vector<StepBatch> chain;
  std::vector<uint64_t> key = {kChainStep, static_cast<uint64_t>(steps), static_cast<uint64_t>(columns),
                               !checkpoint_slots.empty()};
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
  if (outputs.logits.empty()) return;
  if (outputs.logits.size() == 1 && contiguous(outputs.logits[0].rows)) {
    const auto& r = outputs.logits[0];
    const int64_t first = begins[r.sequence] + r.rows.front();
    const Tensor out = on_device(r.out);
    ops::matmul(normed.rows(first, first + static_cast<int64_t>(r.rows.size())), head_, out);
    if (out.data() != r.out.data()) store(out, r.out);
    return;
  }
  // Every requested row through the head at once (its weights read once).
  size_t total = 0;
  for (const auto& r : outputs.logits) total += r.rows.size();
  std::span<int32_t> rows = ws.take_span<int32_t>(total);
  size_t n = 0;
  for (const auto& r : outputs.logits)
    for (int32_t row : r.rows) rows[n++] = static_cast<int32_t>(begins[r.sequence] + row);
  const Tensor picked = ws.take(DType::f32, {static_cast<int64_t>(total), info_.hidden_size});
  const Tensor logits = ws.take(DType::f32, {static_cast<int64_t>(total), info_.vocab_size});
  ops::gather_rows(normed, rows, picked);
  ops::matmul(picked, head_, logits);
  int64_t from = 0;
  for (const auto& r : outputs.logits) {
    store(logits.rows(from, from + static_cast<int64_t>(r.rows.size())), r.out);
    from += static_cast<int64_t>(r.rows.size());
  }
}

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
    for (const Tensor* t : {&s.logits, &s.out_hidden})
      KAPITSA_CHECK(t->empty() || (t->rank() == 2 && (t->dim(0) == n || t->dim(0) == 1) && t->dtype() == DType::f32 &&
                                   t->dim(1) == (t == &s.logits ? V : H)),
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
  KAPITSA_CHECK(ws.device() == device_, "a workspace on another device than the model");
  std::optional<ops::ScopedBackend> on_device;
  if (device_ != Device::cpu) on_device.emplace(ops::backend_for(device_));
  ws.begin_step();
  const ForwardBatch batch{batch_seqs};
  const std::span<int32_t> ids = take_ids(batch, ws);
  KAPITSA_TRY(const StepBatch step, build_step(batch, ForwardOutputs{}, ws, positions0));
  const int64_t T = step.n_tokens;
  const Tensor e = ws.take(DType::f32, {T, H}), h = ws.take(DType::f32, {T, H});   // embedding, hidden
  const Tensor normed = ws.take(DType::f32, {T, H});                               // the head's output
  // With spec-step graphs on (the default) a step of a few rows may run as a graph: its ops then compute the
  // head's logits over every row into the workspace, and the wanted rows are copied out after.
  const bool few = ops::spec_step_graphs_enabled(device_) && static_cast<size_t>(T) <= kMaxGraphTokens;
  const bool want_logits =
      std::any_of(sequences.begin(), sequences.end(), [](const MtpRows& s) { return !s.logits.empty(); });
  const Tensor logits = few && want_logits ? ws.take(DType::f32, {T, V}) : Tensor();
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
  };
  // The key as a verification step's (few_rows_key), without checkpoints.
  if (!(few && run_as_graph(few_rows_key(kMtpStep, step, want_logits), ops::StepKind::mtp_head, step, ws, body)))
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
    row += n;
  }
  ops::synchronize(device_);
  return ok_status();
}

void HybridDecoder::mtp_head(const StepBatch&, const Tensor&, const Tensor&, const Tensor&, ForwardContext&) const {
  KAPITSA_CHECK(false, "{}: mtp_head without a loaded head", info_.model_type);
}

}  // namespace kapitsa::models
