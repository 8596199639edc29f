// ChatTemplate: a model's chat template, rendered the way transformers' apply_chat_template does:
// variables messages, tools (None when absent), documents (None), add_generation_prompt, the
// tokenizer's special tokens (bos_token, eos_token, ...) and then the request's kwargs on top.
// Not a tokenizer: it returns text; the caller encodes it (special tokens are matched there).
#pragma once

#include "base/status.h"
#include "text/chat/chat_format.h"
#include "text/chat/messages.h"
#include "text/jinja/template.h"

#include <string>
#include <string_view>

namespace kapitsa::text {

class ChatTemplate {
 public:
  static Expected<ChatTemplate> from_source(std::string_view source, std::string name = "chat_template");
  static Expected<ChatTemplate> from_file(const std::string& path);
  // chat_template.jinja in `dir`, else tokenizer_config.json's `chat_template` (a string, or a list
  // of {name, template} where "default" wins). Special tokens come from tokenizer_config.json.
  static Expected<ChatTemplate> from_model_dir(const std::string& dir);

  Expected<std::string> render(const ChatRequest& request, const ChatOptions& options = {}) const;

  const std::string& source() const { return source_; }
  // The tool-call and reasoning formats the template teaches (from its source).
  const ChatFormat& format() const { return format_; }
  // Extra variables given to every render (before the request's kwargs), e.g. bos_token.
  void set_default_variables(OrderedJson variables) { defaults_ = std::move(variables); }

 private:
  ChatTemplate(jinja::Template t, std::string source)
      : template_(std::move(t)), source_(std::move(source)), format_(chat_format_of(source_)) {}

  jinja::Template template_;
  std::string source_;
  ChatFormat format_;
  OrderedJson defaults_ = OrderedJson::object();
};

}  // namespace kapitsa::text
