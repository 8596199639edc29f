// Shared by `kapitsa run` and `kapitsa chat`: finding the model folder (default: the bundled demo
// model), loading it into an Engine with its tokenizer and chat template, sampler options (defaults
// from the model's generation_config.json), and printing a streamed reply with reasoning set apart.
// Not a server concern: nothing here speaks HTTP or JSON APIs.
#pragma once

#include "base/status.h"
#include "runtime/engine.h"
#include "text/chat/chat_prompt.h"
#include "text/parse/output_parser.h"
#include "text/tokenizer/tokenizer.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::cli {

// `option` when given: a model folder, a .gguf file, or a catalog alias / Hub id found in the Hugging Face
// cache (cli/catalog/catalog.h resolve_model); otherwise models/demo/target under $KAPITSA_HOME, or under the repository the
// executable was built in (…/build/<dir>/kapitsa), or under the current directory.
// pull: an alias or Hub id not in the cache is downloaded first (kapitsa pull, progress on stderr).
Expected<std::string> resolve_model_dir(const std::string& option, bool pull = false);

// The model id `kapitsa serve` answers to by default (the launchers look for it): the folder name, or the
// parent's name for the bundled demo's target/ and draft/ folders ("demo", not "target").
std::string served_model_id(const std::string& model_dir);

// A JSON file holding a non-empty array of token ids (run --prompt-ids, logits --ids), each in [0, 2^31).
Expected<std::vector<int32_t>> read_token_ids(const std::string& path);

struct LoadedModel {
  std::string dir;
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::optional<text::ChatTemplate> chat_template;  // absent when the model ships none
  runtime::SamplingParams default_sampling;         // from generation_config.json
  std::unique_ptr<runtime::Engine> engine;
};
// device: where the model runs (cli/device_option.h: already selected).
Expected<LoadedModel> load_for_generation(const std::string& dir, const runtime::EngineOptions& options,
                                          Device device = Device::cpu);

// Sampler flags; a flag left unset keeps the model's default.
struct SamplingFlags {
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  void add_to(CLI::App* cmd);
  runtime::SamplingParams apply(runtime::SamplingParams base) const;
};

// Speculative decoding flags (runtime/proposer.h): --spec none|ngram|draft|auto, --spec-k N, --draft DIR.
// auto: the draft model when --draft is given, else n-gram lookup.
struct SpecFlags {
  std::string spec = "none";
  int spec_k = 4;
  std::string draft;  // --draft DIR
  void add_to(CLI::App* cmd);
  // Checks the flags and sets options.spec_tokens, and options.proposer for n-gram; an error names a
  // bad value. Loads nothing.
  Status apply(runtime::EngineOptions& options) const;
  // With a draft model chosen: loads it (checking its tokenizer against the model in target_dir) into
  // options.proposer, sized by the other options, on `device` (the model's). Call after apply, once the
  // model folder and device are known.
  Status load_draft(const std::string& target_dir, runtime::EngineOptions& options, Device device) const;
  bool uses_draft() const { return spec == "draft" || (spec == "auto" && !draft.empty()); }
};

// Prints reply text as it streams: content plain, reasoning dim (when the terminal shows colour),
// tool calls as one line each. `parser` says which reasoning and tool-call markup to look for (from the
// model's template: text::ChatPrompt); ParserOptions{} shows the text as it comes.
class ReplyPrinter {
 public:
  ReplyPrinter(text::ParserOptions parser, bool colour);
  void feed(const std::string& text);
  void finish();
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }

 private:
  void print(const text::ParseEvents& events);
  text::OutputParser parser_;
  bool colour_;
  bool in_reasoning_ = false;
  std::string content_, reasoning_;
};

// The reply parser for the terminal: the template's reasoning and tool-call formats. No tools are
// offered by run/chat, but a tool call the model writes anyway is shown as one, in its template's syntax.
text::ParserOptions terminal_parser(const text::ChatPrompt& prompt);

// One line of numbers after a reply, on stderr; `proposer` names the speculative proposer (its guesses
// and how many were accepted are shown when it made any).
void print_stats(const runtime::FinishEvent& finish, bool colour, std::string_view proposer = {});

// Whether stdout/stderr are terminals (for colour).
bool stdout_is_terminal();

}  // namespace kapitsa::cli
