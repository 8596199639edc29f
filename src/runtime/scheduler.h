// Scheduler: which sequences hold memory, which run in the next step and how many tokens each folds.
// Pure logic (no tensors, no model): the engine reports what happened and asks what to do next.
// A sequence has `known` token ids (prompt, then each sampled token) of which `n_past` are folded into
// its state; a step folds a sequence's next tokens (1 when decoding, a chunk when prefilling) and
// samples when the chunk reaches `known`. Decode tokens are always scheduled; prompt chunks share
// `prefill_chunk_tokens` per step, oldest first.
// Memory: a state of capacity C costs fixed + per_token·C bytes; capacities come in power-of-two
// buckets covering the known tokens plus a decode reserve. A sequence that outgrows its state gets a
// bigger one (the engine copies it over when the model can resize states, else recomputes); when that
// does not fit the budget the youngest sequence is preempted (its state dropped, recomputed later),
// never failed. Admission is FIFO by arrival (a preempted sequence keeps its
// place); a lone sequence always runs, whatever the budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace kapitsa::runtime {

struct SchedulerConfig {
  int max_sequences = 16;
  int64_t prefill_chunk_tokens = 512;
  size_t memory_budget_bytes = 0;  // for sequence states; 0 → unlimited
  size_t state_fixed_bytes = 0;    // a state's bytes besides its per-token part (recurrent state)
  size_t state_bytes_per_token = 0;
  int64_t context_tokens = 32768;  // largest capacity
  int64_t decode_reserve_tokens = 256;
  int64_t min_capacity_tokens = 256;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config) : config_(config) {}

  // A new sequence with `known` tokens to fold (its prompt) that may generate `max_new` more.
  void add(uint64_t id, int64_t known, int64_t max_new);
  // Finished or cancelled: forgets it and frees its memory.
  void remove(uint64_t id);
  // Positions a prefill chunk must end at (snapshot points), ascending.
  void set_boundaries(uint64_t id, std::vector<int64_t> positions);

  struct Admission {
    uint64_t id = 0;
    int64_t capacity = 0;  // allocate (or restore) a state of at least this many tokens
  };
  struct Decision {
    std::vector<uint64_t> preempt;  // drop these states first (a sequence may reappear in admit: growth)
    std::vector<Admission> admit;
  };
  Decision schedule();
  // The engine's answer to an admission: the state it got (a restored snapshot may hold tokens).
  void on_admitted(uint64_t id, int64_t n_past, int64_t capacity);

  struct Work {
    uint64_t id = 0;
    int64_t n_tokens = 0;  // fold tokens [n_past, n_past + n_tokens)
    bool samples = false;  // the chunk reaches `known`: sample the next token after it
  };
  std::vector<Work> batch() const;
  void advance(uint64_t id, int64_t n_tokens);  // folded
  void append(uint64_t id, int64_t n = 1);      // n tokens were emitted and the sequence goes on

  int64_t capacity_for(int64_t tokens) const;  // the bucket holding `tokens`
  size_t state_bytes(int64_t capacity) const;
  size_t used_bytes() const { return used_bytes_; }
  int running() const;
  int waiting() const;
  int64_t preemptions() const { return preemptions_; }
  // The engine ran out of KV pages: drop this sequence's state (it is recomputed when readmitted).
  void preempt(uint64_t id);
  std::optional<uint64_t> youngest_running() const;
  // While held, waiting sequences are admitted only when nothing runs (the engine holds admissions
  // after preempting for KV pages, until a sequence finishes, so they do not bounce in and out).
  void hold_admissions(bool hold) { hold_admissions_ = hold; }
  int64_t n_past(uint64_t id) const;
  int64_t known(uint64_t id) const;
  bool has_state(uint64_t id) const;

 private:
  struct Seq {
    uint64_t arrival = 0;
    int64_t known = 0;
    int64_t n_past = 0;
    int64_t remaining = 0;  // tokens it may still generate
    int64_t capacity = 0;   // 0: no state (waiting)
    std::vector<int64_t> boundaries;
  };
  int64_t wanted_capacity(const Seq& s) const;
  void drop_state(Seq& s);

  SchedulerConfig config_;
  std::map<uint64_t, Seq> seqs_;
  uint64_t next_arrival_ = 0;
  size_t used_bytes_ = 0;
  int64_t preemptions_ = 0;
  bool hold_admissions_ = false;
};

}  // namespace kapitsa::runtime
