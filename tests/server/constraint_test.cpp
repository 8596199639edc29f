// Reading output constraints (tool_choice, response_format, text.format, output_config.format) from
// each API's request body: what each field means, and errors naming the field for malformed ones.
#include "server/constraint.h"

#include <gtest/gtest.h>

namespace kapitsa::server {
namespace {

using Kind = OutputConstraint::Kind;

OutputConstraint ok(const ApiResult<OutputConstraint>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << "unexpected error: " << e->message;
  return std::holds_alternative<OutputConstraint>(r) ? std::get<OutputConstraint>(r) : OutputConstraint{};
}

ApiError err(const ApiResult<OutputConstraint>& r) {
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "expected an error";
    return {};
  }
  return std::get<ApiError>(r);
}

const OJson kSchema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};

TEST(Constraint, OpenAIChat) {
  EXPECT_EQ(ok(openai_chat_constraint(OJson::object())).kind, Kind::none);
  EXPECT_EQ(ok(openai_chat_constraint({{"tool_choice", "auto"}})).kind, Kind::none);
  EXPECT_EQ(ok(openai_chat_constraint({{"tool_choice", "none"}})).kind, Kind::none);
  auto required = ok(openai_chat_constraint({{"tool_choice", "required"}}));
  EXPECT_EQ(required.kind, Kind::tool_call);
  EXPECT_EQ(required.tool_name, "");
  auto named = ok(openai_chat_constraint({{"tool_choice", {{"type", "function"}, {"function", {{"name", "read"}}}}}}));
  EXPECT_EQ(named.kind, Kind::tool_call);
  EXPECT_EQ(named.tool_name, "read");
  EXPECT_EQ(ok(openai_chat_constraint({{"response_format", {{"type", "text"}}}})).kind, Kind::none);
  EXPECT_EQ(ok(openai_chat_constraint({{"response_format", {{"type", "json_object"}}}})).kind, Kind::json_object);
  auto js = ok(openai_chat_constraint(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", kSchema}}}}}}));
  EXPECT_EQ(js.kind, Kind::json_schema);
  EXPECT_EQ(js.schema, kSchema);
  // A forced tool call wins over a response format.
  EXPECT_EQ(ok(openai_chat_constraint({{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}})).kind,
            Kind::tool_call);

  EXPECT_EQ(err(openai_chat_constraint({{"tool_choice", "always"}})).param, "tool_choice");
  EXPECT_EQ(err(openai_chat_constraint({{"tool_choice", {{"type", "function"}, {"function", OJson::object()}}}})).param,
            "tool_choice.function.name");
  EXPECT_EQ(err(openai_chat_constraint({{"response_format", {{"type", "yaml"}}}})).param, "response_format.type");
  EXPECT_EQ(err(openai_chat_constraint({{"response_format", {{"type", "json_schema"}}}})).param, "response_format");
  EXPECT_EQ(err(openai_chat_constraint({{"response_format", "json"}})).param, "response_format");
}

TEST(Constraint, Responses) {
  EXPECT_EQ(ok(responses_constraint({{"tool_choice", "auto"}, {"text", {{"format", {{"type", "text"}}}}}})).kind, Kind::none);
  EXPECT_EQ(ok(responses_constraint({{"tool_choice", "required"}})).kind, Kind::tool_call);
  auto named = ok(responses_constraint({{"tool_choice", {{"type", "custom"}, {"name", "apply_patch"}}}}));
  EXPECT_EQ(named.kind, Kind::tool_call);
  EXPECT_EQ(named.tool_name, "apply_patch");
  EXPECT_EQ(ok(responses_constraint({{"tool_choice", {{"type", "allowed_tools"}, {"mode", "required"}}}})).kind,
            Kind::tool_call);
  auto js = ok(responses_constraint({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", kSchema}}}}}}));
  EXPECT_EQ(js.kind, Kind::json_schema);
  EXPECT_EQ(js.schema, kSchema);
  EXPECT_EQ(err(responses_constraint({{"text", {{"format", {{"type", "xml"}}}}}})).param, "text.format.type");
  EXPECT_EQ(err(responses_constraint({{"text", "json"}})).param, "text");
  EXPECT_EQ(err(responses_constraint({{"tool_choice", {{"type", "file_search"}}}})).param, "tool_choice.type");
}

TEST(Constraint, Anthropic) {
  EXPECT_EQ(ok(anthropic_constraint({{"tool_choice", {{"type", "auto"}}}})).kind, Kind::none);
  EXPECT_EQ(ok(anthropic_constraint({{"tool_choice", {{"type", "any"}}}})).kind, Kind::tool_call);
  auto named = ok(anthropic_constraint({{"tool_choice", {{"type", "tool"}, {"name", "Read"}}}}));
  EXPECT_EQ(named.tool_name, "Read");
  // Claude Code sends output_config with only an effort: no constraint.
  EXPECT_EQ(ok(anthropic_constraint({{"output_config", {{"effort", "high"}}}})).kind, Kind::none);
  auto js = ok(anthropic_constraint({{"output_config", {{"format", {{"type", "json_schema"}, {"schema", kSchema}}}}}}));
  EXPECT_EQ(js.kind, Kind::json_schema);
  EXPECT_EQ(ok(anthropic_constraint({{"output_format", {{"type", "json_schema"}, {"schema", kSchema}}}})).kind,
            Kind::json_schema);
  EXPECT_EQ(err(anthropic_constraint({{"tool_choice", "any"}})).param, "tool_choice");
  EXPECT_EQ(err(anthropic_constraint({{"tool_choice", {{"type", "tool"}}}})).param, "tool_choice.name");
  EXPECT_EQ(err(anthropic_constraint({{"tool_choice", {{"type", "maybe"}}}})).param, "tool_choice.type");
}

}  // namespace
}  // namespace kapitsa::server
