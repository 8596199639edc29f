// TokenVocabulary: every token's bytes, organised as a byte trie for GrammarMatcher::fill_mask, built
// once per tokenizer and shared (immutable). Special added tokens (control tokens such as <|im_end|>)
// are never matched by text: the caller decides about them (end-of-generation ids). Non-special added
// tokens (<tool_call>, <think>) match by their text like any other token. Ids without bytes (holes
// in the vocabulary, empty tokens) are never allowed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

class Tokenizer;

class TokenVocabulary {
 public:
  // From a tokenizer: raw bytes of each id (byte-level BPE decoded), special flags from its added tokens.
  explicit TokenVocabulary(const Tokenizer& tokenizer);
  // From explicit token bytes (tests): special[id] != 0 marks a control token.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<uint8_t> special);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_special(int32_t id) const { return special_[static_cast<size_t>(id)] != 0; }

  // The trie in depth-first preorder. Node 0 is the root (no byte). A node's subtree is the node range
  // [node, node.subtree_end). Tokens ending at a node are token_ids[token_begin, token_end).
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;         // bytes from the root
    int32_t subtree_end = 0;
    int32_t token_begin = 0, token_end = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& node_tokens() const { return node_tokens_; }
  int max_depth() const { return max_depth_; }

 private:
  void build_trie();

  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_;
  std::vector<Node> nodes_;
  std::vector<int32_t> node_tokens_;
  int max_depth_ = 0;
};

}  // namespace kapitsa::text
