// BPE merging with a min-heap of candidate pairs over a doubly linked list of symbols; stale heap
// entries (a side already merged away) are recognised by comparing the ids they were made from.
#include "text/tokenizer/bpe.h"

#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/json_fields.h"

#include <algorithm>

namespace kapitsa::text {
namespace {

constexpr size_t kCacheMaxEntries = 1 << 18;
constexpr size_t kCacheMaxPiece = 256;  // longer pieces are rare and would bloat the cache

struct Symbol {
  int32_t id;    // −1 once merged into its left neighbour
  int32_t prev;  // index of the previous live symbol, −1 at the start
  int32_t next;  // index of the next live symbol, −1 at the end
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t left, right, result;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

Expected<Bpe> Bpe::from_json(const Json& spec, const std::string& where) {
  const std::string field = where + ": model";
  if (!spec.is_object()) return error("{}: expected an object", field);
  const std::string type = spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "BPE";
  if (type != "BPE") return error("{}.type: unsupported model type \"{}\" (only byte-level BPE)", field, type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (spec.contains(key) && spec[key].is_string() && !spec[key].get<std::string>().empty())
      return error("{}.{}: not supported for byte-level BPE", field, key);
  }
  if (detail::json_bool(spec, "byte_fallback", false)) return error("{}.byte_fallback: not supported for byte-level BPE", field);

  Bpe bpe;
  if (!spec.contains("vocab") || !spec["vocab"].is_object()) return error("{}.vocab: expected an object", field);
  bpe.vocab_.reserve(spec["vocab"].size());
  for (const auto& [token, id] : spec["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24))
      return error("{}.vocab[\"{}\"]: expected a non-negative integer id", field, token);
    const auto i = id.get<int32_t>();
    bpe.vocab_.emplace(token, i);
    if (static_cast<size_t>(i) >= bpe.id_to_token_.size()) {
      bpe.id_to_token_.resize(i + 1);
      bpe.has_id_.resize(i + 1, false);
    }
    bpe.id_to_token_[i] = token;
    bpe.has_id_[i] = true;
  }
  for (int b = 0; b < 256; ++b) {
    std::string c;
    append_utf8(byte_to_char(static_cast<unsigned char>(b)), c);
    auto it = bpe.vocab_.find(c);
    bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
  }

  if (!spec.contains("merges") || !spec["merges"].is_array()) return error("{}.merges: expected an array", field);
  const Json& merges = spec["merges"];
  bpe.merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    const Json& m = merges[r];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return error("{}.merges[{}]: expected \"a b\", got \"{}\"", field, r, s);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return error("{}.merges[{}]: expected \"a b\" or [\"a\", \"b\"]", field, r);
    }
    auto ia = bpe.vocab_.find(a), ib = bpe.vocab_.find(b), iab = bpe.vocab_.find(a + b);
    if (ia == bpe.vocab_.end() || ib == bpe.vocab_.end() || iab == bpe.vocab_.end())
      return error("{}.merges[{}]: \"{}\" + \"{}\" uses a token that is not in the vocabulary", field, r, a, b);
    // The first (lowest-rank) occurrence of a pair wins, as in HF.
    bpe.merges_.emplace(pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(r), iab->second});
  }

  if (spec.contains("unk_token") && spec["unk_token"].is_string()) {
    auto it = bpe.vocab_.find(spec["unk_token"].get<std::string>());
    if (it != bpe.vocab_.end()) bpe.unk_id_ = it->second;
  }
  bpe.ignore_merges_ = detail::json_bool(spec, "ignore_merges", false);
  bpe.fuse_unk_ = detail::json_bool(spec, "fuse_unk", false);
  return bpe;
}

const std::string* Bpe::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void Bpe::clear_cache() const {
  std::lock_guard lock(cache_->mutex);
  cache_->entries.clear();
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kCacheMaxPiece) return encode_uncached(piece, out);
  {
    std::lock_guard lock(cache_->mutex);
    auto it = cache_->entries.find(piece);
    if (it != cache_->entries.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  encode_uncached(piece, out);
  std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(start), out.end());
  std::lock_guard lock(cache_->mutex);
  if (cache_->entries.size() >= kCacheMaxEntries) cache_->entries.clear();
  cache_->entries.emplace(std::string(piece), std::move(ids));
}

void Bpe::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && byte_ids_[static_cast<unsigned char>(piece[0])] >= 0) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = vocab_.find(bytes_to_mapped(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  for (unsigned char b : piece) {
    int32_t id = byte_ids_[b];
    if (id < 0) id = unk_id_;
    if (id < 0) continue;  // no such character and no unk token: dropped, as HF does
    if (fuse_unk_ && id == unk_id_ && !symbols.empty() && symbols.back().id == unk_id_) continue;  // fuse runs of unk
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1});
    if (n > 0) symbols[n - 1].next = n;
  }
  thread_local std::vector<Candidate> heap;  // min-heap by (rank, pos) through std::greater
  heap.clear();
  auto push_pair = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, symbols[pos].id, symbols[next].id, it->second.result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    // Stale when either side changed since the entry was made (ids only grow by merging, never recur).
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    push_pair(left.prev);
    push_pair(c.pos);
  }
  for (const Symbol& s : symbols)
    if (s.id >= 0) out.push_back(s.id);
}

}  // namespace kapitsa::text
