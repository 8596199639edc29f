// Error shapes per API (see api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kapitsa::server {

int ApiError::status() const {
  switch (kind) {
    case ErrorKind::invalid_argument: return 400;
    case ErrorKind::context_too_long: return 400;
    case ErrorKind::unauthenticated: return 401;
    case ErrorKind::not_found: return 404;
    case ErrorKind::too_large: return 413;
    case ErrorKind::unavailable: return 503;
    case ErrorKind::overloaded: return 429;
    case ErrorKind::internal: return 500;
  }
  return 500;
}

std::string openai_error_json(const ApiError& e) {
  const char* type = "invalid_request_error";
  nlohmann::json code = nullptr;
  switch (e.kind) {
    case ErrorKind::invalid_argument: break;
    case ErrorKind::context_too_long: code = "context_length_exceeded"; break;
    case ErrorKind::unauthenticated: type = "authentication_error"; code = "invalid_api_key"; break;
    case ErrorKind::not_found:
      type = "not_found_error";
      code = e.param == "model" ? "model_not_found" : "not_found";
      break;
    case ErrorKind::too_large: code = "request_too_large"; break;
    case ErrorKind::unavailable: type = "unavailable_error"; code = "model_loading"; break;
    case ErrorKind::overloaded: type = "rate_limit_error"; code = "rate_limit_exceeded"; break;
    case ErrorKind::internal: type = "server_error"; break;
  }
  nlohmann::json j = {{"error",
                       {{"message", e.message},
                        {"type", type},
                        {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
                        {"code", code}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string anthropic_error_json(const ApiError& e) {
  const char* type = "invalid_request_error";
  switch (e.kind) {
    case ErrorKind::invalid_argument:
    case ErrorKind::context_too_long: break;
    case ErrorKind::unauthenticated: type = "authentication_error"; break;
    case ErrorKind::not_found: type = "not_found_error"; break;
    case ErrorKind::too_large: type = "request_too_large"; break;
    case ErrorKind::unavailable: type = "overloaded_error"; break;
    case ErrorKind::overloaded: type = "rate_limit_error"; break;
    case ErrorKind::internal: type = "api_error"; break;
  }
  nlohmann::json j = {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kapitsa::server
