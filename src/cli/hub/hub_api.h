// The Hugging Face Hub's HTTP API as `kapitsa pull` uses it: the settings from the environment
// (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE), the listing of one revision of a model repository
// (GET /api/models/{repo}/revision/{rev}?blobs=true: the commit, every file with its size, git blob id
// and, for LFS files, the sha256) and the resolve/ URL a file downloads from. Error texts say what to do.
#pragma once

#include "base/status.h"
#include "cli/hub/http.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kapitsa::cli::hub {

struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, without a trailing slash
  std::string token;                                // HF_TOKEN (also HUGGING_FACE_HUB_TOKEN)
  bool offline = false;                             // HF_HUB_OFFLINE=1|true|yes|on
  static HubConfig from_env();
  std::vector<std::string> auth_headers() const;  // "Authorization: Bearer …" when a token is set
};

struct RemoteFile {
  std::string path;    // "model.safetensors", relative to the repository root
  int64_t size = 0;
  std::string blob_id;  // the git blob sha1
  std::string sha256;   // LFS files: the content's sha256 (empty for files kept in git)
  // The name of the file's blob in the Hub cache, as huggingface_hub names it: the LFS sha256, else the
  // git blob id (the ETag the Hub sends for each).
  const std::string& etag() const { return sha256.empty() ? blob_id : sha256; }
};

struct RepoRevision {
  std::string commit;  // 40 hex digits
  std::vector<RemoteFile> files;
};

// Parses the revision listing; `where` names it in errors.
Expected<RepoRevision> parse_revision(const std::string& body, const std::string& where);

Expected<RepoRevision> fetch_revision(Http& http, const HubConfig& config, const std::string& repo,
                                      const std::string& revision);

std::string resolve_url(const HubConfig& config, const std::string& repo, const std::string& commit,
                        const std::string& path);

// "GET URL: 401 — …what to do" for a failed status; `what` names the request ("repository X").
std::string http_error_text(const HttpResult& r, const std::string& url, const std::string& what, const HubConfig& config);

}  // namespace kapitsa::cli::hub
