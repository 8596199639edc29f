// `kapitsa pull`'s work: list a revision of a Hub repository, download its files (or one file) into the
// Hub cache (hub_cache.h) or a --local-dir, several at a time, each resumed from its .incomplete part
// with an HTTP Range request, its size checked and, for LFS files, its sha256; a corrupt file is fetched
// once more. Only complete, verified files are renamed into place, and the snapshot links and refs come
// last, so an interrupted pull never leaves something that looks like a model.
#pragma once

#include "base/status.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace kapitsa::cli::hub {

struct PullRequest {
  std::string repo;               // "org/name"
  std::string file;               // one file of the repository, or empty for all of them
  std::string revision = "main";  // a branch, tag or commit
  std::string local_dir;          // files go here instead of the Hub cache when set
  int jobs = 8;                   // files downloaded at once
  int retries = 5;                // per file, for cut connections and 429/502/503/504
  bool quiet = false;             // no progress output
};

struct PullResult {
  std::filesystem::path path;  // the snapshot folder (or local dir), or the file when one was asked for
  int64_t downloaded_bytes = 0;
  int files = 0;
};

Expected<PullResult> pull(const PullRequest& request);

}  // namespace kapitsa::cli::hub
