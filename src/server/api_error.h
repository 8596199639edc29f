// ApiError: a request failure with the kind of its Error (base/status.h), the HTTP status that kind
// maps to, and each API's error shape (OpenAI {"error":{message,type,param,code}}, Anthropic
// {"type":"error","error":{type,message}}). The mapping lives here only: endpoints and the Service pass
// kinds along (api_error(...) of a lower layer's Error) and never look at message text.
#pragma once

#include "base/status.h"

#include <string>

namespace kapitsa::server {

struct ApiError {
  ApiError() = default;
  ApiError(ErrorKind k, std::string m, std::string p = {}) : kind(k), message(std::move(m)), param(std::move(p)) {}

  ErrorKind kind = ErrorKind::invalid_argument;
  std::string message;
  std::string param;  // the offending field, when one is to blame

  // invalid_argument, context_too_long 400; unauthenticated 401; not_found 404; too_large 413;
  // overloaded 429 (with Retry-After); internal 500; unavailable 503.
  int status() const;
};

inline ApiError invalid_request(std::string message, std::string param = {}) {
  return ApiError{ErrorKind::invalid_argument, std::move(message), std::move(param)};
}

// An Error from a lower layer (the engine, the template, a grammar) as an ApiError of the same kind;
// `context` goes in front of its message.
inline ApiError api_error(const Error& e, const std::string& context = {}, std::string param = {}) {
  return ApiError{e.kind, context + e.message, std::move(param)};
}

// {"error":{"message","type","param","code"}} as OpenAI (and the AI SDK / pi) parse it.
std::string openai_error_json(const ApiError& e);
// {"type":"error","error":{"type","message"}} as the Anthropic SDK parses it.
std::string anthropic_error_json(const ApiError& e);

}  // namespace kapitsa::server
