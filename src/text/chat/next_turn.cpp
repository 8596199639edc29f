// render_next_turn_history (see next_turn.h).
#include "text/chat/next_turn.h"

namespace kapitsa::text {
namespace {

// Marker texts: never written by a model or a client in practice, found back in the render.
constexpr std::string_view kReplyMarker = "KAPITSA_REPLY_END_MARKER";
constexpr std::string_view kNextMarker = "KAPITSA_NEXT_MESSAGE_MARKER";

}  // namespace

std::string end_of_turn_text(const ChatTemplate& chat_template, const OrderedJson& kwargs) {
  ChatRequest r;
  r.messages = OrderedJson::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", kReplyMarker}}});
  r.add_generation_prompt = false;
  r.kwargs = kwargs;
  auto text = chat_template.render(r);
  if (!text.ok()) return {};
  const size_t at = text->rfind(kReplyMarker);
  return at == std::string::npos ? std::string() : text->substr(at + kReplyMarker.size());
}

Expected<std::string> render_next_turn_history(const ChatTemplate& chat_template, ChatRequest request,
                                               const OrderedJson& reply) {
  const std::string end = end_of_turn_text(chat_template, request.kwargs);
  if (end.empty()) return error("the chat template writes nothing recognisable after a reply: no end of turn to preload to");
  const auto calls = reply.find("tool_calls");
  const bool called = calls != reply.end() && calls->is_array() && !calls->empty();
  OrderedJson next = {{"role", called ? "tool" : "user"}, {"content", kNextMarker}};
  if (called) next["tool_call_id"] = (*calls)[0].value("id", "");
  request.messages.push_back(reply);
  request.messages.push_back(std::move(next));
  request.add_generation_prompt = false;
  KAPITSA_TRY(std::string text, chat_template.render(request));
  const size_t marker = text.rfind(kNextMarker);
  if (marker == std::string::npos) return error("the chat template dropped the message after the reply");
  // The reply's turn ends with the last end-of-turn text before the next message's content.
  const size_t at = text.rfind(end, marker);
  if (at == std::string::npos) return error("the chat template did not end the reply's turn with the text it writes after a reply");
  text.resize(at + end.size());
  return text;
}

}  // namespace kapitsa::text
