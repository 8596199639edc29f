// One forward step over the scheduled work (see step_executor.h).
#include "runtime/step_executor.h"

#include "ops/memory.h"
#include "runtime/engine_memory.h"
#include "runtime/proposer.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace kapitsa::runtime {

namespace {
// The op thread pool serves one computing thread at a time: engines in one process take turns.
std::mutex& compute_lock() {
  static std::mutex compute;
  return compute;
}
}  // namespace

Status run_forward(const models::Model& model, const models::ForwardBatch& batch, const models::ForwardOutputs& outputs) {
  std::lock_guard lock(compute_lock());
  return model.run_step(batch, outputs);
}

Status run_forward(const models::Model& model, std::span<const models::Model::BatchItem> items) {
  std::lock_guard lock(compute_lock());
  return model.forward_batch(items);
}

Status run_mtp_forward(const models::Model& model, std::span<const models::Model::MtpRows> rows) {
  std::lock_guard lock(compute_lock());
  return model.run_mtp(rows);
}

Status run_greedy_chain(const models::Model& model, const models::ForwardBatch& batch, int steps, int64_t columns,
                        std::span<const std::span<const int32_t>> checkpoint_slots, std::span<int32_t> guesses) {
  std::lock_guard lock(compute_lock());
  return model.run_greedy_chain(batch, steps, columns, checkpoint_slots, guesses);
}

Expected<int64_t> StepExecutor::run(std::span<const Scheduler::Work> work, Sequences& seqs, Scheduler& scheduler,
                                    EngineMemory& memory) {
  const int64_t V = model_.info().vocab_size, n = static_cast<int64_t>(work.size());
  // Item i folds its scheduled tokens and then its draft; the rows wanted are its last scheduled token
  // and every draft token.
  ids_.clear();
  first_row_.assign(work.size() + 1, 0);
  int64_t prefilled = 0;
  size_t longest = 1;
  for (int64_t i = 0; i < n; ++i) {
    const Scheduler::Work& w = work[static_cast<size_t>(i)];
    Sequence& seq = *seqs.at(w.id);
    const int64_t from = scheduler.n_past(w.id);
    KAPITSA_CHECK(seq.state && seq.state->n_past() == from, "sequence {} state out of step", w.id);
    KAPITSA_CHECK(seq.draft.empty() || (w.samples && seq.checkpoints.ids().size() > seq.draft.size()),
                  "sequence {}: a draft without checkpoint slots", w.id);
    ids_.insert(ids_.end(), seq.tokens.begin() + from, seq.tokens.begin() + from + w.n_tokens);
    ids_.insert(ids_.end(), seq.draft.begin(), seq.draft.end());
    first_row_[static_cast<size_t>(i + 1)] = first_row_[static_cast<size_t>(i)] + 1 + static_cast<int64_t>(seq.draft.size());
    longest = std::max(longest, static_cast<size_t>(w.n_tokens) + seq.draft.size());
    prefilled += std::max<int64_t>(0, std::min<int64_t>(from + w.n_tokens, static_cast<int64_t>(seq.prompt_len)) - from);
  }
  const int64_t total_rows = first_row_.back();
  // Page-locked when the model is on a GPU: the rows come back every step.
  if (logits_.tensor().empty() || logits_.tensor().dim(0) < total_rows)
    logits_ = ops::allocate_host_for(model_.device(), DType::f32, {total_rows, V}, "the step's logits");
  if (argmax_.tensor().empty() || argmax_.tensor().dim(0) < total_rows)
    argmax_ = ops::allocate_host_for(model_.device(), DType::i32, {total_rows, 1}, "the step's argmaxes");
  rows_.resize(longest);
  for (size_t r = 0; r < longest; ++r) rows_[r] = static_cast<int32_t>(r);  // 0, 1, … shared by all items
  sequences_.clear();
  logit_rows_.clear();
  argmax_rows_.clear();
  checkpoints_.clear();
  by_argmax_.assign(work.size(), false);
  size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Scheduler::Work& w = work[static_cast<size_t>(i)];
    Sequence& seq = *seqs.at(w.id);
    const size_t folded = static_cast<size_t>(w.n_tokens) + seq.draft.size(), wanted = 1 + seq.draft.size();
    sequences_.push_back({std::span<const int32_t>(ids_).subspan(at, folded), seq.state.get()});
    const int64_t r0 = first_row_[static_cast<size_t>(i)], r1 = first_row_[static_cast<size_t>(i + 1)];
    const std::span<const int32_t> rows = std::span<const int32_t>(rows_).subspan(folded - wanted, wanted);
    by_argmax_[static_cast<size_t>(i)] = chooses_argmax(seq);
    if (by_argmax_[static_cast<size_t>(i)]) argmax_rows_.push_back({static_cast<size_t>(i), rows, argmax_.tensor().rows(r0, r1)});
    else logit_rows_.push_back({static_cast<size_t>(i), rows, logits_.tensor().rows(r0, r1)});
    if (!seq.draft.empty())
      checkpoints_.push_back({static_cast<size_t>(i), std::span<const int32_t>(seq.checkpoints.ids()).first(wanted)});
    at += folded;
  }
  models::ForwardOutputs outputs;
  outputs.logits = logit_rows_;
  outputs.argmax = argmax_rows_;
  outputs.checkpoints = checkpoints_;
  hidden_rows_.clear();
  if (hidden_observer_ != nullptr) {
    // Every folded row's hidden state, for the proposer (the MTP head reads them); rows_ covers the
    // longest item.
    // Decode and verification steps (a few rows) into page-locked memory on a GPU; a long prefill's rows
    // into plain memory, given up again at the next short step.
    constexpr int64_t kPinnedRows = 256;
    const int64_t H = model_.info().hidden_size, rows = static_cast<int64_t>(at);
    const int64_t have = hidden_.tensor().empty() ? 0 : hidden_.tensor().dim(0);
    if (rows <= kPinnedRows && have != kPinnedRows)
      hidden_ = ops::allocate_host_for(model_.device(), DType::f32, {kPinnedRows, H}, "the step's hidden rows");
    else if (rows > kPinnedRows && have < rows)
      hidden_ = Buffer::allocate(DType::f32, {rows, H});
    int64_t row = 0;
    for (size_t i = 0; i < sequences_.size(); ++i) {
      const int64_t folded = static_cast<int64_t>(sequences_[i].ids.size());
      hidden_rows_.push_back({i, std::span<const int32_t>(rows_).first(static_cast<size_t>(folded)),
                              hidden_.tensor().rows(row, row + folded)});
      row += folded;
    }
    outputs.hidden = hidden_rows_;
  }
  KAPITSA_RETURN_IF_ERROR(run_forward(model_, models::ForwardBatch{sequences_}, outputs));
  if (hidden_observer_ != nullptr) {
    const int64_t H = model_.info().hidden_size;
    int64_t row = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      const int64_t folded = static_cast<int64_t>(sequences_[i].ids.size());
      hidden_observer_->observe_hidden(work[i].id, scheduler.n_past(work[i].id),
                                       std::span<const float>(hidden_.f32() + row * H, static_cast<size_t>(folded * H)));
      row += folded;
    }
  }
  for (const Scheduler::Work& w : work) {
    Sequence& seq = *seqs.at(w.id);
    scheduler.advance(w.id, w.n_tokens);
    const int64_t at_token = scheduler.n_past(w.id);
    if (seq.draft.empty() && std::binary_search(seq.boundaries.begin(), seq.boundaries.end(), at_token))
      memory.snapshot(seq, at_token);
  }
  return prefilled;
}

std::span<const float> StepExecutor::logits(size_t i, size_t row) const {
  const int64_t r = first_row_[i] + static_cast<int64_t>(row);
  KAPITSA_CHECK(r < first_row_[i + 1] && !by_argmax_[i], "logits row {} of work item {}", row, i);
  return std::span<const float>(logits_.tensor().rows(r, r + 1).f32(), static_cast<size_t>(model_.info().vocab_size));
}

std::optional<int32_t> StepExecutor::argmax(size_t i, size_t row) const {
  const int64_t r = first_row_[i] + static_cast<int64_t>(row);
  KAPITSA_CHECK(r < first_row_[i + 1], "argmax row {} of work item {}", row, i);
  if (!by_argmax_[i]) return std::nullopt;
  return argmax_.tensor().data_as<const int32_t>()[r];
}

std::variant<TokenEvent, Ending> choose_next(Sequence& seq, const StepExecutor& executor, size_t item, size_t row) {
  if (const std::optional<int32_t> id = executor.argmax(item, row)) {
    TokenEvent event;
    event.id = *id;
    return event;
  }
  return choose_token(seq, executor.logits(item, row));
}

}  // namespace kapitsa::runtime
