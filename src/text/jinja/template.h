// Template: the public face of the Jinja engine. Parse once, render many times; both return
// kapitsa::Error (message "name:line:col: what") instead of throwing, for any input whatsoever.
// Rendering uses Hugging Face's chat-template environment (see lexer.h and interpreter.h).
// A Template is immutable and may be rendered from several threads at once.
#pragma once

#include "base/status.h"
#include "text/jinja/limits.h"
#include "text/jinja/value.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text::jinja {

struct Stmt;

class Template {
 public:
  // `name` labels errors (a file name, or "chat_template").
  static Expected<Template> parse(std::string_view source, std::string name = "template");

  // Renders with the entries of `context` as variables.
  Expected<std::string> render(const Dict& context, const Limits& limits = {}) const;
  // Same, with a JSON object as the context (key order preserved).
  Expected<std::string> render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
  std::string name_;
};

}  // namespace kapitsa::text::jinja
