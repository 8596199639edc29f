// Scheduler: admission under a memory budget, growth with preemption, and per-step token plans.
#include "runtime/scheduler.h"

#include "base/check.h"

#include <algorithm>
#include <optional>

namespace kapitsa::runtime {

void Scheduler::add(uint64_t id, int64_t known, int64_t max_new) {
  KAPITSA_CHECK(known > 0 && !seqs_.count(id), "sequence {} added twice or empty", id);
  Seq s;
  s.arrival = next_arrival_++;
  s.known = known;
  s.remaining = max_new;
  seqs_.emplace(id, std::move(s));
}

void Scheduler::remove(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  drop_state(it->second);
  seqs_.erase(it);
}

void Scheduler::set_boundaries(uint64_t id, std::vector<int64_t> positions) {
  auto it = seqs_.find(id);
  KAPITSA_CHECK(it != seqs_.end(), "unknown sequence {}", id);
  std::sort(positions.begin(), positions.end());
  it->second.boundaries = std::move(positions);
}

int64_t Scheduler::capacity_for(int64_t tokens) const {
  int64_t c = std::max<int64_t>(config_.min_capacity_tokens, 1);
  while (c < tokens) c *= 2;
  return std::min(c, config_.context_tokens);
}

size_t Scheduler::state_bytes(int64_t capacity) const {
  return config_.state_fixed_bytes + config_.state_bytes_per_token * static_cast<size_t>(capacity);
}

int64_t Scheduler::wanted_capacity(const Seq& s) const {
  return capacity_for(s.known + std::min(s.remaining, config_.decode_reserve_tokens));
}

void Scheduler::drop_state(Seq& s) {
  if (s.capacity == 0) return;
  used_bytes_ -= state_bytes(s.capacity);
  s.capacity = 0;
  s.n_past = 0;
}

Scheduler::Decision Scheduler::schedule() {
  Decision d;
  const size_t budget = config_.memory_budget_bytes;
  auto fits = [&](size_t extra) { return budget == 0 || used_bytes_ + extra <= budget; };
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (arrival, id)
  for (const auto& [id, s] : seqs_) order.emplace_back(s.arrival, id);
  std::sort(order.begin(), order.end());

  auto youngest_running = [&]() -> std::optional<uint64_t> {
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (seqs_.at(it->second).capacity > 0) return it->second;
    return std::nullopt;
  };

  // Growth: a running sequence whose known tokens no longer fit its state, oldest first.
  for (const auto& [arrival, id] : order) {
    Seq& s = seqs_.at(id);
    if (s.capacity == 0 || s.known <= s.capacity) continue;
    const int64_t want = wanted_capacity(s);
    drop_state(s);  // replaced by a bigger one (copied over, or recomputed when states cannot resize)
    d.preempt.push_back(id);
    while (!fits(state_bytes(want))) {
      std::optional<uint64_t> victim = youngest_running();
      if (!victim) break;  // alone: runs whatever the budget
      if (seqs_.at(*victim).arrival > s.arrival) {
        drop_state(seqs_.at(*victim));
        d.preempt.push_back(*victim);
        ++preemptions_;
      } else {
        break;  // only older sequences hold memory: this one waits for them
      }
    }
    if (fits(state_bytes(want)) || running() == 0) {
      s.capacity = want;
      used_bytes_ += state_bytes(want);
      d.admit.push_back({id, want});
    } else {
      ++preemptions_;
    }
  }

  // Admission, FIFO by arrival; a waiting sequence blocks younger ones (no starvation).
  int n_running = running();
  for (const auto& [arrival, id] : order) {
    Seq& s = seqs_.at(id);
    if (s.capacity > 0) continue;
    if (n_running >= config_.max_sequences || (hold_admissions_ && n_running > 0)) break;
    const int64_t want = wanted_capacity(s);
    if (!fits(state_bytes(want)) && n_running > 0) break;
    s.capacity = want;
    s.n_past = 0;
    used_bytes_ += state_bytes(want);
    d.admit.push_back({id, want});
    ++n_running;
  }
  return d;
}

void Scheduler::on_admitted(uint64_t id, int64_t n_past, int64_t capacity) {
  Seq& s = seqs_.at(id);
  KAPITSA_CHECK(s.capacity > 0 && capacity >= s.known && n_past < s.known, "admission of {}: capacity {} n_past {} known {}",
                id, capacity, n_past, s.known);
  used_bytes_ += state_bytes(capacity);
  used_bytes_ -= state_bytes(s.capacity);
  s.capacity = capacity;
  s.n_past = n_past;
}

std::vector<Scheduler::Work> Scheduler::batch() const {
  std::vector<std::pair<uint64_t, uint64_t>> order;
  for (const auto& [id, s] : seqs_)
    if (s.capacity > 0 && s.known > s.n_past) order.emplace_back(s.arrival, id);
  std::sort(order.begin(), order.end());
  std::vector<Work> work;
  int64_t budget = std::max<int64_t>(config_.prefill_chunk_tokens, 1);
  for (const auto& [arrival, id] : order) {
    const Seq& s = seqs_.at(id);
    const int64_t left = s.known - s.n_past;
    if (left == 1) {
      work.push_back({id, 1, true});
      continue;
    }
    if (budget == 0) continue;
    int64_t n = std::min(left, budget);
    for (int64_t b : s.boundaries)
      if (b > s.n_past) {
        n = std::min(n, b - s.n_past);
        break;
      }
    budget -= n;
    work.push_back({id, n, s.n_past + n == s.known});
  }
  return work;
}

void Scheduler::advance(uint64_t id, int64_t n_tokens) {
  Seq& s = seqs_.at(id);
  s.n_past += n_tokens;
  KAPITSA_CHECK(s.n_past <= s.known && s.n_past <= s.capacity, "sequence {} folded past its tokens", id);
}

void Scheduler::append(uint64_t id, int64_t n) {
  Seq& s = seqs_.at(id);
  s.known += n;
  s.remaining -= n;
}

void Scheduler::preempt(uint64_t id) {
  drop_state(seqs_.at(id));
  ++preemptions_;
}

std::optional<uint64_t> Scheduler::youngest_running() const {
  std::optional<uint64_t> best;
  uint64_t arrival = 0;
  for (const auto& [id, s] : seqs_)
    if (s.capacity > 0 && (!best || s.arrival > arrival)) best = id, arrival = s.arrival;
  return best;
}

int Scheduler::running() const {
  int n = 0;
  for (const auto& [id, s] : seqs_) n += s.capacity > 0;
  return n;
}

int Scheduler::waiting() const { return static_cast<int>(seqs_.size()) - running(); }

int64_t Scheduler::n_past(uint64_t id) const { return seqs_.at(id).n_past; }
int64_t Scheduler::known(uint64_t id) const { return seqs_.at(id).known; }
bool Scheduler::has_state(uint64_t id) const { return seqs_.at(id).capacity > 0; }

}  // namespace kapitsa::runtime
