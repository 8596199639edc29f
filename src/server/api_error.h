// ApiError: a request failure with its HTTP status and a kind every API maps to its own error shape
// (OpenAI {"error":{message,type,param,code}}, Anthropic {"type":"error","error":{type,message}}).
// Endpoints return it from translation steps; nothing here knows a wire format.
#pragma once

#include <string>

namespace kapitsa::server {

enum class ErrorKind {
  invalid_request,   // 400: malformed JSON, missing or mistyped fields, template errors
  context_length,    // 400: prompt longer than the context
  authentication,    // 401
  not_found,         // 404: unknown model or path
  too_large,         // 413: body over the limit
  unavailable,       // 503: model still loading, shutting down
  internal,          // 500
};

struct ApiError {
  ApiError() = default;
  ApiError(ErrorKind k, std::string m, std::string p = {}) : kind(k), message(std::move(m)), param(std::move(p)) {}

  ErrorKind kind = ErrorKind::invalid_request;
  std::string message;
  std::string param;  // the offending field, when one is to blame

  int status() const;
};

inline ApiError invalid_request(std::string message, std::string param = {}) {
  return ApiError{ErrorKind::invalid_request, std::move(message), std::move(param)};
}

// {"error":{"message","type","param","code"}} as OpenAI (and the AI SDK / pi) parse it.
std::string openai_error_json(const ApiError& e);
// {"type":"error","error":{"type","message"}} as the Anthropic SDK parses it.
std::string anthropic_error_json(const ApiError& e);

}  // namespace kapitsa::server
