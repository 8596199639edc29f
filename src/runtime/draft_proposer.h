// DraftModelProposer: a smaller model with the target's tokenizer guesses the next k tokens by running
// k decode steps of its own, batched across the drafting sequences of an engine step. Each sequence
// has its own draft state (KV pages in the proposer's own pool, a recurrent-state slot of the draft
// model's slot pool), kept in step with the target: the draft remembers the tokens it folded, and at
// the next proposal rolls back to the longest prefix the sequence kept — by swapping in the recurrent
// checkpoint written after that token and dropping later KV pages, as the target's state does — then
// folds only the tokens it has not seen (the target's own token, and at the first proposal the
// prompt). Greedy targets get the draft's argmax; sampling targets get draws from the draft's
// distribution under the request's bias/temperature/top-k/top-p/min-p, returned as q for
// speculative sampling (runtime/speculation.h).
// Greedy proposals of one length run as one chain (Model::forward_greedy_chain): the draft's argmax stays
// on the device between its steps, so a GPU proposal is one graph and one wait instead of a round trip a
// guess (docs/speculative-decoding.md); sampled drafts take a step at a time (q comes back anyway).
// A prefix cache of draft states (runtime/prefix_cache.h, its own budget): when a proposal folds a new
// stretch of text (a prompt, a new turn: at least kSnapshotMinTokens), the draft folds all of it but the
// last token, snapshots that state, then drafts; a new sequence starts from the deepest snapshot on its
// path, so an agent's next turn folds its new tokens, not the whole conversation again.
// Memory: the draft's KV and states are outside the engine's memory budget (a draft is a few percent
// of the target). One engine per proposer (sequence ids are the engine's).
#pragma once

#include "models/model.h"
#include "runtime/prefix_cache.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace kapitsa::runtime {

class DraftModelProposer final : public Proposer {
 public:
  struct Options {
    int64_t context_tokens = 32768;  // the most tokens a draft state holds (the engine's context)
    DType kv_dtype = DType::f32;
    int64_t kv_page_tokens = 16;
    int64_t prefill_chunk_tokens = 512;  // catch-up forwards fold at most this many tokens each
    uint64_t seed = 0;                   // draws for requests without a seed; 0: random
    size_t prefix_cache_bytes = 0;       // snapshots of draft states kept for later sequences; 0: none
  };
  static constexpr int64_t kSnapshotMinTokens = 64;
  DraftModelProposer(std::unique_ptr<models::Model> draft, Options options);
  ~DraftModelProposer() override;

  std::string_view name() const override { return "draft"; }
  // One sequence, greedy (no engine: the guesses of a fresh state after `tokens`).
  void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) override;
  void propose_batch(std::span<const DraftRequest> requests) override;
  void release(uint64_t sequence) override;
  // On a GPU, throwaway proposals (a 17- and a 2-token catch-up, 2 guesses each): the draft's first forwards
  // load kernels and cuBLAS paths the target may not have used, 48–71 ms on an H100 that otherwise
  // stalled the first request's first drafted step (docs/speculative-decoding.md).
  Status attach(const models::Model& target) override;

  const models::Model& model() const { return *model_; }
  // Tokens the draft model folded (catch-up and guesses), and how often a draft state had to be
  // rebuilt from the start because the sequence diverged before its checkpoints (should stay 0).
  int64_t folded_tokens() const;
  int64_t rebuilds() const;
  // Tokens new draft states took from the prefix cache instead of folding them.
  int64_t cached_tokens() const;

 private:
  struct Entry;
  struct Active;
  Entry& sync(const DraftRequest& r, std::vector<int32_t>& pending);
  bool fold_long_catch_up(Entry& e, std::vector<int32_t>& pending);
  std::unique_ptr<models::SequenceState> new_state(std::span<const int32_t> tokens, std::vector<int32_t>& folded);
  int32_t choose(Entry& e, const DraftRequest& r, std::span<const float> logits);
  bool propose_chained(std::vector<Active>& active);

  std::unique_ptr<models::Model> model_;  // first: outlives the states below
  Options options_;
  std::shared_ptr<models::KvPagePool> pool_;
  std::unique_ptr<PrefixCache> cache_;  // null when prefix_cache_bytes is 0
  mutable std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;  // by sequence id
  uint64_t next_seed_;
  int64_t folded_ = 0, rebuilds_ = 0, cached_ = 0;
  std::vector<float> row_;  // [V target] one row of draft logits, padded / cut to the target's vocabulary
  // [sequences, V draft]: a draft step's logits rows, reused (page-locked for a draft on a GPU: each
  // step copies them back).
  Buffer logits_;
};

}  // namespace kapitsa::runtime
