// GrammarMatcher: persistent parse stacks, interned into a lazily built DFA over bytes (see matcher.h).
#include "text/grammar/matcher.h"

#include "base/check.h"

#include <algorithm>
#include <cstring>

namespace kapitsa::text {
namespace {
using Kind = Grammar::Element::Kind;
// Past these sizes the tables are rebuilt from the current state (a long or deeply nested output
// must not grow memory without bound).
constexpr size_t kMaxStates = 1 << 12;  // × 1 KiB of transitions
constexpr size_t kMaxFrames = 1 << 20;
constexpr size_t kMaskCacheSize = 8;
}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  KAPITSA_CHECK(grammar_ != nullptr, "GrammarMatcher needs a grammar");
  reset();
}

void GrammarMatcher::reset() {
  mask_cache_.masks.clear();  // keyed by DFA state ids, renumbered below
  frames_.clear();
  frame_ids_.clear();
  states_.clear();
  next_.clear();
  state_flags_.clear();
  state_ids_.clear();
  frames_.push_back({-1, -1});  // kEmpty
  std::vector<int32_t> none;
  intern(none);  // kDead
  std::vector<int32_t> stacks;
  expand_seen_.clear();
  for (int32_t alt : grammar_->alternatives(Grammar::root())) expand(alt, kEmpty, stacks, 0);
  start_ = current_ = intern(stacks);
}

int32_t GrammarMatcher::frame(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = frame_ids_.emplace(key, static_cast<int32_t>(frames_.size()));
  if (fresh) frames_.push_back({pos, parent});
  return it->second;
}

void GrammarMatcher::expand(int32_t pos, int32_t parent, std::vector<int32_t>& out, int depth) {
  // Grammars are validated free of left recursion, so this terminates; the bound is a backstop.
  KAPITSA_CHECK(depth < 100000, "grammar expansion does not terminate");
  // The same (position, caller) reached twice expands to the same stacks: once is enough (nullable
  // alternatives side by side would otherwise multiply the work).
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  if (!expand_seen_.insert(key).second) return;
  const auto& elements = grammar_->elements();
  const Grammar::Element& e = elements[static_cast<size_t>(pos)];
  switch (e.kind) {
    case Kind::bytes:
      out.push_back(frame(pos, parent));
      return;
    case Kind::end:
      if (parent == kEmpty) {
        out.push_back(kEmpty);
      } else {
        const Frame f = frames_[static_cast<size_t>(parent)];
        expand(f.pos, f.parent, out, depth + 1);
      }
      return;
    case Kind::ref: {
      // Tail call: a reference at the end of an alternative returns straight to our caller, so
      // right recursion (repetition) keeps the stack flat.
      const int32_t ret = pos + 1;
      const int32_t np = elements[static_cast<size_t>(ret)].kind == Kind::end ? parent : frame(ret, parent);
      for (int32_t alt : grammar_->alternatives(e.value)) expand(alt, np, out, depth + 1);
      return;
    }
  }
}

int32_t GrammarMatcher::intern(std::vector<int32_t>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
  auto [it, fresh] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (!fresh) return it->second;
  uint8_t flags = 0;
  for (int32_t s : stacks) flags |= s == kEmpty ? 1 : 2;
  states_.push_back(stacks);
  state_flags_.push_back(flags);
  next_.emplace_back();
  next_.back().fill(kUnknown);
  return it->second;
}

int32_t GrammarMatcher::step(int32_t state, uint8_t byte) {
  const int32_t known = next_[static_cast<size_t>(state)][byte];
  if (known != kUnknown) return known;
  std::vector<int32_t> out;
  expand_seen_.clear();
  const auto& elements = grammar_->elements();
  const auto& classes = grammar_->classes();
  for (int32_t s : states_[static_cast<size_t>(state)]) {
    if (s == kEmpty) continue;
    const Frame f = frames_[static_cast<size_t>(s)];
    if (classes[static_cast<size_t>(elements[static_cast<size_t>(f.pos)].value)].has(byte)) expand(f.pos + 1, f.parent, out, 0);
  }
  const int32_t to = intern(out);
  next_[static_cast<size_t>(state)][byte] = to;
  return to;
}

void GrammarMatcher::maybe_compact() {
  if (states_.size() < kMaxStates && frames_.size() < kMaxFrames) return;
  // Re-create the current stacks in fresh tables: each stack as its list of positions, top first.
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t s : states_[static_cast<size_t>(current_)]) {
    std::vector<int32_t> positions;
    for (int32_t f = s; f != kEmpty; f = frames_[static_cast<size_t>(f)].parent) positions.push_back(frames_[static_cast<size_t>(f)].pos);
    stacks.push_back(std::move(positions));
  }
  reset();
  std::vector<int32_t> ids;
  for (const auto& positions : stacks) {
    int32_t f = kEmpty;
    for (auto it = positions.rbegin(); it != positions.rend(); ++it) f = frame(*it, f);
    ids.push_back(f);
  }
  current_ = intern(ids);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  maybe_compact();
  int32_t s = current_;
  for (char c : bytes) {
    s = step(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  current_ = s;
  return true;
}

bool GrammarMatcher::accept_token(int32_t id, const TokenVocabulary& vocab) {
  if (id < 0 || id >= vocab.size() || vocab.is_special(id)) return false;
  const std::string_view bytes = vocab.token_bytes(id);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

bool GrammarMatcher::can_end() const { return (state_flags_[static_cast<size_t>(current_)] & 1) != 0; }
bool GrammarMatcher::is_complete() const { return state_flags_[static_cast<size_t>(current_)] == 1; }
bool GrammarMatcher::is_dead() const { return current_ == kDead; }

void GrammarMatcher::fill_mask(const TokenVocabulary& vocab, std::vector<uint8_t>& allowed, std::span<const int32_t> end_ids) {
  maybe_compact();
  if (mask_cache_.vocab != &vocab) {
    mask_cache_.masks.clear();
    mask_cache_.vocab = &vocab;
  }
  if (auto hit = mask_cache_.masks.find(current_); hit != mask_cache_.masks.end()) {
    allowed = hit->second;
  } else {
    walk_mask(vocab, allowed);
    if (mask_cache_.masks.size() >= kMaskCacheSize) mask_cache_.masks.clear();
    mask_cache_.masks.emplace(current_, allowed);
  }
  if (can_end())
    for (int32_t id : end_ids)
      if (id >= 0 && id < vocab.size()) allowed[static_cast<size_t>(id)] = 1;
}

void GrammarMatcher::walk_mask(const TokenVocabulary& vocab, std::vector<uint8_t>& allowed) {
  allowed.assign(static_cast<size_t>(vocab.size()), 0);
  if (state_flags_[static_cast<size_t>(current_)] & 2) {
    const auto& nodes = vocab.nodes();
    const auto& tokens = vocab.node_tokens();
    walk_.assign(static_cast<size_t>(vocab.max_depth()) + 1, kDead);
    walk_[0] = current_;
    const int32_t n = static_cast<int32_t>(nodes.size());
    for (int32_t i = 1; i < n;) {
      const TokenVocabulary::Node& node = nodes[static_cast<size_t>(i)];
      const int32_t from = walk_[node.depth - 1u];
      int32_t s = next_[static_cast<size_t>(from)][node.byte];  // the warm path: one lookup
      if (s == kUnknown) s = step(from, node.byte);
      if (s == kDead) {
        i = node.subtree_end;  // no token with this prefix can continue
        continue;
      }
      walk_[node.depth] = s;
      for (int32_t t = node.token_begin; t < node.token_end; ++t) allowed[static_cast<size_t>(tokens[static_cast<size_t>(t)])] = 1;
      ++i;
    }
  }
}

}  // namespace kapitsa::text
