// render_chat_prompt (see chat_prompt.h).
#include "text/chat/chat_prompt.h"

#include <algorithm>

namespace kapitsa::text {
namespace {

// The prompt ends with an already closed, empty reasoning block (thinking turned off, as Qwen3.5's
// "<think>\n\n</think>\n\n"): the model must not open another one.
bool closes_reasoning(std::string_view prompt) {
  constexpr std::string_view kClose = "</think>";
  const size_t close = prompt.rfind(kClose);
  return close != std::string_view::npos &&
         prompt.find_first_not_of(" \t\r\n", close + kClose.size()) == std::string_view::npos;
}

}  // namespace

GrammarStart ChatPrompt::grammar_start() const {
  GrammarStart start;
  start.in_reasoning = parser.starts_in_reasoning;
  start.may_open_reasoning = parser.reasoning && !parser.starts_in_reasoning && !closes_reasoning(text);
  return start;
}

Expected<ChatPrompt> render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                        ChatRequest request) {
  ChatPrompt p;
  request.add_generation_prompt = true;
  KAPITSA_TRY(p.text, chat_template.render(request));
  p.ids = tokenizer.encode(p.text);

  // The conversation without the generation prompt: where the prefix cache should keep a snapshot.
  request.add_generation_prompt = false;
  if (auto history = chat_template.render(request); history.ok() && p.text.starts_with(*history)) {
    const std::vector<int32_t> ids = tokenizer.encode(*history);
    if (ids.size() <= p.ids.size() && std::equal(ids.begin(), ids.end(), p.ids.begin())) p.turn_boundary = ids.size();
  }
  // What the template writes after the reply's content (e.g. "<|im_end|>\n"): the engine folds it
  // after the reply, so the next turn resumes past it.
  static const std::string marker = "KAPITSA_REPLY_END_MARKER";
  request.messages.push_back({{"role", "assistant"}, {"content", marker}});
  if (auto closed = chat_template.render(request); closed.ok())
    if (const size_t at = closed->rfind(marker); at != std::string::npos)
      p.end_of_turn_ids = tokenizer.encode(closed->substr(at + marker.size()));

  p.format = chat_template.format();
  p.parser.reasoning = p.format.reasoning;
  p.parser.starts_in_reasoning = p.format.reasoning && prompt_opens_reasoning(p.text);
  if (!request.tools.is_null()) {
    p.parser.tools = p.format.tools;
    p.parser.tool_schemas = Json(request.tools);
  }
  return p;
}

}  // namespace kapitsa::text
