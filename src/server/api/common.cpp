// Shared endpoint helpers (see common.h).
#include "server/api/common.h"

#include "text/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace kapitsa::server::api {

ApiResult<OJson> parse_body(const HttpRequest& request) {
  if (request.body.empty()) return invalid_request("the request body is empty; expected a JSON object");
  OJson body = OJson::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return invalid_request("the request body is not valid JSON");
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  return body;
}

ApiResult<std::optional<int64_t>> opt_int(const OJson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float() && it->get<double>() == static_cast<double>(static_cast<int64_t>(it->get<double>())))
    return std::optional<int64_t>(static_cast<int64_t>(it->get<double>()));
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
  if (!take(opt_number(body, "temperature"), v, err)) return *err;
  if (v) {
    if (*v < 0 || *v > 2) return invalid_request("temperature must be between 0 and 2", "temperature");
    s.temperature = static_cast<float>(*v);
  }
  if (!take(opt_number(body, "top_p"), v, err)) return *err;
  if (v) {
    if (*v <= 0 || *v > 1) return invalid_request("top_p must be in (0, 1]", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (!take(opt_int(body, "top_k"), i, err)) return *err;
  if (i) {
    if (*i < 0) return invalid_request("top_k must be >= 0", "top_k");
    s.top_k = static_cast<int>(*i);
  }
  if (!take(opt_number(body, "min_p"), v, err)) return *err;
  if (v) s.min_p = static_cast<float>(*v);
  if (!take(opt_number(body, "presence_penalty"), v, err)) return *err;
  if (v) s.presence_penalty = static_cast<float>(*v);
  if (!take(opt_number(body, "frequency_penalty"), v, err)) return *err;
  if (v) s.frequency_penalty = static_cast<float>(*v);
  if (!take(opt_number(body, "repetition_penalty"), v, err)) return *err;
  if (v) s.repetition_penalty = static_cast<float>(*v);
  if (!take(opt_int(body, "seed"), i, err)) return *err;
  if (i) s.seed = static_cast<uint64_t>(*i);
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return invalid_request("logit_bias must be an object of token id → bias", "logit_bias");
    for (auto b = it->begin(); b != it->end(); ++b) {
      char* end = nullptr;
      const long id = std::strtol(b.key().c_str(), &end, 10);
      if (end == b.key().c_str() || *end != 0 || id < 0 || !b.value().is_number())
        return invalid_request(fmt::format("logit_bias: '{}' must map a token id to a number", b.key()), "logit_bias");
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
