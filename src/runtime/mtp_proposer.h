// MtpProposer: guesses from the target's own multi-token-prediction head (Qwen3.5 mtp.*,
// Model::forward_mtp), run recursively for k steps: step 1 reads the target's final-normed hidden row
// of the newest folded token and the token after it (the target's own choice), step j > 1 its own
// previous output and guess. The head's KV is the last layer of each sequence's KV layout, so the
// target's rollback truncates it with the rest. It lags the target by one position (the head's row
// for position p needs token p+1): each proposal first folds the rows the head has not seen (the
// prompt at the first one), from the hidden rows the engine hands over after every step
// (observe_hidden). Greedy targets get the head's argmax; sampling targets get draws from its
// distribution under the request's processing, returned as q (runtime/speculation.h).
// Known limit: a sequence resumed from a prefix-cache snapshot starts with whatever head KV the
// snapshot's pages hold (filled only where a proposal ran): guesses may be worse, output is not.
#pragma once

#include "models/model.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace kapitsa::runtime {

class MtpProposer final : public Proposer {
 public:
  struct Options {
    // `--spec auto`: on a model without a head, guess by n-gram lookup instead (then named "ngram").
    bool or_ngram = false;
    uint64_t seed = 0;  // draws for requests without a seed; 0: random
  };
  explicit MtpProposer(Options options);
  ~MtpProposer() override;

  std::string_view name() const override { return fallback_ ? fallback_->name() : "mtp"; }
  Status attach(const models::Model& target) override;
  // Needs a sequence's state and hidden rows: outside an engine, no guesses.
  void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) override;
  void propose_batch(std::span<const DraftRequest> requests) override;
  void release(uint64_t sequence) override;
  bool wants_hidden() const override { return fallback_ == nullptr; }
  void observe_hidden(uint64_t sequence, int64_t position0, std::span<const float> rows) override;

  // Rows the head folded (catch-up and guesses), for tests and benchmarks.
  int64_t head_rows() const;

 private:
  struct Entry;
  int32_t choose(Entry& e, const DraftRequest& r, std::span<const float> logits);

  Options options_;
  const models::Model* target_ = nullptr;
  std::unique_ptr<Proposer> fallback_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;
  uint64_t next_seed_;
  int64_t head_rows_ = 0;
  // [sequences, V], [sequences, H] and [sequences, 1] i32: a head step's rows, reused (a greedy request
  // takes only its row's argmax, not its logits).
  Buffer logits_, out_hidden_, argmax_;
};

}  // namespace kapitsa::runtime
