// `kapitsa template (--template FILE.jinja | --model DIR) --conversation CONV.json`: renders a chat
// template for one conversation (the shape of an entry of conversations.json) and prints the
// prompt exactly, with no added newline. A template error prints its message and exits 1.
#include "cli/commands.h"
#include "text/chat/chat_template.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

namespace kapitsa::cli {
namespace {

struct TemplateOptions {
  std::string template_path;
  std::string model_dir;
  std::string conversation_path;
  bool flatten_text_parts = false;
};

int run_template(const TemplateOptions& o) {
  if (o.template_path.empty() == o.model_dir.empty()) {
    std::fprintf(stderr, "kapitsa template: give exactly one of --template FILE or --model DIR\n");
    return 2;
  }
  auto tmpl = o.template_path.empty() ? text::ChatTemplate::from_model_dir(o.model_dir)
                                      : text::ChatTemplate::from_file(o.template_path);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "kapitsa template: %s\n", tmpl.error().message.c_str());
    return 1;
  }
  std::ifstream in(o.conversation_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kapitsa template: %s: cannot open file\n", o.conversation_path.c_str());
    return 1;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  text::OrderedJson conversation = text::OrderedJson::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (conversation.is_discarded()) {
    std::fprintf(stderr, "kapitsa template: %s: not valid JSON\n", o.conversation_path.c_str());
    return 1;
  }
  auto request = text::chat_request_from_json(conversation, o.conversation_path);
  if (!request.ok()) {
    std::fprintf(stderr, "kapitsa template: %s\n", request.error().message.c_str());
    return 1;
  }
  text::ChatOptions options;
  options.flatten_text_parts = o.flatten_text_parts;
  auto prompt = tmpl->render(*request, options);
  if (!prompt.ok()) {
    std::fprintf(stderr, "kapitsa template: %s\n", prompt.error().message.c_str());
    return 1;
  }
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto options = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Render a model's chat template for a conversation");
  auto* t = cmd->add_option("--template", options->template_path, "Jinja chat template file");
  auto* m = cmd->add_option("--model", options->model_dir,
                            "Model folder (chat_template.jinja or tokenizer_config.json's chat_template)");
  t->excludes(m);
  cmd->add_option("--conversation", options->conversation_path,
                  "JSON file: {messages, tools?, add_generation_prompt?, kwargs?}")
      ->required();
  cmd->add_flag("--flatten-text-parts", options->flatten_text_parts,
                "Join text-only content part lists into one string before rendering");
  cmd->callback([options] { exit_code() = run_template(*options); });
}

}  // namespace kapitsa::cli
