// Loading and checking a draft model (see draft_model.h).
#include "cli/draft_model.h"

#include "models/model.h"
#include "runtime/draft_proposer.h"
#include "text/tokenizer/tokenizer.h"

#include <algorithm>

namespace kapitsa::cli {

Status check_same_tokenizer(const std::string& draft_dir, const std::string& target_dir) {
  auto draft = text::Tokenizer::load(draft_dir);
  if (!draft.ok()) return error("--draft {}: {}", draft_dir, draft.error().message);
  auto target = text::Tokenizer::load(target_dir);
  if (!target.ok()) return error("{}: {}", target_dir, target.error().message);
  const int32_t n = std::max(draft->vocab_size(), target->vocab_size());
  for (int32_t id = 0; id < n; ++id) {
    const std::string d = draft->token_string(id), t = target->token_string(id);
    if (d != t || draft->is_special(id) != target->is_special(id))
      return error("--draft {}: its tokenizer differs from the model's ({}) at token id {}: '{}'{} in the draft, '{}'{} "
                   "in the model; a draft model needs the same tokenizer",
                   draft_dir, target_dir, id, d, draft->is_special(id) ? " (special)" : "", t,
                   target->is_special(id) ? " (special)" : "");
  }
  return ok_status();
}

Expected<std::shared_ptr<runtime::Proposer>> load_draft_proposer(const std::string& draft_dir, const std::string& target_dir,
                                                                 const runtime::EngineOptions& options, Device device) {
  KAPITSA_RETURN_IF_ERROR(check_same_tokenizer(draft_dir, target_dir));
  models::LoadOptions load;
  load.device = device;
  auto model = models::load_model(draft_dir, load);
  if (!model.ok()) return error("--draft {}: {}", draft_dir, model.error().message);
  runtime::DraftModelProposer::Options o;
  o.context_tokens = options.context_tokens;
  o.kv_dtype = options.kv_dtype;
  o.kv_page_tokens = options.kv_page_tokens;
  o.prefill_chunk_tokens = options.prefill_chunk_tokens;
  o.seed = options.seed;
  // The draft's snapshots follow the target's conversations; a draft is a few percent of the target, so an
  // eighth of the target's budget holds them (none where the target keeps none: kapitsa run).
  o.prefix_cache_bytes = options.prefix_cache_bytes / 8;
  return std::shared_ptr<runtime::Proposer>(std::make_shared<runtime::DraftModelProposer>(std::move(model).value(), o));
}

}  // namespace kapitsa::cli
