// ChatPrompt: one chat turn as the engine needs it — the rendered prompt and its token ids, the turn
// boundary (tokens of the history before the generation prompt: where the prefix cache keeps a
// snapshot), the end-of-turn ids (what the template writes after the reply, folded while the user
// reads) and how to parse the reply (reasoning and tool-call formats from the template). Built by
// render_chat_prompt for the server and for `kapitsa chat`/`run` alike: the same conversation gives
// both the same ids, boundary and end-of-turn ids.
// Not a request validator: context limits and API errors are the caller's.
#pragma once

#include "base/status.h"
#include "text/chat/chat_template.h"
#include "text/grammar/grammar.h"
#include "text/parse/output_parser.h"
#include "text/tokenizer/prompt_encoder.h"
#include "text/tokenizer/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::text {

struct ChatPrompt {
  std::string text;                      // rendered with the generation prompt
  std::vector<int32_t> ids;              // text, encoded
  std::optional<size_t> turn_boundary;   // ids of the history alone, when they are a prefix of `ids`
  std::vector<int32_t> end_of_turn_ids;  // what follows a reply's content (e.g. "<|im_end|>\n"); may be empty
  ChatFormat format;                     // the template's formats
  ChatRequest request;                   // what was rendered (with the generation prompt)
  // For the reply: reasoning as the template does it (starting inside <think> when the prompt opened
  // one); tool calls in the template's syntax when the request offers tools (their schemas type XML
  // arguments), none otherwise.
  ParserOptions parser;

  // Where a constrained reply starts: inside reasoning, before an optional reasoning block, or (the
  // prompt closed an empty one: thinking turned off) straight at the answer.
  GrammarStart grammar_start() const;
};

// Renders `request` (its add_generation_prompt is ignored: always on) once and derives the rest from
// one-turn renders with the same variables: the boundary where the generation prompt starts, the
// end-of-turn ids from a marker reply. `encoder` (optional): encodes the prompt reusing an earlier
// prompt of the conversation (prompt_encoder.h); the ids are the same either way. Errors are the
// template's (it may reject a conversation); an empty prompt is not an error here.
Expected<ChatPrompt> render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                        ChatRequest request, PromptEncoder* encoder = nullptr);

}  // namespace kapitsa::text
