// `kapitsa chat [--model M]`: an interactive multi-turn conversation through the model's chat template.
// Each turn renders the whole conversation with text::render_chat_prompt (as the server does), which
// marks where the history ends (before the generation prompt) as a turn boundary, so the engine
// snapshots there. After each reply the conversation with the reply as history is rendered as the
// next turn will render it (text::render_next_turn_history: Qwen3.5 drops the reasoning of an earlier
// reply) and preloaded (Engine::preload), which the engine folds while the user types, so the next
// turn prefills only the new message. Replies are parsed in the template's own reasoning and
// tool-call formats. Reasoning is shown dim; a line of numbers (tokens/s, cached prompt tokens)
// follows each reply.
// Commands: /reset (forget the conversation), /exit or end of input.
#include "cli/commands.h"
#include "cli/generate_common.h"
#include "cli/device_option.h"
#include "cli/kv_dtype_option.h"
#include "text/chat/next_turn.h"

#include <cstdio>
#include <iostream>
#include <unistd.h>

namespace kapitsa::cli {
namespace {

struct ChatOptions {
  std::string model;
  bool pull = false;  // --pull: download an alias / Hub id that is not cached
  std::string system;
  int max_tokens = 2048;
  int64_t context = 32768;
  bool no_think = false;
  std::string kv_dtype = "bf16";
  std::string device;  // --device; empty: cuda when usable
  SamplingFlags sampling;
  SpecFlags spec;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

Status chat(const ChatOptions& o) {
  KAPITSA_TRY(std::string dir, resolve_model_dir(o.model, o.pull));
  runtime::EngineOptions options;
  options.context_tokens = o.context;
  options.max_sequences = 1;
  options.kv_dtype = kv_dtype_from_name(o.kv_dtype);
  KAPITSA_RETURN_IF_ERROR(o.spec.apply(options));
  KAPITSA_TRY(const Device device, choose_device(o.device));
  KAPITSA_RETURN_IF_ERROR(o.spec.load_draft(dir, options, device));
  KAPITSA_TRY(LoadedModel loaded, load_for_generation(dir, options, device));
  if (!loaded.chat_template) return error("{}: the model has no chat template (use `kapitsa run --no-template`)", dir);
  const bool colour = stdout_is_terminal(), interactive = isatty(0) != 0;
  std::fprintf(stderr, "kapitsa chat: %s (%s). /reset starts over, /exit quits.\n", dir.c_str(),
               loaded.engine->model_info().summary.c_str());

  // Each turn's prompt and preload reuse the ids of the last one: encoding grows with the new text only.
  text::PromptEncoder encoder(loaded.tokenizer);
  text::OrderedJson history = text::OrderedJson::array();
  if (!o.system.empty()) history.push_back({{"role", "system"}, {"content", o.system}});
  std::string line;
  for (;;) {
    if (interactive) std::fputs(colour ? "\x1b[1m> \x1b[0m" : "> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    line = trim(line);
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = text::OrderedJson::array();
      if (!o.system.empty()) history.push_back({{"role", "system"}, {"content", o.system}});
      continue;
    }
    history.push_back({{"role", "user"}, {"content", line}});
    text::ChatRequest request;
    request.messages = history;
    if (o.no_think) request.kwargs["enable_thinking"] = false;
    KAPITSA_TRY(text::ChatPrompt prompt, text::render_chat_prompt(*loaded.chat_template, *loaded.tokenizer, request, &encoder));

    runtime::GenerateRequest g;
    g.prompt_ids = prompt.ids;
    g.turn_boundary = prompt.turn_boundary;
    g.max_tokens = o.max_tokens;
    g.sampling = o.sampling.apply(loaded.default_sampling);
    g.cache_key = "chat";
    KAPITSA_TRY(auto generation, loaded.engine->submit(std::move(g)));

    ReplyPrinter printer(terminal_parser(prompt), colour);
    runtime::FinishEvent finish;
    runtime::Event event;
    while (generation->next(event)) {
      if (auto* t = std::get_if<runtime::TokenEvent>(&event)) printer.feed(t->text);
      else finish = std::get<runtime::FinishEvent>(event);
    }
    printer.finish();
    print_stats(finish, isatty(2) != 0, loaded.engine->counters().proposer);
    if (finish.reason == runtime::FinishReason::error) {
      history.erase(history.end() - 1);  // the turn never happened
      continue;
    }
    text::OrderedJson reply = {{"role", "assistant"}, {"content", printer.content()}};
    if (!printer.reasoning().empty()) reply["reasoning_content"] = printer.reasoning();
    if (finish.reason == runtime::FinishReason::stop || finish.reason == runtime::FinishReason::length) {
      // Only a head start: a template that cannot say where the reply's turn ends just goes without.
      if (auto next = text::render_next_turn_history(*loaded.chat_template, prompt.request, reply); next.ok())
        (void)loaded.engine->preload(encoder.encode(*next).ids, "chat");
    }
    history.push_back(std::move(reply));
  }
  return ok_status();
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive multi-turn chat with the model's chat template");
  cmd->add_option("--model", o->model, "Model folder, .gguf, catalog alias or org/name[:quant] (default: the bundled demo model)");
  cmd->add_flag("--pull", o->pull, "Download --model first when it is an alias or Hub id not in the cache");
  cmd->add_option("--system", o->system, "A system message");
  cmd->add_option("--max-tokens", o->max_tokens, "Most tokens per reply (default 2048)");
  cmd->add_option("--ctx", o->context, "Context size in tokens (default 32768, at most the model's)");
  cmd->add_flag("--no-think", o->no_think, "Ask the template to skip reasoning (enable_thinking=false)");
  add_kv_dtype_option(cmd, o->kv_dtype);
  add_device_option(cmd, o->device);
  o->sampling.add_to(cmd);
  o->spec.add_to(cmd);
  cmd->callback([o] {
    Status status = chat(*o);
    if (!status.ok()) {
      std::fprintf(stderr, "kapitsa chat: %s\n", status.error().message.c_str());
      exit_code() = 1;
    }
  });
}

}  // namespace kapitsa::cli
