// Model defaults shared by every architecture: the thin forward wrappers over the one entry point.
#include "models/model.h"

namespace kapitsa::models {

Status Model::forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                      const Tensor& hidden) const {
  const BatchItem item{ids, &state, logits};
  ForwardOutputs outputs;
  outputs.all_layers = hidden;
  return forward_items(std::span<const BatchItem>(&item, 1), outputs);
}

Status Model::forward_batch(std::span<const BatchItem> items) const { return forward_items(items, ForwardOutputs{}); }

Status Model::forward_items(std::span<const BatchItem> items, ForwardOutputs outputs) const {
  // The rows each item asks for: all of its tokens, or the last one.
  std::vector<ForwardBatch::Sequence> sequences;
  std::vector<ForwardOutputs::Rows> logits;
  size_t total_rows = 0;
  for (const BatchItem& item : items) total_rows += item.ids.size();
  std::vector<int32_t> rows(total_rows);  // 0, 1, … n-1 for the longest item (shared by all)
  for (size_t i = 0; i < total_rows; ++i) rows[i] = static_cast<int32_t>(i);
  for (size_t j = 0; j < items.size(); ++j) {
    const BatchItem& item = items[j];
    sequences.push_back({item.ids, item.state});
    const int64_t n = static_cast<int64_t>(item.ids.size());
    if (item.logits.empty()) continue;
    if (item.logits.rank() != 2 || (item.logits.dim(0) != n && item.logits.dim(0) != 1))
      return error("forward: logits {} for {} tokens", item.logits.shape().str(), n);
    const std::span<const int32_t> wanted =
        item.logits.dim(0) == n ? std::span<const int32_t>(rows).first(static_cast<size_t>(n))
                                : std::span<const int32_t>(rows).subspan(static_cast<size_t>(n - 1), 1);
    logits.push_back({j, wanted, item.logits});
  }
  outputs.logits = logits;
  std::lock_guard lock(workspace_mu_);
  workspace_.set_device(device());
  ForwardContext ctx{workspace_};
  return forward(ForwardBatch{sequences}, outputs, ctx);
}

Status Model::run_step(const ForwardBatch& batch, const ForwardOutputs& outputs) const {
  std::lock_guard lock(workspace_mu_);
  workspace_.set_device(device());
  ForwardContext ctx{workspace_};
  return forward(batch, outputs, ctx);
}

Status Model::forward_mtp(std::span<const MtpRows>, ForwardContext&) const {
  return error("{} has no multi-token-prediction head", info().model_type);
}

Status Model::run_mtp(std::span<const MtpRows> sequences) const {
  std::lock_guard lock(workspace_mu_);
  workspace_.set_device(device());
  ForwardContext ctx{workspace_};
  return forward_mtp(sequences, ctx);
}

Status Model::forward_greedy_chain(const ForwardBatch&, int, int64_t, std::span<const std::span<const int32_t>>,
                                   std::span<int32_t>, ForwardContext&) const {
  return error("{} cannot chain greedy steps", info().model_type);
}

Status Model::run_greedy_chain(const ForwardBatch& batch, int steps, int64_t columns,
                               std::span<const std::span<const int32_t>> checkpoint_slots,
                               std::span<int32_t> guesses) const {
  std::lock_guard lock(workspace_mu_);
  workspace_.set_device(device());
  ForwardContext ctx{workspace_};
  return forward_greedy_chain(batch, steps, columns, checkpoint_slots, guesses, ctx);
}

void SequenceState::rollback(int64_t, int32_t&) {
  KAPITSA_CHECK(false, "this kind of sequence state cannot be rolled back (speculative decoding)");
}

std::shared_ptr<KvPagePool> Model::default_kv_pool() const {
  std::lock_guard lock(default_pool_mu_);
  if (!default_pool_) default_pool_ = std::make_shared<KvPagePool>(kv_layout());
  return default_pool_;
}

}  // namespace kapitsa::models
