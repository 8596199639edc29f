// Byte-level BPE model ("model": {"type": "BPE"} in tokenizer.json). Encodes one pre-token's raw bytes:
// each byte starts as the id of its ByteLevel character, then the lowest-ranked adjacent pair is merged
// repeatedly (ties: leftmost), with a heap over a linked list of symbols — O(n log n) per piece. Results
// are cached per piece (thread-safe). Merges load from "a b" strings or ["a", "b"] pairs.
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kapitsa::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `spec` is tokenizer.json's "model"; `where` names the file in errors.
  static Expected<Bpe> from_json(const Json& spec, const std::string& where);

  // Appends the ids of one pre-token given as raw UTF-8 bytes.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // The same without the cache (benchmarks; the cache must never change results).
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  void clear_cache() const;

  // Vocabulary: token strings are in ByteLevel form ("Ġthe").
  const StringMap<int32_t>& vocab() const { return vocab_; }
  // Token string of id, or nullptr when id is not in the model's vocabulary.
  const std::string* token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct Cache {
    std::mutex mutex;
    StringMap<std::vector<int32_t>> entries;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each byte's ByteLevel character, -1 when absent
  int32_t unk_id_ = -1;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
};

}  // namespace kapitsa::text
