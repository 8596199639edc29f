// The endpoints, one file per API surface: each translates between its wire format (JSON, SSE) and
// the Service (prompt preparation, GenerateRequest, run_turn). Each answers errors in its own API's
// error shape. Routing, authentication and body limits are the transport's (transport.cpp).
#pragma once

#include "server/http.h"
#include "server/service.h"

#include <string>

namespace kapitsa::server::api {

HttpResponse openai_chat(Service& service, const HttpRequest& request);         // POST /v1/chat/completions
HttpResponse openai_completions(Service& service, const HttpRequest& request);  // POST /v1/completions
HttpResponse openai_responses(Service& service, const HttpRequest& request);    // POST /v1/responses
HttpResponse anthropic_messages(Service& service, const HttpRequest& request);  // POST /v1/messages
HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& request);  // …/count_tokens
HttpResponse models_list(Service& service, const HttpRequest& request);         // GET /v1/models
HttpResponse model_get(Service& service, const std::string& id);                // GET /v1/models/{id}
HttpResponse health(Service& service, const HttpRequest& request);              // GET /health
HttpResponse metrics(Service& service, const HttpRequest& request);             // GET /metrics

// Error responses in each API's shape (also used by the transport for 401 / 404 / 413).
HttpResponse openai_error(const ApiError& e);
// An overloaded answer (429) tells the client when to try again: Retry-After, in seconds.
HttpResponse with_retry_after(const ApiError& e, HttpResponse r);
HttpResponse anthropic_error(const ApiError& e);

}  // namespace kapitsa::server::api
