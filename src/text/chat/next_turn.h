// The history a conversation's next request will start with, once a reply is in: the conversation
// with the reply appended as an assistant message, rendered as the template renders it when another
// message follows (Qwen3.5 and Nemotron 3 drop an earlier reply's reasoning once a user message
// follows, keep it when tool results follow; tool calls in their history form), cut at the end of the
// reply's turn. The engine folds it while the user reads (runtime::Engine::preload), so the next
// request prefills only its new messages. Used by the server and `kapitsa chat` alike.
#pragma once

#include "base/status.h"
#include "text/chat/chat_template.h"
#include "text/chat/messages.h"

#include <string>

namespace kapitsa::text {

// `request`: the conversation as it was rendered for the reply (messages, tools, kwargs).
// `reply`: the reply as the client will send it back, in the shape templates read
// ({role: assistant, content, reasoning_content?, tool_calls?: [{id, type, function: {name,
// arguments (object)}}]}). When it calls tools, a tool message follows it in the render, else a
// user message. Errors: the template's, or a template whose turns do not end with the text it
// writes after a reply (then there is nothing safe to preload).
Expected<std::string> render_next_turn_history(const ChatTemplate& chat_template, ChatRequest request,
                                               const OrderedJson& reply);

// What the template writes after a reply's content (e.g. "<|im_end|>\n"), from a one-turn
// conversation rendered with `kwargs`; "" when it cannot tell.
std::string end_of_turn_text(const ChatTemplate& chat_template, const OrderedJson& kwargs);

}  // namespace kapitsa::text
