// Shared endpoint helpers (see common.h).
#include "server/api/common.h"

#include "server/json_body.h"
#include "text/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>

namespace kapitsa::server::api {

ApiResult<OJson> parse_body(const HttpRequest& request) {
  if (request.body.empty()) return invalid_request("the request body is empty; expected a JSON object");
  std::optional<OJson> body = parse_json(request.body);
  if (!body) return invalid_request("the request body is not valid JSON");
  if (!body->is_object()) return invalid_request("the request body must be a JSON object");
  return std::move(*body);
}

ApiResult<std::optional<int64_t>> opt_int(const OJson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  // An unsigned above int64's range would wrap: out of every field's range anyway, so an error.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return invalid_request(fmt::format("{} is too large", key), key);
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float()) {
    // 3.0 is accepted as 3; the range check first, as casting a double outside int64 is undefined.
    const double d = it->get<double>();
    if (std::abs(d) > 9.0e18) return invalid_request(fmt::format("{} is too large", key), key);
    if (d == std::trunc(d)) return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return invalid_request(fmt::format("{} must be an integer", key), key);
}

ApiResult<std::optional<int64_t>> opt_token_budget(const OJson& body, const char* key) {
  auto v = opt_int(body, key);
  if (const auto* n = std::get_if<std::optional<int64_t>>(&v); n && *n && **n < 1)
    return invalid_request(fmt::format("{} must be at least 1, got {}", key, **n), key);
  return v;
}

ApiResult<std::optional<double>> opt_number(const OJson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<double>();
  if (it->is_number()) return std::optional<double>(it->get<double>());
  return invalid_request(fmt::format("{} must be a number", key), key);
}

ApiResult<std::optional<bool>> opt_bool(const OJson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<bool>();
  if (it->is_boolean()) return std::optional<bool>(it->get<bool>());
  return invalid_request(fmt::format("{} must be true or false", key), key);
}

namespace {
template <typename T>
bool take(ApiResult<std::optional<T>>&& r, std::optional<T>& out, std::optional<ApiError>& err) {
  if (auto* e = std::get_if<ApiError>(&r)) {
    err = *e;
    return false;
  }
  out = std::get<std::optional<T>>(r);
  return true;
}
}  // namespace

ApiResult<runtime::SamplingParams> sampling_params(const OJson& body, runtime::SamplingParams s) {
  std::optional<ApiError> err;
  std::optional<double> v;
  std::optional<int64_t> i;
  // Each number within [lo, hi] (lo excluded when open_low): the ranges OpenAI documents, where it does.
  auto ranged = [&](const char* key, double lo, double hi, bool open_low, float& out) {
    if (!take(opt_number(body, key), v, err)) return false;
    if (!v) return true;
    if ((open_low ? *v <= lo : *v < lo) || *v > hi) {
      err = invalid_request(fmt::format("{} must be {}{}, {}], got {}", key, open_low ? "in (" : "in [", lo, hi, *v), key);
      return false;
    }
    out = static_cast<float>(*v);
    return true;
  };
  if (!ranged("temperature", 0, 2, false, s.temperature)) return *err;
  if (!ranged("top_p", 0, 1, true, s.top_p)) return *err;
  if (!ranged("min_p", 0, 1, false, s.min_p)) return *err;
  if (!ranged("presence_penalty", -2, 2, false, s.presence_penalty)) return *err;
  if (!ranged("frequency_penalty", -2, 2, false, s.frequency_penalty)) return *err;
  if (!ranged("repetition_penalty", 0, 10, true, s.repetition_penalty)) return *err;
  if (!take(opt_int(body, "top_k"), i, err)) return *err;
  if (i) {
    if (*i < 0) return invalid_request(fmt::format("top_k must be >= 0 (0 = no limit), got {}", *i), "top_k");
    s.top_k = static_cast<int>(std::min<int64_t>(*i, INT32_MAX));  // more than the vocabulary = no limit
  }
  if (!take(opt_int(body, "seed"), i, err)) return *err;
  if (i) s.seed = static_cast<uint64_t>(*i);
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return invalid_request("logit_bias must be an object of token id → bias", "logit_bias");
    for (auto b = it->begin(); b != it->end(); ++b) {
      char* end = nullptr;
      const long id = std::strtol(b.key().c_str(), &end, 10);
      if (end == b.key().c_str() || *end != 0 || id < 0 || id > INT32_MAX || !b.value().is_number())
        return invalid_request(fmt::format("logit_bias: '{}' must map a token id to a number", b.key()), "logit_bias");
      if (const double bias = b.value().get<double>(); bias < -100 || bias > 100)
        return invalid_request(fmt::format("logit_bias: the bias of token {} must be in [-100, 100], got {}", id, bias), "logit_bias");
      s.logit_bias[static_cast<int32_t>(id)] = b.value().get<float>();
    }
  }
  return s;
}

ApiResult<std::vector<std::string>> stop_strings(const OJson& body, const char* key) {
  std::vector<std::string> out;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return out;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) out.push_back(it->get<std::string>());
    return out;
  }
  if (!it->is_array()) return invalid_request(fmt::format("{} must be a string or an array of strings", key), key);
  for (const auto& s : *it) {
    if (!s.is_string()) return invalid_request(fmt::format("{} must be a string or an array of strings", key), key);
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  if (out.size() > 16) return invalid_request(fmt::format("{}: at most 16 stop sequences", key), key);
  return out;
}

std::string session_key(const HttpRequest& request, const OJson& body) {
  for (const char* h : {"x-session-affinity", "x-claude-code-session-id", "x-session-id", "session-id"})
    if (std::string v = request.header(h); !v.empty()) return v;
  if (auto it = body.find("prompt_cache_key"); it != body.end() && it->is_string()) return it->get<std::string>();
  // Claude Code also names its session inside metadata.user_id (a JSON string) when no header says it.
  if (auto m = body.find("metadata"); m != body.end() && m->is_object())
    if (auto u = m->find("user_id"); u != m->end() && u->is_string()) {
      const OJson user = OJson::parse(u->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (user.is_object())
        if (auto id = user.find("session_id"); id != user.end() && id->is_string() && !id->get<std::string>().empty())
          return id->get<std::string>();
    }
  return {};
}

OJson thinking_kwargs(const OJson& body) {
  OJson kwargs = OJson::object();
  auto effort_off = [](const OJson& e) {
    return e.is_string() && (e.get<std::string>() == "none" || e.get<std::string>() == "minimal");
  };
  if (auto it = body.find("reasoning_effort"); it != body.end() && effort_off(*it)) kwargs["enable_thinking"] = false;
  if (auto it = body.find("reasoning"); it != body.end() && it->is_object()) {
    if (auto e = it->find("effort"); e != it->end() && effort_off(*e)) kwargs["enable_thinking"] = false;
  }
  if (auto it = body.find("enable_thinking"); it != body.end() && it->is_boolean()) kwargs["enable_thinking"] = *it;
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && it->is_object())
    for (auto kv = it->begin(); kv != it->end(); ++kv) kwargs[kv.key()] = kv.value();
  return kwargs;
}

std::string new_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HttpResponse json_response(int status, const std::string& body) {
  HttpResponse r;
  r.status = status;
  r.body = body;
  return r;
}

OJson logprob_entry(const text::Tokenizer& tokenizer, const runtime::TokenEvent& token) {
  auto one = [&](int32_t id, float logprob) {
    std::string bytes;
    tokenizer.append_token_bytes(id, bytes);
    OJson b = OJson::array();
    for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
    const int32_t ids[1] = {id};
    return OJson{{"token", tokenizer.decode(ids)}, {"logprob", logprob}, {"bytes", std::move(b)}};
  };
  OJson e = one(token.id, token.logprob);
  OJson top = OJson::array();
  for (const auto& t : token.top) top.push_back(one(t.id, t.logprob));
  e["top_logprobs"] = std::move(top);
  return e;
}

std::string dump(const OJson& j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); }

HttpResponse with_retry_after(const ApiError& e, HttpResponse r) {
  if (e.kind == ErrorKind::overloaded) r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace kapitsa::server::api
