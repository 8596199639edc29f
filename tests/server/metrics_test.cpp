// GET /metrics: speculative decoding is reported per proposer (a `proposer` label on the draft
// counters, and the mean accepted tokens per verifying step), and not at all without a proposer.
#include "server_fixture.h"

namespace kapitsa::server::testing {
namespace {

TEST_F(ServerTest, MetricsLabelSpeculationByProposer) {
  make("qwen3.5.jinja");
  const std::string without = call_raw("/metrics", "", {}, "GET").body;
  EXPECT_EQ(without.find("kapitsa_draft_tokens_total"), std::string::npos) << without;
  runtime::EngineCounters c;
  c.proposer = "draft";
  c.draft_tokens = 120;
  c.draft_tokens_accepted = 90;
  c.draft_steps = 40;
  engine->set_speculation(c);
  const std::string body = call_raw("/metrics", "", {}, "GET").body;
  EXPECT_NE(body.find("kapitsa_draft_tokens_total{proposer=\"draft\"} 120\n"), std::string::npos) << body;
  EXPECT_NE(body.find("kapitsa_draft_tokens_accepted_total{proposer=\"draft\"} 90\n"), std::string::npos) << body;
  EXPECT_NE(body.find("kapitsa_draft_steps_total{proposer=\"draft\"} 40\n"), std::string::npos) << body;
  EXPECT_NE(body.find("kapitsa_draft_accepted_per_step{proposer=\"draft\"} 2.25\n"), std::string::npos) << body;
}

}  // namespace
}  // namespace kapitsa::server::testing
