// `kapitsa run [--model M] "prompt"`: one generation streamed to the terminal. The prompt goes through
// the model's chat template (one user message) unless --no-template; --prompt-ids FILE takes token ids
// instead of text, and --output json prints the generated ids as a JSON array (for scripts and tests).
// Numbers (tokens/s, time to first token) go to stderr so stdout holds only the reply.
#include "base/json.h"
#include "cli/commands.h"
#include "cli/generate_common.h"
#include "cli/device_option.h"
#include "cli/kv_dtype_option.h"

#include <cstdio>
#include <unistd.h>

namespace kapitsa::cli {
namespace {

struct RunOptions {
  std::string model;
  bool pull = false;  // --pull: download an alias / Hub id that is not cached
  std::string prompt;
  std::string prompt_ids;
  std::string system;
  std::string output = "text";
  int max_tokens = 256;
  int64_t context = 32768;
  bool no_template = false;
  bool no_think = false;
  bool ignore_eos = false;
  bool quiet = false;
  std::string kv_dtype = "bf16";
  std::string device;  // --device; empty: cuda when usable
  std::vector<std::string> stop;
  SamplingFlags sampling;
  SpecFlags spec;
};

Status run(const RunOptions& o) {
  if (o.output != "text" && o.output != "json") return error("--output must be 'text' or 'json', got '{}'", o.output);
  if (o.prompt.empty() == o.prompt_ids.empty()) return error("give a prompt, or --prompt-ids FILE (not both)");
  if (o.max_tokens < 1) return error("--max-tokens must be at least 1, got {}", o.max_tokens);
  KAPITSA_TRY(std::string dir, resolve_model_dir(o.model, o.pull));
  runtime::EngineOptions options;
  options.context_tokens = o.context;
  options.max_sequences = 1;
  options.prefix_cache_bytes = 0;  // one generation: nothing to reuse
  options.kv_dtype = kv_dtype_from_name(o.kv_dtype);
  KAPITSA_RETURN_IF_ERROR(o.spec.apply(options));
  KAPITSA_TRY(const Device device, choose_device(o.device));
  KAPITSA_RETURN_IF_ERROR(o.spec.load_draft(dir, options, device));
  KAPITSA_TRY(LoadedModel loaded, load_for_generation(dir, options, device));

  runtime::GenerateRequest request;
  text::ParserOptions parser;  // no template: the text as it comes
  if (!o.prompt_ids.empty()) {
    KAPITSA_TRY(request.prompt_ids, read_token_ids(o.prompt_ids));
  } else if (o.no_template || !loaded.chat_template) {
    request.prompt_ids = loaded.tokenizer->encode(o.prompt, text::EncodeOptions{true, true});
  } else {
    text::ChatRequest chat;
    if (!o.system.empty()) chat.messages.push_back({{"role", "system"}, {"content", o.system}});
    chat.messages.push_back({{"role", "user"}, {"content", o.prompt}});
    if (o.no_think) chat.kwargs["enable_thinking"] = false;
    KAPITSA_TRY(text::ChatPrompt prompt, text::render_chat_prompt(*loaded.chat_template, *loaded.tokenizer, chat));
    request.prompt_ids = std::move(prompt.ids);  // one reply: no turn boundary, nothing to fold after it
    parser = terminal_parser(prompt);
  }
  request.max_tokens = o.max_tokens;
  request.sampling = o.sampling.apply(loaded.default_sampling);
  request.stop_strings = o.stop;
  request.ignore_eos = o.ignore_eos;
  KAPITSA_TRY(auto generation, loaded.engine->submit(std::move(request)));

  const bool json = o.output == "json", colour = stdout_is_terminal();
  ReplyPrinter printer(std::move(parser), colour);
  std::vector<int32_t> ids;
  runtime::FinishEvent finish;
  runtime::Event event;
  while (generation->next(event)) {
    if (auto* t = std::get_if<runtime::TokenEvent>(&event)) {
      ids.push_back(t->id);
      if (!json) printer.feed(t->text);
    } else {
      finish = std::get<runtime::FinishEvent>(event);
    }
  }
  if (json) {
    std::fputs(Json(ids).dump().c_str(), stdout);
    std::fputs("\n", stdout);
  } else {
    printer.finish();
  }
  if (!o.quiet) print_stats(finish, isatty(2) != 0, loaded.engine->counters().proposer);
  if (finish.reason == runtime::FinishReason::error) return error("generation failed: {}", finish.error);
  return ok_status();
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate a reply to one prompt, streamed to the terminal");
  cmd->add_option("prompt", o->prompt, "The prompt (rendered with the model's chat template unless --no-template)");
  cmd->add_option("--model", o->model, "Model folder, .gguf, catalog alias or org/name[:quant] (default: the bundled demo model)");
  cmd->add_flag("--pull", o->pull, "Download --model first when it is an alias or Hub id not in the cache");
  cmd->add_option("--prompt-ids", o->prompt_ids, "JSON file with the prompt as an array of token ids (no template)");
  cmd->add_option("--output", o->output, "text (default) or json: the generated token ids as a JSON array");
  cmd->add_option("--max-tokens", o->max_tokens, "Most tokens to generate (default 256)");
  cmd->add_option("--ctx", o->context, "Context size in tokens (default 32768, at most the model's)");
  cmd->add_option("--system", o->system, "A system message (with the chat template)");
  // One text per --stop: without allow_extra_args(false) the prompt after `--stop X` was taken as a
  // second stop text.
  cmd->add_option("--stop", o->stop, "Stop when this text appears (repeatable); it is not printed")
      ->allow_extra_args(false);
  cmd->add_flag("--no-template", o->no_template, "Raw completion: encode the prompt as is");
  cmd->add_flag("--no-think", o->no_think, "Ask the template to skip reasoning (enable_thinking=false)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep going past end-of-sequence tokens");
  cmd->add_flag("--quiet", o->quiet, "No statistics line on stderr");
  add_kv_dtype_option(cmd, o->kv_dtype);
  add_device_option(cmd, o->device);
  o->sampling.add_to(cmd);
  o->spec.add_to(cmd);
  cmd->callback([o] {
    Status status = run(*o);
    if (!status.ok()) {
      std::fprintf(stderr, "kapitsa run: %s\n", status.error().message.c_str());
      exit_code() = 1;
    }
  });
}

}  // namespace kapitsa::cli
