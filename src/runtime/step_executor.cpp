// One forward step over the scheduled work (see step_executor.h).
#include "runtime/step_executor.h"

#include "runtime/engine_memory.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace kapitsa::runtime {

Status run_forward(const models::Model& model, std::span<const models::Model::BatchItem> items) {
  // The op thread pool serves one computing thread at a time: engines in one process take turns.
  static std::mutex compute;
  std::lock_guard lock(compute);
  return model.forward_batch(items);
}

Expected<int64_t> StepExecutor::run(std::span<const Scheduler::Work> work, Sequences& seqs, Scheduler& scheduler,
                                    EngineMemory& memory) {
  const int64_t V = model_.info().vocab_size, n = static_cast<int64_t>(work.size());
  if (logits_.tensor().empty() || logits_.tensor().dim(0) < n) logits_ = Buffer::allocate(DType::f32, {n, V});
  std::vector<models::Model::BatchItem> items;
  items.reserve(work.size());
  int64_t prefilled = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Scheduler::Work& w = work[static_cast<size_t>(i)];
    Sequence& seq = *seqs.at(w.id);
    const int64_t from = scheduler.n_past(w.id);
    KAPITSA_CHECK(seq.state && seq.state->n_past() == from, "sequence {} state out of step", w.id);
    items.push_back({std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(from), static_cast<size_t>(w.n_tokens)),
                     seq.state.get(), logits_.tensor().rows(i, i + 1)});
    prefilled += std::max<int64_t>(0, std::min<int64_t>(from + w.n_tokens, static_cast<int64_t>(seq.prompt_len)) - from);
  }
  KAPITSA_RETURN_IF_ERROR(run_forward(model_, items));
  for (const Scheduler::Work& w : work) {
    Sequence& seq = *seqs.at(w.id);
    scheduler.advance(w.id, w.n_tokens);
    const int64_t at = scheduler.n_past(w.id);
    if (std::binary_search(seq.boundaries.begin(), seq.boundaries.end(), at)) memory.snapshot(seq, at);
  }
  return prefilled;
}

std::span<const float> StepExecutor::logits(size_t i) const {
  const int64_t row = static_cast<int64_t>(i);
  return std::span<const float>(logits_.tensor().rows(row, row + 1).f32(), static_cast<size_t>(model_.info().vocab_size));
}

}  // namespace kapitsa::runtime
