// Helpers every API endpoint shares: body parsing, typed optional fields with errors naming the
// field, sampling parameters, stop sequences, the session key for the prefix cache, thinking control,
// ids. Wire-format neutral: errors come back as ApiError for the endpoint to shape.
#pragma once

#include "runtime/request.h"
#include "server/api_error.h"
#include "server/conversation.h"
#include "server/http.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::server::api {

template <typename T>
const ApiError* failed(const ApiResult<T>& r) {
  return std::get_if<ApiError>(&r);
}
template <typename T>
T& value_of(ApiResult<T>& r) {
  return std::get<T>(r);
}

// The body as a JSON object (malformed JSON and non-objects are errors).
ApiResult<OJson> parse_body(const HttpRequest& request);

// Optional typed fields: absent or null → nullopt; a wrong type → an error naming the field.
ApiResult<std::optional<int64_t>> opt_int(const OJson& body, const char* key);
// An output budget (max_tokens, max_completion_tokens, max_output_tokens): absent, or an integer >= 1.
ApiResult<std::optional<int64_t>> opt_token_budget(const OJson& body, const char* key);
ApiResult<std::optional<double>> opt_number(const OJson& body, const char* key);
ApiResult<std::optional<bool>> opt_bool(const OJson& body, const char* key);

// temperature, top_p, top_k, min_p, presence/frequency/repetition penalties, seed, logit_bias.
// Fields the request leaves out keep `base` (the model's defaults).
ApiResult<runtime::SamplingParams> sampling_params(const OJson& body, runtime::SamplingParams base);

// `stop` / `stop_sequences`: a string or an array of strings (at most 16).
ApiResult<std::vector<std::string>> stop_strings(const OJson& body, const char* key);

// The conversation key agents send (x-session-affinity, x-session-id, session-id,
// X-Claude-Code-Session-Id headers; prompt_cache_key in the body; Claude Code's metadata.user_id
// session_id), or "".
std::string session_key(const HttpRequest& request, const OJson& body);

// Template variables from the request's thinking controls: chat_template_kwargs (wins), top-level
// enable_thinking, reasoning_effort / reasoning.effort ("none" and "minimal" turn thinking off).
OJson thinking_kwargs(const OJson& body);

std::string new_id(const char* prefix);
int64_t unix_now();

HttpResponse json_response(int status, const std::string& body);

// One chat-completions logprobs entry {token, logprob, bytes, top_logprobs[]} for a generated token.
OJson logprob_entry(const text::Tokenizer& tokenizer, const runtime::TokenEvent& token);

// Serialises without ever throwing: invalid UTF-8 from a model becomes U+FFFD.
std::string dump(const OJson& j);

}  // namespace kapitsa::server::api
