// The Hub API calls and texts behind hub_api.h.
#include "cli/hub/hub_api.h"

#include "base/json.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kapitsa::cli::hub {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool truthy(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

bool is_commit(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c); });
}

}  // namespace

HubConfig HubConfig::from_env() {
  HubConfig c;
  if (std::string e = env("HF_ENDPOINT"); !e.empty()) {
    while (!e.empty() && e.back() == '/') e.pop_back();
    c.endpoint = e;
  }
  c.token = env("HF_TOKEN");
  if (c.token.empty()) c.token = env("HUGGING_FACE_HUB_TOKEN");
  c.offline = truthy(env("HF_HUB_OFFLINE"));
  return c;
}

std::vector<std::string> HubConfig::auth_headers() const {
  if (token.empty()) return {};
  return {"Authorization: Bearer " + token};
}

Expected<RepoRevision> parse_revision(const std::string& body, const std::string& where) {
  auto parsed = parse_json_lenient(body, where);
  if (!parsed.ok()) return parsed.error();
  const Json& j = parsed.value();
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() || !is_commit(j["sha"].get<std::string>()))
    return error("{}: no commit (\"sha\") in the answer", where);
  if (!j.contains("siblings") || !j["siblings"].is_array()) return error("{}: no file list (\"siblings\")", where);
  RepoRevision out;
  out.commit = j["sha"].get<std::string>();
  for (const Json& s : j["siblings"]) {
    RemoteFile f;
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
      return error("{}: a file entry without \"rfilename\"", where);
    f.path = s["rfilename"].get<std::string>();
    if (f.path.empty() || f.path.front() == '/' || f.path.find("..") != std::string::npos)
      return error("{}: refusing the file name '{}' (absolute or with '..')", where, f.path);
    f.size = s.value("size", int64_t(-1));
    f.blob_id = s.value("blobId", std::string());
    if (s.contains("lfs") && s["lfs"].is_object()) {
      f.sha256 = s["lfs"].value("sha256", std::string());
      f.size = s["lfs"].value("size", f.size);
    }
    if (f.size < 0 || f.etag().empty())
      return error("{}: {} has no size or blob id (the listing was asked with blobs=true)", where, f.path);
    out.files.push_back(std::move(f));
  }
  return out;
}

std::string resolve_url(const HubConfig& config, const std::string& repo, const std::string& commit,
                        const std::string& path) {
  return config.endpoint + "/" + repo + "/resolve/" + commit + "/" + url_path(path);
}

std::string http_error_text(const HttpResult& r, const std::string& url, const std::string& what, const HubConfig& config) {
  if (!r.transport.empty()) return fmt::format("{}: {} ({}); check the network or HF_ENDPOINT", what, r.transport, url);
  std::string hint;
  switch (r.status) {
    case 401:
    case 403:
      hint = config.token.empty()
                 ? "the repository does not exist, or it is private or gated: set HF_TOKEN to a token that can read it"
                 : "HF_TOKEN was sent and refused: check the token, and accept the model's terms on its Hub page if it is gated";
      break;
    case 404: hint = "not found: check the repository id, the revision and the file name"; break;
    case 429: hint = "rate limited by the Hub: wait a minute and run the command again"; break;
    default:
      hint = r.status >= 500 ? "the Hub had a server error: try again later" : "unexpected answer";
  }
  std::string detail;
  if (!r.body.empty() && r.body.size() < 300) {
    detail = r.body;
    std::replace(detail.begin(), detail.end(), '\n', ' ');
    detail = " (server said: " + detail + ")";
  }
  return fmt::format("{}: HTTP {} from {} — {}{}", what, r.status, url, hint, detail);
}

Expected<RepoRevision> fetch_revision(Http& http, const HubConfig& config, const std::string& repo,
                                      const std::string& revision) {
  const std::string url = config.endpoint + "/api/models/" + repo + "/revision/" + url_path(revision) + "?blobs=true";
  const HttpResult r = http.get(url, config.auth_headers());
  if (!r.ok()) return error("{}", http_error_text(r, url, fmt::format("repository {} at {}", repo, revision), config));
  return parse_revision(r.body, url);
}

}  // namespace kapitsa::cli::hub
