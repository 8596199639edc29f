// `kapitsa pull SPEC`, `kapitsa ls` and `kapitsa rm SPEC`: download a catalog alias or Hub id into the
// Hugging Face cache (or --local-dir), list what the cache holds with sizes, and delete a model from it.
// The download itself is cli/hub/pull.h.
#include "cli/catalog/catalog.h"
#include "cli/commands.h"
#include "cli/hub/hub_cache.h"
#include "cli/hub/progress.h"
#include "cli/hub/pull.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

namespace kapitsa::cli {
namespace {

struct PullOptions {
  std::string spec, revision = "main", local_dir;
  int jobs = 8, retries = 5;
  bool quiet = false;
};

int run_pull(const PullOptions& o) {
  auto cat = catalog::load_catalog();
  if (!cat.ok()) return std::fprintf(stderr, "kapitsa pull: %s\n", cat.error().message.c_str()), 1;
  auto ref = catalog::hub_ref(o.spec, *cat);
  if (!ref.ok()) return std::fprintf(stderr, "kapitsa pull: %s\n", ref.error().message.c_str()), 2;
  hub::PullRequest req;
  req.repo = ref->repo, req.file = ref->file, req.revision = o.revision, req.local_dir = o.local_dir;
  req.jobs = o.jobs, req.retries = o.retries, req.quiet = o.quiet;
  if (!ref->unsupported.empty())  // asked for by name: downloaded (other tools read the same cache), with a note
    std::fprintf(stderr, "kapitsa pull: note: Kapitsa cannot run %s yet: %s. Downloading it anyway.\n", o.spec.c_str(),
                 ref->unsupported.c_str());
  if (!o.quiet)
    std::fprintf(stderr, "kapitsa pull: %s%s%s (%s)\n", req.repo.c_str(), req.file.empty() ? "" : " ", req.file.c_str(),
                 o.local_dir.empty() ? catalog::hub_cache_dir().c_str() : o.local_dir.c_str());
  auto r = hub::pull(req);
  if (!r.ok()) return std::fprintf(stderr, "kapitsa pull: %s\n", r.error().message.c_str()), 1;
  std::printf("%s\n", r->path.c_str());
  if (!o.quiet)
    std::fprintf(stderr, "kapitsa pull: %d files, %s downloaded. Run it with: kapitsa run --model %s \"Hello\"\n", r->files,
                 hub::Progress::bytes(double(r->downloaded_bytes)).c_str(),
                 o.local_dir.empty() ? o.spec.c_str() : r->path.c_str());
  return 0;
}

// The catalog entries naming `repo`, as "27b:4bit, 27b:6bit".
std::string aliases_of(const std::string& repo, const catalog::Catalog* cat) {
  std::string out;
  if (cat != nullptr)
    for (const catalog::ModelEntry& m : cat->models)
      for (const catalog::QuantEntry& q : m.quants)
        if (q.repo == repo) out += (out.empty() ? "" : ", ") + m.alias + ":" + q.name;
  return out;
}

int run_ls(bool json) {
  const std::filesystem::path cache = catalog::hub_cache_dir();
  const auto cat = catalog::load_catalog();
  const std::vector<hub::CachedRepo> repos = hub::list_cached(cache);
  if (json) {
    Json out = {{"cache", cache.string()}, {"models", Json::array()}};
    for (const hub::CachedRepo& r : repos)
      out["models"].push_back({{"repo", r.repo}, {"path", r.root.string()}, {"commit", r.main_commit},
                               {"bytes", r.blob_bytes}, {"incomplete_bytes", r.incomplete_bytes}, {"files", r.files},
                               {"aliases", aliases_of(r.repo, cat.ok() ? &*cat : nullptr)}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("Hub cache: %s\n", cache.c_str());
  if (repos.empty()) return std::printf("(empty — `kapitsa pull ALIAS` downloads a model)\n"), 0;
  std::printf("%-44s %-10s %10s %6s  %s\n", "REPOSITORY", "REVISION", "SIZE", "FILES", "ALIASES / STATE");
  int64_t sum = 0;
  for (const hub::CachedRepo& r : repos) {
    std::string state = aliases_of(r.repo, cat.ok() ? &*cat : nullptr);
    if (r.main_commit.empty()) state += (state.empty() ? "" : "; ") + std::string("incomplete: no refs/main");
    if (r.incomplete_bytes > 0)
      state += (state.empty() ? "" : "; ") + fmt::format("{} partly downloaded (kapitsa pull resumes)",
                                                         hub::Progress::bytes(double(r.incomplete_bytes)));
    std::printf("%-44s %-10s %10s %6d  %s\n", r.repo.c_str(), r.main_commit.substr(0, 8).c_str(),
                hub::Progress::bytes(double(r.blob_bytes + r.incomplete_bytes)).c_str(), r.files, state.c_str());
    sum += r.blob_bytes + r.incomplete_bytes;
  }
  std::printf("%zu models, %s\n", repos.size(), hub::Progress::bytes(double(sum)).c_str());
  return 0;
}

int run_rm(const std::string& spec) {
  auto cat = catalog::load_catalog();
  if (!cat.ok()) return std::fprintf(stderr, "kapitsa rm: %s\n", cat.error().message.c_str()), 1;
  auto ref = catalog::hub_ref(spec, *cat);
  if (!ref.ok()) return std::fprintf(stderr, "kapitsa rm: %s\n", ref.error().message.c_str()), 2;
  const hub::RepoCache c = hub::repo_cache(ref->repo);
  std::error_code ec;
  if (!std::filesystem::exists(c.root(), ec))
    return std::fprintf(stderr, "kapitsa rm: %s is not in %s (`kapitsa ls` lists what is)\n", ref->repo.c_str(),
                        c.cache.c_str()),
           1;
  int64_t bytes = 0;
  for (const hub::CachedRepo& r : hub::list_cached(c.cache))
    if (r.root == c.root()) bytes = r.blob_bytes + r.incomplete_bytes;
  std::filesystem::remove_all(c.root(), ec);
  if (ec) return std::fprintf(stderr, "kapitsa rm: removing %s: %s\n", c.root().c_str(), ec.message().c_str()), 1;
  std::filesystem::remove_all(c.lock("").parent_path(), ec);  // its .locks folder
  std::printf("removed %s (%s freed)\n", c.root().c_str(), hub::Progress::bytes(double(bytes)).c_str());
  return 0;
}

}  // namespace

void add_pull_commands(CLI::App& app) {
  auto o = std::make_shared<PullOptions>();
  CLI::App* pull = app.add_subcommand("pull", "Download a model (alias, org/name[:quant]) into the Hugging Face cache");
  pull->add_option("model", o->spec, "A catalog alias (27b, 35b:8bit, ...) or a Hub id (org/name)")->required();
  pull->add_option("--revision", o->revision, "Branch, tag or commit (default main)");
  pull->add_option("--local-dir", o->local_dir, "Put the files in this folder instead of the Hub cache");
  pull->add_option("--jobs", o->jobs, "Files downloaded at once (default 8)")->check(CLI::Range(1, 64));
  pull->add_option("--retries", o->retries, "Tries again per file after a cut connection or 429/502/503/504 (default 5)")
      ->check(CLI::Range(0, 100));
  pull->add_flag("--quiet", o->quiet, "No progress output; print only the path");
  pull->callback([o] { exit_code() = run_pull(*o); });

  auto json = std::make_shared<bool>(false);
  CLI::App* ls = app.add_subcommand("ls", "List the models in the Hugging Face cache with their sizes");
  ls->add_flag("--json", *json, "Print JSON");
  ls->callback([json] { exit_code() = run_ls(*json); });

  auto spec = std::make_shared<std::string>();
  CLI::App* rm = app.add_subcommand("rm", "Delete a model (alias or org/name) from the Hugging Face cache");
  rm->add_option("model", *spec, "A catalog alias or a Hub id")->required();
  rm->callback([spec] { exit_code() = run_rm(*spec); });
}

}  // namespace kapitsa::cli
