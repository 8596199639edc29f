// A recorded agent session (tests/fixtures/agents/AGENT.jsonl, written by tests/agents/record_session.mjs)
// and what replaying it needs: the reply of each request as the demo model's raw text (Qwen3.5 template,
// thinking off), a grammar forcing exactly that text, and an Engine wrapper (a LoggingEngine: it notes
// each prompt and when the server submitted it) that applies the grammar of the request being replayed. Shared by
// agent_replay_test.cpp and bench/bench_agent_session.cpp.
#pragma once

#include "logging_engine.h"
#include "runtime/engine.h"
#include "server/transport.h"
#include "text/grammar/grammar.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kapitsa::server::replay {

using OJson = nlohmann::ordered_json;

// One recorded model call (a line of tests/fixtures/agents/AGENT.jsonl).
struct Recorded {
  std::string url;
  std::map<std::string, std::string> headers;  // those naming the session
  OJson body;
  OJson reply;  // {text, reasoning, toolCalls: [{name, arguments}], finish}
};

inline std::vector<Recorded> load_session(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (tests/fixtures/agents: the build unpacks it from its .xz)");
  std::vector<Recorded> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const OJson j = OJson::parse(line);
    Recorded r{j["url"], {}, j["body"], j["reply"]};
    for (auto it = j["session"].begin(); it != j["session"].end(); ++it) r.headers[it.key()] = it.value().get<std::string>();
    out.push_back(std::move(r));
  }
  return out;
}

// The text the demo model (Qwen3.5 template, thinking off) writes for a recorded reply: its content,
// then each call in the template's XML tool-call format (string arguments raw, others as JSON).
inline std::string raw_reply(const OJson& reply) {
  std::string s = reply["text"].get<std::string>();
  for (const OJson& call : reply["toolCalls"]) {
    if (!s.empty()) s += "\n\n";
    s += "<tool_call>\n<function=" + call["name"].get<std::string>() + ">\n";
    const OJson args = OJson::parse(call["arguments"].get<std::string>());
    for (auto it = args.begin(); it != args.end(); ++it)
      s += "<parameter=" + it.key() + ">\n" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump()) +
           "\n</parameter>\n";
    s += "</function>\n</tool_call>";
  }
  return s;
}

// GBNF for exactly `text`.
inline std::shared_ptr<const text::Grammar> exactly(const std::string& text) {
  std::string g = "root ::= \"";
  for (char c : text) {
    if (c == '\n') g += "\\n";
    else if (c == '"' || c == '\\') g += std::string("\\") + c;
    else g += c;
  }
  auto grammar = text::parse_gbnf(g + "\"");
  if (!grammar.ok()) throw std::runtime_error(grammar.error().message);
  return *grammar;
}

// The real engine (logging each prompt: logging_engine.h); each submitted request gets the grammar
// of the reply to replay (and a small budget), and the finish event's statistics are kept.
class Replayer : public testing::LoggingEngine {
 public:
  using LoggingEngine::LoggingEngine;
  Expected<std::unique_ptr<runtime::Generation>> submit(runtime::GenerateRequest request) override {
    {
      std::lock_guard lock(mu_);
      request.grammar = next_;
    }
    request.max_tokens = std::min(request.max_tokens, 256);
    {
      std::lock_guard lock(mu_);
      pending_at_submit_ = counters().end_of_turn_pending;
    }
    auto g = LoggingEngine::submit(std::move(request));
    if (!g.ok()) return g;
    return std::unique_ptr<runtime::Generation>(std::make_unique<Watched>(std::move(*g), this));
  }
  void expect(std::shared_ptr<const text::Grammar> g) {
    std::lock_guard lock(mu_);
    next_ = std::move(g);
  }
  // Tokens of earlier replies still to fold (or being folded) when the last request was submitted:
  // the request waits for them (end_of_turn.h), and its time to first token includes them.
  int64_t pending_at_submit() const {
    std::lock_guard lock(mu_);
    return pending_at_submit_;
  }
  // The last finished generation's statistics (time to first token: from its submission).
  runtime::GenerationStats last_stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  // Passes events through, keeping the finish event's statistics.
  class Watched : public runtime::Generation {
   public:
    Watched(std::unique_ptr<runtime::Generation> inner, Replayer* owner) : inner_(std::move(inner)), owner_(owner) {}
    bool next(runtime::Event& e) override { return note(inner_->next(e), e); }
    bool next_for(runtime::Event& e, std::chrono::milliseconds timeout, bool& timed_out) override {
      return note(inner_->next_for(e, timeout, timed_out), e);
    }
    void cancel() override { inner_->cancel(); }

   private:
    bool note(bool more, const runtime::Event& e) {
      if (const auto* f = std::get_if<runtime::FinishEvent>(&e); more && f) {
        std::lock_guard lock(owner_->mu_);
        owner_->stats_ = f->stats;
      }
      return more;
    }
    std::unique_ptr<runtime::Generation> inner_;
    Replayer* owner_;
  };

  std::shared_ptr<const text::Grammar> next_;
  runtime::GenerationStats stats_;
  int64_t pending_at_submit_ = 0;
};

// A smaller copy of a session for a test that must take seconds on the demo model (the agents' first
// prompts are 1.4k–22k tokens): the same deterministic cuts on every request, so what the agent kept
// or changed between turns stays kept or changed — only the tools the session calls are offered,
// descriptions are cut to 80 bytes and any other string over 800 bytes (system prompts, reminders) to
// its first 500 and last 200. Cuts fall on UTF-8 character boundaries.
inline void shrink_session(std::vector<Recorded>& session) {
  std::set<std::string> called;
  for (const Recorded& r : session)
    for (const OJson& c : r.reply["toolCalls"]) called.insert(c["name"].get<std::string>());
  auto boundary = [](const std::string& s, size_t i) {
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  auto cut = [&](auto& self, OJson& v, bool description) -> void {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) self(self, it.value(), it.key() == "description");
    } else if (v.is_array()) {
      for (OJson& x : v) self(self, x, description);
    } else if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (description && s.size() > 80) v = s.substr(0, boundary(s, 80));
      else if (s.size() > 800) v = s.substr(0, boundary(s, 500)) + "\n[...]\n" + s.substr(boundary(s, s.size() - 200));
    }
  };
  for (Recorded& r : session) {
    if (r.body.contains("tools") && r.body["tools"].is_array()) {
      OJson kept = OJson::array();
      for (const OJson& t : r.body["tools"]) {
        const OJson& name = t.contains("function") ? t["function"]["name"] : t.contains("name") ? t["name"] : OJson();
        if (name.is_string() && called.contains(name.get<std::string>())) kept.push_back(t);
      }
      r.body["tools"] = std::move(kept);
    }
    cut(cut, r.body, false);
  }
}

// A main-conversation request: one that offers the agent's tools (side requests — opencode's title,
// Claude Code's small calls — offer none).
inline bool offers_tools(const Recorded& rec) { return rec.body.contains("tools") && !rec.body["tools"].empty(); }

// One replayed request, measured.
struct Turn {
  HttpResponse response;
  int64_t prompt = 0, reused = 0, prefilled = 0;  // the engine's counters over the request
  double prepare_s = 0;  // from the request reaching the server to its submission to the engine
  double ttft_s = 0;     // the engine's time to first token (from submission)
  int64_t pending_fold = 0;  // tokens of earlier replies still to fold at submission (Replayer::pending_at_submit)
  std::vector<int32_t> ids;  // the prompt
};

// Sends `rec` as recorded (its session headers; not streamed) with its reply forced to the recorded one.
inline Turn replay_request(HttpServer& transport, Replayer& engine, const Recorded& rec) {
  engine.expect(exactly(raw_reply(rec.reply)));
  HttpRequest r;
  r.method = "POST";
  r.path = rec.url.substr(0, rec.url.find('?'));
  OJson body = rec.body;
  body["stream"] = false;  // the same prompt; one JSON answer
  r.body = body.dump();
  for (const auto& [k, v] : rec.headers) r.set_header(k, v);
  const runtime::EngineCounters before = engine.counters();
  const auto start = std::chrono::steady_clock::now();
  Turn t;
  t.response = transport.route(r);
  const runtime::EngineCounters after = engine.counters();
  t.prompt = after.prompt_tokens - before.prompt_tokens;
  t.reused = after.prompt_tokens_reused - before.prompt_tokens_reused;
  t.prefilled = after.prompt_tokens_prefilled - before.prompt_tokens_prefilled;
  t.prepare_s = std::chrono::duration<double>(engine.last_submit() - start).count();
  t.ttft_s = engine.last_stats().time_to_first_token_s;
  t.pending_fold = engine.pending_at_submit();
  t.ids = engine.last_prompt();
  return t;
}

}  // namespace kapitsa::server::replay
