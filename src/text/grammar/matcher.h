// GrammarMatcher: the state of one sequence's output against a Grammar, and the token mask for the
// next step. The state is a set of parse stacks; stacks are persistent (frames shared by tail), and
// sets of stacks are interned into a lazily built byte DFA, so a step of the vocabulary trie walk is
// one table lookup once warm and whole subtrees of rejected prefixes are skipped.
// Not thread-safe: one matcher per sequence. The Grammar is shared and immutable.
#pragma once

#include "text/grammar/grammar.h"
#include "text/grammar/vocabulary.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kapitsa::text {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Advances over `bytes`; false (and the state unchanged) when the grammar rejects them.
  bool accept_bytes(std::string_view bytes);
  // Advances over a token's bytes; false for special tokens, ids outside `vocab`, rejected bytes.
  bool accept_token(int32_t id, const TokenVocabulary& vocab);

  // The root rule may end here (end-of-generation is allowed).
  bool can_end() const;
  // The root rule has ended and nothing can follow: only end-of-generation is allowed.
  bool is_complete() const;
  // No continuation and no end: only reachable by accepting on a fresh copy (accept_* refuse it).
  bool is_dead() const;

  // allowed: resized to vocab.size(); allowed[id] = 1 when token `id` can come next. `end_ids`
  // (end-of-generation / stop tokens) are allowed exactly when can_end(); other special tokens never.
  void fill_mask(const TokenVocabulary& vocab, std::vector<uint8_t>& allowed, std::span<const int32_t> end_ids = {});

  // Back to the start of the grammar.
  void reset();

  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Frame {
    int32_t pos;     // top frame: a `bytes` element; lower frames: the return position
    int32_t parent;  // frame below, or kEmpty
  };
  static constexpr int32_t kEmpty = 0;   // the empty stack: the root has ended
  static constexpr int32_t kDead = 0;    // DFA state id of the empty set
  static constexpr int32_t kUnknown = -1;

  int32_t frame(int32_t pos, int32_t parent);
  // Adds to `out` every stack reached from position `pos` over `parent` by calls and returns.
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& out, int depth);
  int32_t intern(std::vector<int32_t>& stacks);  // sorted, unique → DFA state id
  int32_t step(int32_t state, uint8_t byte);     // DFA transition, built on first use
  void maybe_compact();
  void walk_mask(const TokenVocabulary& vocab, std::vector<uint8_t>& allowed);  // the trie walk

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<std::vector<int32_t>> states_;         // DFA state → sorted stack (frame) ids
  std::vector<std::array<int32_t, 256>> next_;       // DFA transitions, kUnknown until computed
  std::vector<uint8_t> state_flags_;                 // bit 0: can end, bit 1: has a continuation
  std::unordered_map<std::string, int32_t> state_ids_;
  int32_t start_ = kDead;
  int32_t current_ = kDead;
  std::vector<int32_t> walk_;  // per trie depth: DFA state during fill_mask
  std::unordered_set<uint64_t> expand_seen_;  // (pos, parent) pairs of the current expansion
  // Masks of recent DFA states (before end ids): inside a string the state repeats token after token.
  // A copy of the matcher starts with an empty cache (cheap copies).
  struct MaskCache {
    std::unordered_map<int32_t, std::vector<uint8_t>> masks;
    const TokenVocabulary* vocab = nullptr;
    MaskCache() = default;
    MaskCache(const MaskCache&) {}
    MaskCache& operator=(const MaskCache&) {
      masks.clear();
      vocab = nullptr;
      return *this;
    }
  };
  MaskCache mask_cache_;
};

}  // namespace kapitsa::text
