// StepExecutor: one engine step on the model — builds the batch from the scheduler's work (each
// sequence's next tokens against its state), runs Model::forward_batch once, advances the scheduler
// and takes prefix-cache snapshots where a prompt chunk ended at a boundary. The logits of each work
// item's last folded token stay readable until the next step. Choosing and emitting tokens is not here.
// run_forward serialises forward calls of every engine in the process (they share the op thread pool).
#pragma once

#include "base/status.h"
#include "models/model.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace kapitsa::runtime {

class EngineMemory;

// Model::forward_batch under the process-wide compute lock.
Status run_forward(const models::Model& model, std::span<const models::Model::BatchItem> items);

class StepExecutor {
 public:
  explicit StepExecutor(const models::Model& model) : model_(model) {}

  // Folds work[i]'s tokens into its sequence's state. Returns the prompt tokens folded; on error
  // nothing was folded (the model changes no state then).
  Expected<int64_t> run(std::span<const Scheduler::Work> work, Sequences& seqs, Scheduler& scheduler,
                        EngineMemory& memory);
  // logits: [V], the row after work[i]'s last token in the last run.
  std::span<const float> logits(size_t i) const;

 private:
  const models::Model& model_;
  Buffer logits_;  // [n_items, V] of the last step
};

}  // namespace kapitsa::runtime
