// GET /v1/models and /v1/models/{id}: the served model ids with the real context window
// (context_length, max_model_len and meta.context_length, as discovery-based clients look for it).
// Fields of both the OpenAI and the Anthropic list shapes, so either SDK can list models.
#include "server/api/api.h"
#include "server/api/common.h"

namespace kapitsa::server::api {
namespace {

OJson model_json(Service& service, const std::string& id, int64_t created) {
  const int64_t ctx = service.ready() ? service.context_tokens() : 0;
  return {{"id", id},
          {"object", "model"},
          {"type", "model"},
          {"created", created},
          {"created_at", "1970-01-01T00:00:00Z"},
          {"owned_by", "kapitsa"},
          {"display_name", id},
          {"context_length", ctx},
          {"max_model_len", ctx},
          {"meta", {{"context_length", ctx}}}};
}

}  // namespace

HttpResponse models_list(Service& service, const HttpRequest&) {
  static const int64_t created = unix_now();
  OJson data = OJson::array();
  for (const auto& id : service.options().model_ids) data.push_back(model_json(service, id, created));
  const std::string first = service.options().model_ids.front(), last = service.options().model_ids.back();
  return json_response(200, dump(OJson{{"object", "list"}, {"data", std::move(data)}, {"has_more", false},
                                       {"first_id", first}, {"last_id", last}}));
}

HttpResponse model_get(Service& service, const std::string& id) {
  const auto& ids = service.options().model_ids;
  if (std::find(ids.begin(), ids.end(), id) == ids.end() && !service.options().accept_any_model)
    return openai_error(ApiError{ErrorKind::not_found, "model '" + id + "' does not exist", "model"});
  return json_response(200, dump(model_json(service, id, unix_now())));
}

}  // namespace kapitsa::server::api
