// HybridDecoder: what both hybrid families share, written once — the Model plumbing (states, KV and
// recurrent layouts, the forward entry point with its outputs, the step metadata) and the trunk:
// embedding, a stack of pre-norm residual blocks (x += block(rms_norm(x))), final norm and the output
// head (the embedding when tied). A family loads its weights into it and computes its blocks
// (block_forward); it never sees batches, states or outputs.
#pragma once

#include "models/layers/step.h"
#include "models/model.h"
#include "models/state_slots.h"
#include "models/weight_list.h"
#include "ops/step_graph.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::models {

class HybridDecoder : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool = nullptr) const override;
  KvLayout kv_layout() const override;
  Device device() const override { return device_; }
  int64_t max_graph_rows() const override;
  int64_t invariant_rows() const override { return invariant_rows_; }
  // Before loading: where the weights go (LoadOptions::device); the family passes it to its WeightLoader.
  void set_device(Device device) { device_ = device; }
  using Model::forward;
  Status forward(const ForwardBatch& batch, const ForwardOutputs& outputs, ForwardContext& ctx) const override;
  // The multi-token-prediction head's plumbing, shared by the families: checks, KV pages for rows past
  // n_past, the step metadata, the rows' embeddings and hidden rows, the outputs; mtp_head computes it.
  Status forward_mtp(std::span<const MtpRows> sequences, ForwardContext& ctx) const override;
  // k greedy steps at once; on a GPU one graph (StepKind::greedy_chain): each step's argmax written
  // where the next step's embedding reads its ids (ops::step_metadata_tensor).
  Status forward_greedy_chain(const ForwardBatch& batch, int steps, int64_t columns,
                              std::span<const std::span<const int32_t>> checkpoint_slots, std::span<int32_t> guesses,
                              ForwardContext& ctx) const override;

 protected:
  // The family's head (called only when info_.mtp_layers > 0): e: [T, H] the rows' token embeddings,
  // h: [T, H] the target's hidden rows (workspace copies it may overwrite);  out: [T, H] its final-normed
  // output. Its attention layers' KV are the layers past the trunk's in kv_layout().
  virtual void mtp_head(const StepBatch& step, const Tensor& e, const Tensor& h, const Tensor& out,
                        ForwardContext& ctx) const;
  // How both families' heads start: x = fc([norm_e(e) | norm_h(h)]), e and h normalised in place.
  // e, h: [T, H];  fc: [H, 2H];  returns x: [T, H] (in the workspace).
  Tensor mtp_fuse(const Tensor& e, const Tensor& h, const Buffer& norm_e, const Buffer& norm_h, const Linear& fc,
                  Workspace& ws) const;

  // Layer `layer`'s block `block` (Qwen: 0 the mixer, 1 the MLP; Nemotron: one block per layer).
  // normed: [n_tokens, H] (the block's input norm applied);  out: [n_tokens, H].
  virtual void block_forward(size_t layer, size_t block, const StepBatch& step, const Tensor& normed,
                             const Tensor& out, ForwardContext& ctx) const = 0;

  // Loads the embedding [V, H] and the head: `head_name` when the checkpoint has it, else (tied) the embedding.
  Status load_embedding_and_head(WeightLoader& loader, const std::string& embedding_name, const std::string& head_name,
                                 bool tied);

  // After loading: keeps the loader's device copies of the weights (on cpu: the FP8 weights it
  // dequantized) and logs their size.
  void keep_device_weights(WeightLoader& loader);

  Device device_ = Device::cpu;
  // Set by the family while loading.
  ModelInfo info_;
  Linear embedding_;          // [V, H]
  Linear head_;               // [V, H]
  Buffer final_norm_;         // [H] f32
  float norm_eps_ = 1e-6f;
  float norm_weight_offset_ = 0;  // 1 for Qwen's zero-centred norms
  std::vector<std::vector<Buffer>> block_norms_;  // per layer, per block: [H] f32
  KvLayout kv_layout_;
  RecurrentLayout recurrent_layout_;

  // The step's metadata in `ws`. positions0: each sequence's first position (empty: its n_past).
  // with_block_tables false: seqs.block_tables is left empty, for the caller to take last (take_block_tables).
  Expected<StepBatch> build_step(const ForwardBatch& batch, const ForwardOutputs& outputs, Workspace& ws,
                                 std::span<const int64_t> positions0 = {}, bool with_block_tables = true) const;
  // The states' KV block tables, concatenated in sequence order (build_step's block_offsets index them).
  std::span<int32_t> take_block_tables(const ForwardBatch& batch, Workspace& ws) const;
  // out := src (a device_ tensor); out may be on the host, then the copy completes at the step's end.
  void store(const Tensor& src, const Tensor& out) const;
  // For the step's lifetime: the host range the workspace handed out so far (ids, step metadata) is
  // mirrored on the device; ops given spans of it read the copy instead of copying each span per op.
  struct MirroredMetadata {
    MirroredMetadata(Device device, Workspace& ws);
    ~MirroredMetadata();
    MirroredMetadata(const MirroredMetadata&) = delete;
    MirroredMetadata& operator=(const MirroredMetadata&) = delete;
    Device device;
  };

 private:
  // Embedding, blocks, final norm into `normed`; then, when `logits` is given, the head over every row.
  void trunk(const StepBatch& step, std::span<const int32_t> ids, const Tensor& x, const Tensor& normed,
             const Tensor& mixed, const Tensor& all_layers, const Tensor& logits, ForwardContext& ctx) const;
  // A step as a CUDA graph (ops/step_graph.h): `body` (the step's ops and nothing else) is captured the
  // second time the key is seen and replayed after. `key` says what the step computes (its kind and
  // shape); the step's key-count bucket, memory generation, workspace and pool addresses are added here.
  // False: nothing ran, the caller runs body eagerly.
  bool run_as_graph(std::vector<uint64_t> key, ops::StepKind kind, const StepBatch& step, Workspace& ws,
                    const std::function<void()>& body) const;
  // out := rows `rows` of the sequence whose rows start at row `begin` of src (src: [T, W], out: [rows, W]).
  void store_rows(const Tensor& src, int64_t begin, std::span<const int32_t> rows, const Tensor& out) const;
  void write_outputs(const ForwardBatch& batch, const ForwardOutputs& outputs, const Tensor& normed,
                     Workspace& ws) const;
  std::shared_ptr<StateSlotPool> slot_pool() const;

  std::vector<Buffer> device_weights_;  // every Linear's copy on device_ (on cpu: FP8 weights as bf16)
  int64_t invariant_rows_ = 0;          // from the loader (keep_device_weights)
  mutable std::mutex slot_pool_mu_;
  mutable std::shared_ptr<StateSlotPool> slot_pool_;
  // Captured decode steps by key (step shape, key-count bucket, the addresses and generation they bake in).
  struct CapturedStep {
    std::unique_ptr<ops::StepGraph> graph;
    int seen = 0, failures = 0;
  };
  mutable std::mutex graphs_mu_;
  mutable std::map<std::vector<uint64_t>, CapturedStep> graphs_;
};

}  // namespace kapitsa::models
