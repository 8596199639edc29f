// Model: the interface every architecture implements, and load_model(), which picks the architecture
// from config.json through the registry. A Model is immutable after loading (weights are mmapped
// views); everything a sequence accumulates lives in its SequenceState.
#pragma once

#include "base/status.h"
#include "models/kv_pages.h"
#include "models/state_slots.h"
#include "models/workspace.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::models {

struct ModelInfo {
  std::string model_type;       // config.json model_type, e.g. "qwen3_5"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;
  std::string summary;          // one line for logs: layers, heads, experts
  // Weight bytes one decode step reads (all dense matrices, the active experts' share, the output
  // head; not the embedding table): the denominator of the memory-bandwidth roofline. 0 if unknown.
  int64_t weight_bytes_per_token = 0;
  // Bytes of every loaded weight matrix (embedding and head once each, all experts): what stays resident.
  int64_t resident_weight_bytes = 0;
  // Layers of the loaded multi-token-prediction head (Qwen3.5 mtp.*; Model::forward_mtp): 0 when none.
  int64_t mtp_layers = 0;
};

// Per-sequence memory: attention KV for every attention layer (pages of a KvPagePool, addressed by
// the state's block table), conv windows and f32 recurrent state for every recurrent layer.
// Architecture-specific inside; the runtime only sees this interface.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t n_past() const { return n_past_; }       // tokens already folded into the state
  int64_t capacity() const { return capacity_; }   // most tokens it can hold
  // The most memory it can occupy: its own part plus KV pages for `capacity` tokens.
  virtual size_t bytes() const = 0;
  // A snapshot: shares the KV pages it has (reference counts; a later write into a shared, partly
  // filled page copies that page first) and copies the recurrent state.
  virtual std::unique_ptr<SequenceState> clone() const = 0;
  // The same with room for `capacity` tokens (>= n_past): the runtime trims snapshots to what they
  // hold and grows states without recomputing. Null when unsupported or capacity < n_past.
  virtual std::unique_ptr<SequenceState> resized(int64_t capacity) const { return nullptr; }
  // Paged KV: the pages it references (page i holds tokens [i·P, (i+1)·P)) and their pool; empty and
  // null for states without paged KV.
  virtual std::span<const int32_t> kv_pages() const { return {}; }
  virtual const KvPagePool* kv_pool() const { return nullptr; }
  // Pages its pool must supply before n more tokens are folded (new pages, copy-on-write).
  virtual int64_t kv_pages_needed(int64_t n) const { return 0; }
  // Bytes besides KV pages (the recurrent state, copied by every snapshot).
  virtual size_t own_bytes() const { return bytes(); }
  // Its recurrent state: a slot of slot_pool() (-1 and null for states without one).
  virtual int32_t state_slot() const { return -1; }
  virtual StateSlotPool* slot_pool() const { return nullptr; }
  // Speculative decoding: after a forward that folded tokens with per-token checkpoints
  // (ForwardOutputs::checkpoints), keep only the first `n_past` tokens (at least the n_past before that
  // forward). The recurrent state becomes the one checkpointed in `checkpoint_slot` by swapping slot ids
  // (the caller's id then names the discarded state; -1 keeps the current state: every token was kept),
  // and the KV pages past n_past are released. No copy, no recompute.
  virtual void rollback(int64_t n_past, int32_t& checkpoint_slot);

 protected:
  int64_t n_past_ = 0;
  int64_t capacity_ = 0;
};

// The sequences of one forward step. Each continues its state: its new tokens sit at positions
// state->n_past() … and use the state's KV block table and recurrent-state slot. All states of a step
// share one KV page pool and one state slot pool.
struct ForwardBatch {
  struct Sequence {
    std::span<const int32_t> ids;  // new tokens, at least one
    SequenceState* state = nullptr;
  };
  std::span<const Sequence> sequences;
};

// What a forward step returns. Rows are indices into one sequence's new tokens.
struct ForwardOutputs {
  struct Rows {
    size_t sequence = 0;             // index into ForwardBatch::sequences
    std::span<const int32_t> rows;   // e.g. the last k+1, to verify k draft tokens
    Tensor out;                      // logits: [rows.size(), V] f32;  hidden: [rows.size(), H] f32;  argmax: [rows.size(), 1] i32
  };
  std::span<const Rows> logits;
  // Instead of a row's logits, only their argmax (the first maximum; a NaN never wins: ops::argmax_rows):
  // what a greedy choice needs, without bringing a row of the vocabulary's width back from a GPU.
  std::span<const Rows> argmax;
  std::span<const Rows> hidden;      // the final-normed residual stream, what the head reads (MTP, drafters)
  // [L+1, T, H] f32 (single-sequence steps): row 0 the embeddings, row i the output of layer i-1, row L
  // the final-normed output, as the reference fixtures lay it out. Empty: not wanted.
  Tensor all_layers;
  // Per-token recurrent-state checkpoints: slot j (of the state's slot_pool()) receives the recurrent
  // state after token n - k + j + 1 of the sequence's n new tokens (k = slots.size() <= n), so that
  // accepting a prefix of speculated tokens selects a slot instead of recomputing.
  struct Checkpoints {
    size_t sequence = 0;
    std::span<const int32_t> slots;
  };
  std::span<const Checkpoints> checkpoints;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Where its weights, KV pages, recurrent state and step workspace live, and so which backend its
  // forward runs on (LoadOptions::device). Outputs may be host tensors whatever the device: they are
  // copied back once per step.
  virtual Device device() const { return Device::cpu; }
  // The most rows a step may have and still run as one captured CUDA graph (0: never, as on the cpu).
  virtual int64_t max_graph_rows() const { return 0; }
  // The most rows a step may have and still give every row exactly the logits it gets alone (its
  // matmuls' ops::matmul_invariant_rows, routed experts' included; on a device an MoE model's at most
  // kDeviceRoutedMaxTokens, where its experts switch kernels). 0: no claim past one row.
  // The engine keeps a speculative step within it where plain decoding would be (EngineOptions).
  virtual int64_t invariant_rows() const { return 0; }

  // A fresh state for a sequence of up to `max_tokens` tokens whose KV lives in `pool` (made from
  // kv_layout(); null: the model's own unbounded pool, for single-sequence tools and tests). Pages are
  // taken as tokens are folded; forward fails (changing nothing) when the pool has too few.
  virtual std::unique_ptr<SequenceState> new_state(int64_t max_tokens,
                                                   std::shared_ptr<KvPagePool> pool = nullptr) const = 0;
  // The KV one token needs, for sizing pools.
  virtual KvLayout kv_layout() const = 0;

  // The one entry point: a step over every sequence of `batch` at once (weights read once per step),
  // advancing each state by its new tokens and writing the rows `outputs` asks for. Scratch comes from
  // ctx.workspace (a step starts it). All sequences are validated first: on error (token ids outside
  // the vocabulary, more tokens than a state holds, KV pool full) nothing is changed.
  virtual Status forward(const ForwardBatch& batch, const ForwardOutputs& outputs, ForwardContext& ctx) const = 0;

  // Thin wrappers over it, with the model's own workspace (one step at a time per model):
  // Runs `ids` after what `state` already holds and advances it by ids.size().
  //   logits: [T, V] f32 for every position, or [1, V] for the last position only.
  //   hidden: empty, or [L+1, T, H] f32 (ForwardOutputs::all_layers).
  Status forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                 const Tensor& hidden = {}) const;
  // Several sequences at once (continuous batching): each item's tokens continue its own state and
  // give its own logits ([n, V] or [1, V]).
  struct BatchItem {
    std::span<const int32_t> ids;
    SequenceState* state = nullptr;
    Tensor logits;
  };
  Status forward_batch(std::span<const BatchItem> items) const;
  // forward(batch, outputs, ctx) with the model's own workspace (one step at a time per model).
  Status run_step(const ForwardBatch& batch, const ForwardOutputs& outputs) const;

  // The multi-token-prediction head (info().mtp_layers > 0), one sequence's rows: row i pairs token
  // ids[i] with the target's final-normed hidden row hidden[i] of the token before it and runs at
  // position position0 + i, attending over the head's own KV (the last layer of the sequence's KV
  // layout), which it writes; the state's n_past is unchanged. Positions past n_past take the pages
  // the next forward over them would take (a rollback releases them). Row i's output predicts the
  // token two after hidden[i]'s token.
  struct MtpRows {
    SequenceState* state = nullptr;
    int64_t position0 = 0;
    std::span<const int32_t> ids;  // [n]
    Tensor hidden;                 // [n, H] f32
    Tensor logits;                 // [n, V] or [1, V] (the last row) f32; empty: not wanted
    Tensor out_hidden;             // [n, H] or [1, H] f32 after mtp.norm (the next recursive step's hidden)
    Tensor argmax;                 // [n, 1] or [1, 1] i32: the argmax of those logits (ops::argmax_rows)
                                   // instead of the logits themselves; empty: not wanted
  };
  virtual Status forward_mtp(std::span<const MtpRows> sequences, ForwardContext& ctx) const;
  // forward_mtp with the model's own workspace.
  Status run_mtp(std::span<const MtpRows> sequences) const;

  // Greedy guessing in one call (a draft model's proposal; on a GPU one captured graph and one wait
  // instead of a round trip a guess). Step 0 folds each sequence's ids, and the argmax of its last row's
  // logits over ids [0, columns) is its guess 0; step j = 1 … steps − 1 folds guess j − 1 and gives guess
  // j. guesses: [n_sequences · steps], sequence i's at [i · steps, (i + 1) · steps). Every state advances
  // by ids.size() + steps − 1 tokens. checkpoint_slots: empty, or one span a sequence of steps − 1 slot
  // ids of its slot pool: slot j receives the recurrent state after step j (a rollback target). The same
  // guesses and states as `steps` forwards each followed by the host's argmax. Errors as forward's
  // (nothing changed then); models without it say so.
  virtual Status forward_greedy_chain(const ForwardBatch& batch, int steps, int64_t columns,
                                      std::span<const std::span<const int32_t>> checkpoint_slots,
                                      std::span<int32_t> guesses, ForwardContext& ctx) const;
  // forward_greedy_chain with the model's own workspace.
  Status run_greedy_chain(const ForwardBatch& batch, int steps, int64_t columns,
                          std::span<const std::span<const int32_t>> checkpoint_slots, std::span<int32_t> guesses) const;

 protected:
  // The pool new_state(…, nullptr) uses, created on first use.
  std::shared_ptr<KvPagePool> default_kv_pool() const;

 private:
  Status forward_items(std::span<const BatchItem> items, ForwardOutputs outputs) const;

  mutable std::mutex workspace_mu_;
  mutable Workspace workspace_;
  mutable std::mutex default_pool_mu_;
  mutable std::shared_ptr<KvPagePool> default_pool_;
};

// Numerical choices that are not part of a checkpoint.
struct LoadOptions {
  // Round RoPE frequencies through bf16, reproducing transformers when it loads a bf16 checkpoint in
  // bf16 and then casts to float32 (as the reference fixtures were made). Off: exact float32
  // frequencies, as the models were trained and as vLLM / llama.cpp compute them. docs/decisions.md.
  bool rope_bf16_frequencies = false;
  // Where the model runs (ops/memory.h): weights are copied there once while loading. cuda needs the
  // device selected first (ops::select_device); too little free memory there is a load error.
  Device device = Device::cpu;
};

// Loads the model in folder `dir` (config.json + safetensors). Unknown architectures, malformed configs,
// missing or mis-shaped tensors are errors naming the file and field or tensor.
Expected<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& options = {});

// Writes a random bf16 checkpoint (config.json + model.safetensors) in the real HF layout for the
// config at `config_path`, into `out_dir`. Seeded: the same seed gives the same file.
Status write_random_checkpoint(const std::string& config_path, const std::string& out_dir, uint64_t seed);

// The architectures load_model knows (model_type values), for help and error texts.
std::vector<std::string> known_model_types();

}  // namespace kapitsa::models
