// Model lookup, loading and reply printing for `kapitsa run` / `kapitsa chat` (see generate_common.h).
#include "cli/generate_common.h"

#include "base/json.h"
#include "cli/catalog/catalog.h"
#include "cli/draft_model.h"
#include "cli/gguf_text.h"
#include "cli/hub/pull.h"
#include "models/fingerprint.h"
#include "models/model.h"
#include "runtime/mtp_proposer.h"
#include "runtime/proposer.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

namespace kapitsa::cli {
namespace fs = std::filesystem;

namespace {

const char* kDemo = "models/demo/target";

bool is_model_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / "config.json", ec);
}

}  // namespace

std::string served_model_id(const std::string& model_dir) {
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  if ((name == "target" || name == "draft") && p.has_parent_path()) name = p.parent_path().filename().string();
  return name.empty() ? std::string("kapitsa") : name;
}

Expected<std::string> resolve_model_dir(const std::string& option, bool pull) {
  if (!option.empty()) {
    if (is_model_dir(option)) return option;  // a folder never needs the catalog
    KAPITSA_TRY(catalog::Catalog models, catalog::load_catalog());
    auto found = catalog::resolve_model(option, models);  // alias, org/name[:quant], .gguf
    if (found.ok() || !pull || !catalog::names_hub_model(option)) return found;
    KAPITSA_TRY(catalog::HubRef ref, catalog::hub_ref(option, models));
    if (!ref.unsupported.empty()) return found;  // says why it cannot run: nothing to download for
    hub::PullRequest req;
    req.repo = ref.repo, req.file = ref.file;
    std::fprintf(stderr, "kapitsa: --pull: downloading %s into %s\n", ref.repo.c_str(), catalog::hub_cache_dir().c_str());
    KAPITSA_TRY(hub::PullResult pulled, hub::pull(req));
    return catalog::resolve_model(option, models);
  }
  if (const std::optional<fs::path> demo = catalog::find_shipped(kDemo, is_model_dir)) return demo->string();
  return error("no --model given and the bundled demo model ({}) was not found next to the kapitsa executable, "
               "under $KAPITSA_HOME or in the current directory; pass --model DIR",
               kDemo);
}

Expected<std::vector<int32_t>> read_token_ids(const std::string& path) {
  KAPITSA_TRY(Json json, read_json_file(path));
  if (!json.is_array()) return error("{}: expected a JSON array of token ids", path);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < json.size(); ++i) {
    if (!json[i].is_number_integer() || json[i].get<int64_t>() < 0 || json[i].get<int64_t>() > INT32_MAX)
      return error("{}: element {} is {}, not a token id", path, i, json[i].dump());
    ids.push_back(json[i].get<int32_t>());
  }
  if (ids.empty()) return error("{}: the array of token ids is empty", path);
  return ids;
}

Expected<LoadedModel> load_for_generation(const std::string& dir, const runtime::EngineOptions& options, Device device) {
  LoadedModel out;
  out.dir = dir;
  // A .gguf file: tokenizer, chat template and sampling defaults from its metadata; a file without
  // tokenizer metadata uses the tokenizer.json (and tokenizer_config.json) in the folder it is in.
  const bool gguf = dir.ends_with(".gguf");
  const std::string text_dir = gguf ? fs::absolute(fs::path(dir)).parent_path().string() : dir;
  if (gguf && !fs::exists(fs::path(text_dir) / "tokenizer.json")) {
    KAPITSA_TRY(GgufText text, load_gguf_text(dir));
    out.tokenizer = std::make_shared<const text::Tokenizer>(std::move(text.tokenizer));
    out.chat_template = std::move(text.chat_template);
    out.default_sampling = text.sampling;
  } else {
    KAPITSA_TRY(auto tokenizer, text::Tokenizer::load(text_dir));
    out.tokenizer = std::make_shared<const text::Tokenizer>(std::move(tokenizer));
    if (auto t = text::ChatTemplate::from_model_dir(text_dir); t.ok()) out.chat_template.emplace(std::move(t).value());
  }
  // generation_config.json: the sampling the model was released with (absent keys keep the defaults).
  const fs::path gen = fs::path(text_dir) / "generation_config.json";
  if (fs::exists(gen)) {
    KAPITSA_TRY(Json g, read_json_file(gen.string()));
    runtime::SamplingParams& s = out.default_sampling;
    if (g.value("do_sample", true) == false) s.temperature = 0;
    else if (g.contains("temperature") && g["temperature"].is_number()) s.temperature = g["temperature"].get<float>();
    if (g.contains("top_k") && g["top_k"].is_number_integer()) s.top_k = g["top_k"].get<int>();
    if (g.contains("top_p") && g["top_p"].is_number()) s.top_p = g["top_p"].get<float>();
    if (g.contains("min_p") && g["min_p"].is_number()) s.min_p = g["min_p"].get<float>();
    if (g.contains("repetition_penalty") && g["repetition_penalty"].is_number())
      s.repetition_penalty = g["repetition_penalty"].get<float>();
  }
  models::LoadOptions load;
  load.device = device;
  KAPITSA_TRY(auto model, models::load_model(dir, load));
  runtime::EngineOptions engine_options = options;
  if (!engine_options.disk_cache.dir.empty()) {  // entries are this model's only: docs/decisions.md
    KAPITSA_TRY(engine_options.disk_cache.fingerprint, models::model_fingerprint(dir, load));
  }
  KAPITSA_TRY(out.engine, runtime::Engine::create(std::move(model), out.tokenizer, engine_options));
  return out;
}

void SamplingFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--temperature", temperature, "Sampling temperature; 0 = greedy (default: the model's generation_config)");
  cmd->add_option("--top-k", top_k, "Keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", top_p, "Nucleus sampling mass (1 = off)");
  cmd->add_option("--min-p", min_p, "Drop tokens below min-p × the best token's probability (0 = off)");
  cmd->add_option("--repetition-penalty", repetition_penalty, "Penalise tokens already seen (1 = off)");
  cmd->add_option("--presence-penalty", presence_penalty, "Subtract from tokens already generated");
  cmd->add_option("--frequency-penalty", frequency_penalty, "Subtract per occurrence of a generated token");
  cmd->add_option("--seed", seed, "Random seed: the same seed gives the same output");
}

runtime::SamplingParams SamplingFlags::apply(runtime::SamplingParams s) const {
  if (temperature) s.temperature = *temperature;
  if (top_k) s.top_k = *top_k;
  if (top_p) s.top_p = *top_p;
  if (min_p) s.min_p = *min_p;
  if (repetition_penalty) s.repetition_penalty = *repetition_penalty;
  if (presence_penalty) s.presence_penalty = *presence_penalty;
  if (frequency_penalty) s.frequency_penalty = *frequency_penalty;
  if (seed) s.seed = *seed;
  return s;
}

void SpecFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--spec", spec,
                  "Speculative decoding (output unchanged, only faster): 'ngram' guesses the next tokens from "
                  "earlier text of the same conversation, 'draft' asks the --draft model, 'mtp' the model's own "
                  "multi-token-prediction head (mtp.* tensors), 'auto' the draft model when one is given, else "
                  "the MTP head when the model has one, else n-gram; 'none' decodes one token a step")
      ->capture_default_str();
  cmd->add_option("--spec-k", spec_k, "The most guessed tokens verified per step")->capture_default_str();
  cmd->add_option("--draft", draft, "Draft model folder for --spec draft|auto (the model's tokenizer)");
}

Status SpecFlags::apply(runtime::EngineOptions& options) const {
  if (spec_k < 1 || spec_k > 32) return error("--spec-k must be between 1 and 32, got {}", spec_k);
  options.spec_tokens = spec_k;
  options.spec_cost_aware = true;  // a draft only as long as it pays on this machine (runtime/draft_cost.h)
  options.proposer = nullptr;
  if (spec != "none" && spec != "ngram" && spec != "draft" && spec != "mtp" && spec != "auto")
    return error("--spec must be 'none', 'ngram', 'draft', 'mtp' or 'auto', got '{}'", spec);
  if (spec == "draft" && draft.empty()) return error("--spec draft needs --draft DIR (a draft model folder)");
  if (!draft.empty() && (spec == "none" || spec == "ngram" || spec == "mtp"))
    return error("--draft {} is only used with --spec draft or --spec auto, not --spec {}", draft, spec);
  if (!draft.empty() && !fs::is_regular_file(fs::path(draft) / "config.json"))
    return error("--draft {}: not a model folder (no config.json)", draft);
  if (spec == "ngram") options.proposer = std::make_shared<runtime::NgramProposer>();
  // The model is not loaded yet: Engine::create attaches the proposer, which then checks for a head
  // (mtp: an error without one; auto: n-gram without one).
  if (spec == "mtp" || (spec == "auto" && draft.empty()))
    options.proposer = std::make_shared<runtime::MtpProposer>(runtime::MtpProposer::Options{spec == "auto"});
  return ok_status();
}

Status SpecFlags::load_draft(const std::string& target_dir, runtime::EngineOptions& options, Device device) const {
  if (!uses_draft()) return ok_status();
  KAPITSA_TRY(options.proposer, load_draft_proposer(draft, target_dir, options, device));
  return ok_status();
}

ReplyPrinter::ReplyPrinter(text::ParserOptions parser, bool colour) : parser_(std::move(parser)), colour_(colour) {}

text::ParserOptions terminal_parser(const text::ChatPrompt& prompt) {
  text::ParserOptions parser = prompt.parser;
  parser.tools = prompt.format.tools;
  return parser;
}

void ReplyPrinter::print(const text::ParseEvents& events) {
  for (const text::ParseEvent& e : events) {
    const bool reasoning = e.kind == text::ParseEvent::Kind::reasoning;
    if (reasoning != in_reasoning_) {
      if (colour_) std::fputs(reasoning ? "\x1b[2m" : "\x1b[0m", stdout);
      if (!reasoning && !reasoning_.empty()) std::fputs("\n\n", stdout);  // set the answer apart
      in_reasoning_ = reasoning;
    }
    switch (e.kind) {
      case text::ParseEvent::Kind::content:
        content_ += e.text;
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        break;
      case text::ParseEvent::Kind::reasoning:
        reasoning_ += e.text;
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        break;
      case text::ParseEvent::Kind::tool_call:
        std::fprintf(stdout, "\n[tool call] %s(%s)\n", e.call.name.c_str(), e.call.arguments.c_str());
        break;
      case text::ParseEvent::Kind::warning:
        break;
    }
  }
  std::fflush(stdout);
}

void ReplyPrinter::feed(const std::string& text) { print(parser_.feed(text)); }

void ReplyPrinter::finish() {
  print(parser_.finish());
  if (in_reasoning_ && colour_) std::fputs("\x1b[0m", stdout);
  in_reasoning_ = false;
  std::fputs("\n", stdout);
  std::fflush(stdout);
}

void print_stats(const runtime::FinishEvent& f, bool colour, std::string_view proposer) {
  const char* reason = f.reason == runtime::FinishReason::stop      ? "stop"
                       : f.reason == runtime::FinishReason::length  ? "length"
                       : f.reason == runtime::FinishReason::cancelled ? "cancelled"
                                                                      : "error";
  std::string spec;  // speculative decoding: how many guesses were kept, and per verifying step
  if (f.stats.draft_tokens > 0)
    spec = fmt::format(", {}{} of {} guessed tokens accepted ({:.2f} per step)", proposer.empty() ? "" : std::string(proposer) + ": ",
                       f.stats.draft_tokens_accepted,
                       f.stats.draft_tokens,
                       f.stats.draft_steps > 0 ? static_cast<double>(f.stats.draft_tokens_accepted) / f.stats.draft_steps : 0.0);
  std::fprintf(stderr, "%s[%d tokens, %.1f tokens/s, first token %.3f s, prompt %d tokens (%d cached)%s, %s]%s\n",
               colour ? "\x1b[2m" : "", f.stats.completion_tokens, f.stats.decode_tokens_per_s,
               f.stats.time_to_first_token_s, f.stats.prompt_tokens, f.stats.cached_prompt_tokens, spec.c_str(), reason,
               colour ? "\x1b[0m" : "");
  if (f.reason == runtime::FinishReason::error) std::fprintf(stderr, "error: %s\n", f.error.c_str());
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr; }

}  // namespace kapitsa::cli
