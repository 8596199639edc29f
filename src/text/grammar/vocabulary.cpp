// TokenVocabulary: token bytes from the tokenizer and the preorder byte trie (see vocabulary.h).
#include "text/grammar/vocabulary.h"

#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <numeric>

namespace kapitsa::text {

TokenVocabulary::TokenVocabulary(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  bytes_.resize(static_cast<size_t>(n));
  special_.assign(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    if (!tokenizer.append_token_bytes(id, bytes_[static_cast<size_t>(id)])) bytes_[static_cast<size_t>(id)].clear();
    special_[static_cast<size_t>(id)] = tokenizer.is_special(id) ? 1 : 0;
  }
  build_trie();
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<uint8_t> special)
    : bytes_(std::move(token_bytes)), special_(std::move(special)) {
  special_.resize(bytes_.size(), 0);
  build_trie();
}

void TokenVocabulary::build_trie() {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id)
    if (!special_[static_cast<size_t>(id)] && !bytes_[static_cast<size_t>(id)].empty()) order.push_back(id);
  // std::string compares bytes as unsigned (char_traits<char>::compare is memcmp-like).
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)]; });
  nodes_.clear();
  node_tokens_.clear();
  nodes_.push_back(Node{});
  std::vector<int32_t> path{0};  // node ids from the root to the current node
  std::string_view prev;
  auto close = [&](int32_t node) { nodes_[static_cast<size_t>(node)].subtree_end = static_cast<int32_t>(nodes_.size()); };
  for (int32_t id : order) {
    const std::string_view b = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < b.size() && common < prev.size() && b[common] == prev[common]) ++common;
    while (path.size() > common + 1) {
      close(path.back());
      path.pop_back();
    }
    for (size_t k = common; k < b.size(); ++k) {
      Node node;
      node.byte = static_cast<uint8_t>(b[k]);
      node.depth = static_cast<uint16_t>(std::min<size_t>(k + 1, 65535));
      node.token_begin = node.token_end = static_cast<int32_t>(node_tokens_.size());
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    Node& last = nodes_[static_cast<size_t>(path.back())];
    if (last.token_begin == last.token_end) last.token_begin = static_cast<int32_t>(node_tokens_.size());
    node_tokens_.push_back(id);
    last.token_end = static_cast<int32_t>(node_tokens_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(b.size()));
    prev = b;
  }
  while (!path.empty()) {
    close(path.back());
    path.pop_back();
  }
}

}  // namespace kapitsa::text
