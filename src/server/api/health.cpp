// GET /health: 503 {"status":"loading"} until the model is ready, then 200 {"status":"ok"}
// (llama.cpp's convention, which launchers poll); 503 again while shutting down.
#include "server/api/api.h"
#include "server/api/common.h"

namespace kapitsa::server::api {

HttpResponse health(Service& service, const HttpRequest&) {
  if (service.shutting_down()) return json_response(503, R"({"status":"shutting_down"})");
  if (!service.ready())
    return json_response(503, R"({"status":"loading","error":{"code":503,"message":"Loading model","type":"unavailable_error"}})");
  return json_response(200, R"({"status":"ok"})");
}

}  // namespace kapitsa::server::api
