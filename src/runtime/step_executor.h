// StepExecutor: one engine step on the model — builds the batch from the scheduler's work (each
// sequence's next tokens against its state, followed by its draft when it has one), runs
// Model::run_step once, advances the scheduler by the scheduled tokens and takes prefix-cache snapshots
// where a prompt chunk ended at a boundary. A drafted sequence also folds its draft, with a recurrent-
// state checkpoint after each token (Sequence::checkpoints) and logits after each: the engine then keeps
// what it accepts (rollback). A sequence whose choice is the plain argmax (chooses_argmax) gets only
// the argmax of each row, computed where the model runs: a GPU then copies back an id, not a row of the
// vocabulary's width. Logits and argmaxes stay readable until the next step. Choosing and emitting
// tokens is not here (choose_next picks from what the step brought back). run_forward serialises forward calls of every engine in the process (they share the op
// thread pool).
#pragma once

#include "base/status.h"
#include "models/model.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

namespace kapitsa::runtime {

class EngineMemory;
class Proposer;

// Model::run_step under the process-wide compute lock.
Status run_forward(const models::Model& model, const models::ForwardBatch& batch, const models::ForwardOutputs& outputs);
// Model::forward_batch under the same lock.
Status run_forward(const models::Model& model, std::span<const models::Model::BatchItem> items);
// Model::run_mtp under the same lock.
Status run_mtp_forward(const models::Model& model, std::span<const models::Model::MtpRows> rows);
// Model::run_greedy_chain under the same lock.
Status run_greedy_chain(const models::Model& model, const models::ForwardBatch& batch, int steps, int64_t columns,
                        std::span<const std::span<const int32_t>> checkpoint_slots, std::span<int32_t> guesses);

class StepExecutor {
 public:
  explicit StepExecutor(const models::Model& model) : model_(model) {}
  // After each run, `proposer` gets every folded token's hidden row (Proposer::observe_hidden).
  void observe_hidden(Proposer* proposer) { hidden_observer_ = proposer; }

  // Folds work[i]'s tokens into its sequence's state. Returns the prompt tokens folded; on error
  // nothing was folded (the model changes no state then).
  Expected<int64_t> run(std::span<const Scheduler::Work> work, Sequences& seqs, Scheduler& scheduler,
                        EngineMemory& memory);
  // logits: [V], the row after work[i]'s last scheduled token (row 0) or after its draft token j-1
  // (row j, 1 <= j <= draft size) in the last run. Not for an item that took argmaxes.
  std::span<const float> logits(size_t i, size_t row = 0) const;
  // The argmax of that row when work[i] took argmaxes instead of logits, else nothing.
  std::optional<int32_t> argmax(size_t i, size_t row = 0) const;

 private:
  const models::Model& model_;
  Proposer* hidden_observer_ = nullptr;
  Buffer logits_;                   // [rows of the last step, V]
  Buffer argmax_;                   // [rows of the last step, 1] i32 (rows of items that took argmaxes)
  std::vector<bool> by_argmax_;     // work item i took argmaxes
  Buffer hidden_;                   // [folded tokens of the last step, H] when observed
  std::vector<int64_t> first_row_;  // work item i's rows start at first_row_[i]
  // Per-step lists the forward reads (kept to avoid allocating each step).
  std::vector<int32_t> ids_, rows_;
  std::vector<models::ForwardBatch::Sequence> sequences_;
  std::vector<models::ForwardOutputs::Rows> logit_rows_, argmax_rows_;
  std::vector<models::ForwardOutputs::Checkpoints> checkpoints_;
  std::vector<models::ForwardOutputs::Rows> hidden_rows_;
};

// The next token of `seq` (work item `item` of the executor's last run) after row `row`: the argmax
// the step brought back, or choose_token over the row's logits.
std::variant<TokenEvent, Ending> choose_next(Sequence& seq, const StepExecutor& executor, size_t item, size_t row = 0);

}  // namespace kapitsa::runtime
