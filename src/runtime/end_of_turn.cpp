// Queued end-of-turn folds and preloads (see end_of_turn.h).
#include "runtime/end_of_turn.h"

#include "base/log.h"
#include "runtime/step_executor.h"

#include <algorithm>

namespace kapitsa::runtime {

void EndOfTurnQueue::queue(const Sequence& seq, bool ends_with_stop_token) {
  const std::vector<int32_t>& eot = seq.request.end_of_turn_ids;
  if (eot.empty() || !seq.state || seq.state->n_past() == 0) return;
  std::vector<int32_t> tokens = seq.tokens;
  if (ends_with_stop_token) tokens.pop_back();
  const int64_t n_past = seq.state->n_past();
  if (static_cast<int64_t>(tokens.size()) < n_past) return;  // (a stop token folded: nothing to continue)
  tokens.insert(tokens.end(), eot.begin(), eot.end());
  queue(seq.state->resized(std::max<int64_t>(seq.state->capacity(), static_cast<int64_t>(tokens.size()))),
        std::move(tokens), seq.request.cache_key);
}

void EndOfTurnQueue::queue(std::unique_ptr<models::SequenceState> state, std::vector<int32_t> tokens, std::string group) {
  if (!state || state->n_past() >= static_cast<int64_t>(tokens.size()) ||
      state->capacity() < static_cast<int64_t>(tokens.size()))
    return;
  Job job;
  job.state = std::move(state);
  job.tokens = std::move(tokens);
  job.group = std::move(group);
  jobs_.push_back(std::move(job));
  // Low priority: a few per engine; the oldest give way.
  while (jobs_.size() > limit_) jobs_.pop_front();
}

bool EndOfTurnQueue::continued_by(std::span<const int32_t> tokens) const {
  return std::any_of(jobs_.begin(), jobs_.end(), [&](const Job& job) {
    return job.tokens.size() < tokens.size() && std::equal(job.tokens.begin(), job.tokens.end(), tokens.begin());
  });
}

bool EndOfTurnQueue::queued(std::span<const int32_t> tokens) const {
  return std::any_of(jobs_.begin(), jobs_.end(),
                     [&](const Job& job) { return std::equal(job.tokens.begin(), job.tokens.end(), tokens.begin(), tokens.end()); });
}

int64_t EndOfTurnQueue::pending_tokens() const {
  int64_t n = 0;
  for (const Job& job : jobs_) n += static_cast<int64_t>(job.tokens.size()) - job.state->n_past();
  return n;
}

int64_t EndOfTurnQueue::flush(const models::Model& model, const models::KvPagePool& pool, PrefixCache& cache,
                              int64_t chunk_tokens, const std::function<bool()>& interrupted) {
  std::deque<Job> jobs;
  jobs.swap(jobs_);
  std::vector<Job*> running;
  int64_t pages = 0, folded = 0;
  for (Job& job : jobs) {
    const int64_t n = static_cast<int64_t>(job.tokens.size()) - job.state->n_past();
    const int64_t need = job.state->kv_pages_needed(n);
    if (pages + need > pool.free_pages()) continue;  // no room: dropped (it was only a head start)
    pages += need;
    running.push_back(&job);
  }
  if (running.empty()) return 0;
  // Long jobs (a preload that re-folds a whole tool loop) go in chunks, like a prompt's prefill.
  chunk_tokens = std::max<int64_t>(chunk_tokens, 1);
  Buffer logits = Buffer::allocate(DType::f32, {static_cast<int64_t>(running.size()), model.info().vocab_size});
  std::vector<models::Model::BatchItem> items;
  for (;;) {
    items.clear();
    int64_t step = 0;
    for (size_t i = 0; i < running.size(); ++i) {
      Job& job = *running[i];
      const int64_t left = static_cast<int64_t>(job.tokens.size()) - job.state->n_past();
      if (left == 0) continue;
      const int64_t n = std::min(left, chunk_tokens);
      step += n;
      items.push_back({std::span<const int32_t>(job.tokens).subspan(static_cast<size_t>(job.state->n_past()), static_cast<size_t>(n)),
                       job.state.get(), logits.tensor().rows(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1)});
    }
    if (items.empty()) break;
    if (Status s = run_forward(model, items); !s.ok()) {
      log::warn("end-of-turn prefill failed: {}", s.error().message);
      return folded;
    }
    folded += step;
    if (interrupted && interrupted()) break;
  }
  for (Job* job : running) {
    if (job->state->n_past() < static_cast<int64_t>(job->tokens.size())) {
      jobs_.push_back(std::move(*job));  // interrupted: continues at the next idle moment
      continue;
    }
    if (!cache.contains(job->tokens)) cache.insert(job->tokens, std::move(job->state), job->group);
  }
  return folded;
}

}  // namespace kapitsa::runtime
