// Table-driven request validation: for every endpoint, each field's bad values are a 400 naming the
// field (OpenAI: error.param; Anthropic: the message), and nothing reaches the engine; the edge values
// just inside each range, and unknown fields, are accepted and reach the engine as sent.
#include "server_fixture.h"

#include <cstdint>
#include <limits>

namespace kapitsa::server::testing {
namespace {

const OJson kUser = {{{"role", "user"}, {"content", "hi"}}};

struct Endpoint {
  const char* path;
  OJson base;  // a valid request; each case changes one field of it
  bool anthropic;
};

const std::vector<Endpoint>& endpoints() {
  static const std::vector<Endpoint> all = {
      {"/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}}, false},
      {"/v1/completions", {{"model", "kapitsa-test"}, {"prompt", "hi"}}, false},
      {"/v1/responses", {{"model", "kapitsa-test"}, {"input", "hi"}}, false},
      {"/v1/messages", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_tokens", 16}}, true},
  };
  return all;
}

// A field and a value, the value as JSON text (parsed when the case runs: initializer lists of JSON
// values compile slowly, and these tables are long).
struct FieldValue {
  const char* field;
  const char* value;
};

// The sampling fields every endpoint reads.
const std::vector<FieldValue> kBadSampling = {
    {"temperature", "-0.1"}, {"temperature", "2.5"}, {"temperature", R"("hot")"}, {"temperature", "true"},
    {"top_p", "0"}, {"top_p", "-1"}, {"top_p", "1.5"}, {"top_p", R"("all")"},
    {"top_k", "-1"}, {"top_k", "1.5"}, {"top_k", R"("ten")"}, {"top_k", "1e300"},
    {"min_p", "-0.1"}, {"min_p", "1.1"}, {"min_p", "[]"},
    {"presence_penalty", "-2.5"}, {"presence_penalty", "3"}, {"presence_penalty", "1e300"},
    {"frequency_penalty", "-3"}, {"frequency_penalty", "2.1"}, {"frequency_penalty", R"("x")"},
    {"repetition_penalty", "0"}, {"repetition_penalty", "-1"}, {"repetition_penalty", "1e30"},
    {"seed", "1.5"}, {"seed", R"("42")"}, {"seed", "1e300"}, {"seed", "18446744073709551615"},
    {"logit_bias", R"("x")"}, {"logit_bias", R"({"abc": 1})"}, {"logit_bias", R"({"-1": 1})"},
    {"logit_bias", R"({"5": 101})"}, {"logit_bias", R"({"5": -1e9})"}, {"logit_bias", R"({"5": "up"})"},
    {"logit_bias", R"({"99999999999": 1})"},
};

// Fields one endpoint reads.
std::vector<FieldValue> bad_endpoint_values(const std::string& path) {
  if (path == "/v1/chat/completions")
    return {{"max_tokens", "0"}, {"max_tokens", "-5"}, {"max_tokens", "2.5"}, {"max_tokens", R"("many")"},
            {"max_tokens", "1e300"}, {"max_completion_tokens", "0"}, {"max_completion_tokens", "-1"},
            {"n", "0"}, {"n", "2"}, {"n", R"("one")"}, {"logprobs", R"("yes")"}, {"top_logprobs", "-1"},
            {"top_logprobs", "21"}, {"stream", R"("yes")"}, {"stream", "1"}, {"stop", "5"}, {"stop", "[1, 2]"},
            {"messages", R"("hi")"}, {"messages", "[]"}};
  if (path == "/v1/completions")
    return {{"max_tokens", "0"}, {"max_tokens", "-5"}, {"max_tokens", R"("x")"}, {"n", "3"}, {"logprobs", "-1"},
            {"logprobs", "6"}, {"logprobs", "true"}, {"stream", R"("no")"}, {"stop", R"(["a", 7])"}, {"prompt", "5"},
            {"prompt", R"(["a", "b"])"}};
  if (path == "/v1/responses")
    return {{"max_output_tokens", "0"}, {"max_output_tokens", "-1"}, {"max_output_tokens", R"("lots")"},
            {"stream", R"("true")"}, {"input", "5"}};
  return {{"max_tokens", "0"}, {"max_tokens", "-5"}, {"max_tokens", R"("x")"}, {"max_tokens", "null"},
          {"stream", R"("x")"}, {"stop_sequences", "5"}, {"stop_sequences", "[1]"}, {"messages", R"("hi")"},
          {"system", "5"}};
}

std::string error_param(const OJson& j, bool anthropic) {
  if (anthropic) return j["error"].value("message", "");
  return j["error"]["param"].is_string() ? j["error"]["param"].get<std::string>() : "";
}

TEST_F(ServerTest, EveryBadFieldValueIsA400NamingTheField) {
  size_t cases = 0;
  for (const auto& ep : endpoints()) {
    std::vector<FieldValue> table = kBadSampling;
    for (auto& b : bad_endpoint_values(ep.path)) table.push_back(b);
    for (const auto& bad : table) {
      OJson body = ep.base;
      body[bad.field] = OJson::parse(bad.value);
      const HttpResponse r = call(ep.path, body);
      const std::string what = std::string(ep.path) + " " + bad.field + "=" + bad.value;
      EXPECT_EQ(r.status, 400) << what << " → " << r.body;
      const OJson j = OJson::parse(r.body, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("error")) << what << " → " << r.body;
      if (ep.anthropic) {
        EXPECT_EQ(j["type"], "error") << what;
        EXPECT_EQ(j["error"]["type"], "invalid_request_error") << what;
      } else {
        EXPECT_EQ(j["error"]["type"], "invalid_request_error") << what;
      }
      // The field is named: the param for OpenAI (its message may name a sub-part), the message for Anthropic.
      EXPECT_NE(error_param(j, ep.anthropic).find(bad.field), std::string::npos) << what << " → " << r.body;
      ++cases;
    }
  }
  EXPECT_GT(cases, 150u);
  EXPECT_TRUE(engine->requests().empty()) << "a refused request reached the engine";
}

// Values at the edges of each range are accepted and reach the engine as sent; unknown fields are
// ignored, as the APIs do.
TEST_F(ServerTest, EdgeValuesAndUnknownFieldsAreAccepted) {
  const std::vector<FieldValue> goods = {
      {"temperature", "0"}, {"temperature", "2"}, {"top_p", "1"}, {"top_p", "1e-9"}, {"top_k", "0"}, {"top_k", "1e12"},
      {"min_p", "0"}, {"min_p", "1"}, {"presence_penalty", "-2"}, {"frequency_penalty", "2"}, {"repetition_penalty", "10"},
      {"seed", "-1"}, {"seed", "9223372036854775807"}, {"seed", "7.0"}, {"logit_bias", R"({"5": -100})"},
      {"logit_bias", R"({"5": 100})"}, {"frobnicate", R"({"x": 1})"}, {"user", R"("someone")"}, {"metadata", "{}"},
  };
  size_t accepted = 0;
  for (const auto& ep : endpoints()) {
    for (const auto& g : goods) {
      OJson body = ep.base;
      body[g.field] = OJson::parse(g.value);
      const HttpResponse r = call(ep.path, body);
      EXPECT_EQ(r.status, 200) << ep.path << " " << g.field << "=" << g.value << " → " << r.body;
      if (r.status == 200) ++accepted;
    }
  }
  ASSERT_EQ(engine->requests().size(), accepted);
  // What the engine got from the chat endpoint's cases (its requests come first, in order).
  const auto reqs = engine->requests();
  EXPECT_FLOAT_EQ(reqs[1].sampling.temperature, 2.0f);
  EXPECT_EQ(reqs[5].sampling.top_k, std::numeric_limits<int32_t>::max());  // more than the vocabulary: no limit
  EXPECT_FLOAT_EQ(reqs[8].sampling.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(reqs[10].sampling.repetition_penalty, 10.0f);
  EXPECT_EQ(reqs[11].sampling.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(reqs[13].sampling.seed, 7u);
  EXPECT_FLOAT_EQ(reqs[14].sampling.logit_bias.at(5), -100.0f);
}

}  // namespace
}  // namespace kapitsa::server::testing
