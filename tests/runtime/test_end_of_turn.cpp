// End-of-turn prefill: after a reply with GenerateRequest::end_of_turn_ids, the engine folds those ids
// in the background and snapshots the result, so the next turn (prompt + reply + end of turn + new
// user text) prefills only its new tokens — with the logits of a cold run. Both ways a reply ends:
// at the length limit (the last token is content) and at a stop token (it is not).
#include "models/model.h"
#include "runtime/engine.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

namespace kapitsa::runtime {
namespace {

std::unique_ptr<Engine> engine_for(const std::string& fixture) {
  auto model = models::load_model(testing::test_data_path("fixtures/" + fixture));
  EXPECT_TRUE(model.ok());
  auto engine = Engine::create(std::move(model).value(), nullptr, {});
  EXPECT_TRUE(engine.ok());
  return std::move(engine).value();
}

struct Reply {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  FinishEvent finish;
};

Reply drain(Generation& g) {
  Reply r;
  Event e;
  while (g.next(e)) {
    if (auto* t = std::get_if<TokenEvent>(&e)) {
      r.ids.push_back(t->id);
      r.logprobs.push_back(t->logprob);
    } else {
      r.finish = std::get<FinishEvent>(e);
    }
  }
  return r;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 0;
  return r;
}

void expect_next_turn_prefills_only_new_tokens(const std::string& fixture, bool stop_token) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << fixture << (stop_token ? " stop token" : " length") << " seed " << seed);
  std::mt19937_64 rng(seed);
  auto warm = engine_for(fixture);
  auto cold = engine_for(fixture);
  const int64_t V = warm->model_info().vocab_size;
  auto random_ids = [&](size_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V - 1));
    return v;
  };
  const std::vector<int32_t> turn1 = random_ids(20 + rng() % 30), eot = random_ids(2), user = random_ids(3 + rng() % 8);
  GenerateRequest r1 = greedy(turn1, 8);
  std::vector<int32_t> content;
  if (stop_token) {
    // Stop at the 4th greedy token; as with Qwen's <|im_end|>, the end of turn starts with it.
    const std::vector<int32_t> greedy_ids = drain(**cold->submit(greedy(turn1, 4))).ids;
    r1.stop_token_ids = {greedy_ids[3]};
    content.assign(greedy_ids.begin(), greedy_ids.begin() + (std::find(greedy_ids.begin(), greedy_ids.end(), greedy_ids[3]) - greedy_ids.begin()));
    r1.end_of_turn_ids = {greedy_ids[3], eot[1]};
  } else {
    r1.end_of_turn_ids = eot;
  }
  const Reply first = drain(**warm->submit(r1));
  ASSERT_EQ(first.finish.reason, stop_token ? FinishReason::stop : FinishReason::length);
  if (!stop_token) content = first.ids;
  else ASSERT_EQ(first.ids.back(), r1.stop_token_ids[0]);

  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), content.begin(), content.end());
  turn2.insert(turn2.end(), r1.end_of_turn_ids.begin(), r1.end_of_turn_ids.end());
  const int64_t reused = static_cast<int64_t>(turn2.size());
  turn2.insert(turn2.end(), user.begin(), user.end());
  const EngineCounters before = warm->counters();
  const Reply second = drain(**warm->submit(greedy(turn2, 6)));
  const EngineCounters after = warm->counters();
  // Folded in the background: the tokens after the reply's folded part (its last sampled token when
  // it is content, then the end of turn).
  EXPECT_EQ(after.end_of_turn_tokens, stop_token ? 2 : 3);
  EXPECT_EQ(second.finish.stats.cached_prompt_tokens, reused);
  EXPECT_EQ(after.prompt_tokens_prefilled - before.prompt_tokens_prefilled, static_cast<int64_t>(user.size()));
  const Reply fresh = drain(**cold->submit(greedy(turn2, 6)));
  ASSERT_EQ(second.ids, fresh.ids);
  for (size_t i = 0; i < fresh.logprobs.size(); ++i)
    EXPECT_NEAR(second.logprobs[i], fresh.logprobs[i], 1e-5 * std::max(1.0f, std::abs(fresh.logprobs[i])));
}

// A preload: the history as the next request renders it differs from prompt + reply (as when a
// template drops the reply's reasoning): the engine folds it from the deepest snapshot on its path
// (here the turn boundary) and the next turn reuses all of it — with the logits of a cold run.
void expect_preload_reused(const std::string& fixture) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << fixture << " seed " << seed);
  std::mt19937_64 rng(seed);
  EngineOptions options;
  options.prefill_chunk_tokens = 7;  // the preload folds in several chunks
  auto make = [&] {
    auto model = models::load_model(testing::test_data_path("fixtures/" + fixture));
    EXPECT_TRUE(model.ok());
    return std::move(Engine::create(std::move(model).value(), nullptr, options)).value();
  };
  auto warm = make();
  auto cold = make();
  const int64_t V = warm->model_info().vocab_size;
  auto random_ids = [&](size_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V - 1));
    return v;
  };
  const std::vector<int32_t> history = random_ids(20 + rng() % 20), generation_prompt = random_ids(3);
  std::vector<int32_t> turn1 = history;
  turn1.insert(turn1.end(), generation_prompt.begin(), generation_prompt.end());
  GenerateRequest r1 = greedy(turn1, 6);
  r1.turn_boundary = history.size();
  r1.cache_key = "conversation";
  const Reply first = drain(**warm->submit(r1));
  ASSERT_EQ(first.finish.reason, FinishReason::length);

  // The reply as history: other ids than the ones generated (20 of them: three chunks of 7).
  std::vector<int32_t> next = history;
  const std::vector<int32_t> rendered_reply = random_ids(20);
  next.insert(next.end(), rendered_reply.begin(), rendered_reply.end());
  const int64_t folded_before = warm->counters().end_of_turn_tokens;
  ASSERT_TRUE(warm->preload(next, "conversation").ok());
  // end_of_turn_pending counts the preload from the call on and is 0 only once it is folded.
  for (int i = 0; i < 1000 && warm->counters().end_of_turn_pending > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(warm->counters().end_of_turn_pending, 0);
  EXPECT_EQ(warm->counters().end_of_turn_tokens - folded_before, static_cast<int64_t>(rendered_reply.size()));
  std::vector<int32_t> turn2 = next;
  const std::vector<int32_t> user = random_ids(5);
  turn2.insert(turn2.end(), user.begin(), user.end());
  const EngineCounters before = warm->counters();
  const Reply second = drain(**warm->submit(greedy(turn2, 5)));
  const EngineCounters after = warm->counters();
  EXPECT_EQ(after.end_of_turn_tokens - before.end_of_turn_tokens, 0);  // folded before the request came
  EXPECT_EQ(second.finish.stats.prompt_tokens, static_cast<int>(turn2.size()));
  EXPECT_EQ(second.finish.stats.cached_prompt_tokens, static_cast<int>(next.size()));
  EXPECT_EQ(after.prompt_tokens_prefilled - before.prompt_tokens_prefilled, static_cast<int64_t>(user.size()));
  const Reply fresh = drain(**cold->submit(greedy(turn2, 5)));
  ASSERT_EQ(second.ids, fresh.ids);
  for (size_t i = 0; i < fresh.logprobs.size(); ++i)
    EXPECT_NEAR(second.logprobs[i], fresh.logprobs[i], 1e-5 * std::max(1.0f, std::abs(fresh.logprobs[i])));
  // Bad ids are named; nothing is queued.
  EXPECT_FALSE(warm->preload({static_cast<int32_t>(V)}, "").ok());
}

TEST(EndOfTurn, PreloadIsReusedQwen35) { expect_preload_reused("qwen35-dense-tiny"); }
TEST(EndOfTurn, PreloadIsReusedNemotronH) { expect_preload_reused("nemotron-h-tiny"); }

TEST(EndOfTurn, NextTurnPrefillsOnlyNewTokensQwen35) { expect_next_turn_prefills_only_new_tokens("qwen35-dense-tiny", false); }
TEST(EndOfTurn, NextTurnPrefillsOnlyNewTokensNemotronH) { expect_next_turn_prefills_only_new_tokens("nemotron-h-tiny", false); }
TEST(EndOfTurn, AfterAStopTokenQwen35) { expect_next_turn_prefills_only_new_tokens("qwen35-dense-tiny", true); }

}  // namespace
}  // namespace kapitsa::runtime
