// render_chat_prompt (see chat_prompt.h).
#include "text/chat/chat_prompt.h"

#include "text/chat/next_turn.h"

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

// What add_generation_prompt appends (e.g. "<|im_start|>assistant\n<think>\n"), from a one-message
// conversation rendered both ways with the same variables; "" when the two do not differ by a suffix.
std::string generation_prompt_text(const ChatTemplate& chat_template, const OrderedJson& kwargs) {
  ChatRequest r;
  r.messages = OrderedJson::array({{{"role", "user"}, {"content", "Hi"}}});
  r.kwargs = kwargs;
  auto with = chat_template.render(r);
  r.add_generation_prompt = false;
  auto without = chat_template.render(r);
  if (!with.ok() || !without.ok() || !with->starts_with(*without)) return {};
  return with->substr(without->size());
}

}  // namespace

GrammarStart ChatPrompt::grammar_start() const {
  GrammarStart start;
  start.in_reasoning = parser.starts_in_reasoning;
  start.may_open_reasoning = parser.reasoning && !parser.starts_in_reasoning && !closes_reasoning(text);
  return start;
}

Expected<ChatPrompt> render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                        ChatRequest request, PromptEncoder* encoder) {
  ChatPrompt p;
  request.add_generation_prompt = true;
  // The one render of the whole conversation; everything else below renders a one-turn conversation.
  KAPITSA_TRY(p.text, chat_template.render(request));
  std::vector<Tokenizer::Split> splits;
  if (encoder != nullptr) {
    PromptEncoder::Encoded e = encoder->encode(p.text);
    p.ids = std::move(e.ids);
    splits = std::move(e.splits);
  } else {
    p.ids = tokenizer.encode(p.text, {}, &splits);
  }

  // The conversation without the generation prompt: where the prefix cache should keep a snapshot.
  // The generation prompt does not depend on the conversation, only on the variables; where it starts
  // with an added token (a split), the history's ids are the ids before it.
  const std::string generation = generation_prompt_text(chat_template, request.kwargs);
  if (!generation.empty() && p.text.ends_with(generation)) {
    const size_t at = p.text.size() - generation.size();
    auto split = std::find_if(splits.begin(), splits.end(), [&](const Tokenizer::Split& s) { return s.start == at; });
    if (split != splits.end()) {
      p.turn_boundary = split->index;
    } else {
      const std::vector<int32_t> ids = tokenizer.encode(std::string_view(p.text).substr(0, at));
      if (ids.size() <= p.ids.size() && std::equal(ids.begin(), ids.end(), p.ids.begin())) p.turn_boundary = ids.size();
    }
  }
  // What the template writes after the reply's content (e.g. "<|im_end|>\n").
  if (std::string end = end_of_turn_text(chat_template, request.kwargs); !end.empty())
    p.end_of_turn_ids = tokenizer.encode(end);

  p.format = chat_template.format();
  p.parser.reasoning = p.format.reasoning;
  p.parser.starts_in_reasoning = p.format.reasoning && prompt_opens_reasoning(p.text);
  if (!request.tools.is_null()) {
    p.parser.tools = p.format.tools;
    p.parser.tool_schemas = Json(request.tools);
  }
  p.request = std::move(request);
  return p;
}

}  // namespace kapitsa::text
