// GET /metrics: Prometheus text exposition — requests by endpoint and status, prompt / cached /
// completion tokens, mean decode tokens/s, prefix-cache reuse, queue depth and running sequences
// (from the engine's counters), speculative decoding per proposer, open streams and client disconnects.
#include "server/api/api.h"
#include "server/api/common.h"

#include <fmt/format.h>

namespace kapitsa::server::api {

HttpResponse metrics(Service& service, const HttpRequest&) {
  auto& m = service.metrics();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP kapitsa_{0} {1}\n# TYPE kapitsa_{0} {2}\nkapitsa_{0} {3}\n", name, help, type, value);
  };
  out += "# HELP kapitsa_requests_total HTTP requests by endpoint and status.\n# TYPE kapitsa_requests_total counter\n";
  {
    std::lock_guard lock(m.mutex);
    for (const auto& [key, count] : m.requests) {
      const size_t space = key.rfind(' ');
      out += fmt::format("kapitsa_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.substr(0, space),
                         key.substr(space + 1), count);
    }
  }
  metric("prompt_tokens_total", "counter", "Prompt tokens of finished generations.", m.prompt_tokens.load());
  metric("prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.", m.cached_prompt_tokens.load());
  metric("completion_tokens_total", "counter", "Generated tokens.", m.completion_tokens.load());
  const double micros = m.decode_micros.load();
  metric("decode_tokens_per_second", "gauge", "Mean decode rate over finished generations.",
         micros > 0 ? 1e6 * m.decode_tokens.load() / micros : 0.0);
  metric("streams_active", "gauge", "Streamed responses in progress.", m.streams_active.load());
  metric("client_disconnects_total", "counter", "Streams ended by the client going away.", m.client_disconnects.load());
  metric("requests_rejected_overloaded_total", "counter", "Requests answered 429: the queue was full.",
         m.rejected_overloaded.load());
  metric("ready", "gauge", "1 once the model is loaded.", service.ready() ? 1 : 0);
  if (service.ready()) {
    const runtime::EngineCounters c = service.engine().counters();
    metric("engine_requests_total", "counter", "Generations submitted to the engine.", c.requests);
    metric("engine_prompt_tokens_total", "counter", "Prompt tokens seen by the engine.", c.prompt_tokens);
    metric("prefix_cache_reused_tokens_total", "counter", "Prompt tokens reused from the prefix cache.", c.prompt_tokens_reused);
    metric("prefill_tokens_total", "counter", "Prompt tokens computed.", c.prompt_tokens_prefilled);
    metric("prefix_cache_reuse_ratio", "gauge", "Reused / all prompt tokens.",
           c.prompt_tokens > 0 ? static_cast<double>(c.prompt_tokens_reused) / c.prompt_tokens : 0.0);
    if (!c.proposer.empty()) {
      // Speculative decoding, labelled by the proposer (ngram, draft).
      auto by_proposer = [&](const char* name, const char* type, const char* help, double value) {
        out += fmt::format("# HELP kapitsa_{0} {1}\n# TYPE kapitsa_{0} {2}\nkapitsa_{0}{{proposer=\"{3}\"}} {4}\n", name,
                           help, type, c.proposer, value);
      };
      by_proposer("draft_tokens_total", "counter", "Speculative decoding: tokens proposed.", c.draft_tokens);
      by_proposer("draft_tokens_accepted_total", "counter", "Speculative decoding: proposed tokens accepted.",
                  c.draft_tokens_accepted);
      by_proposer("draft_steps_total", "counter", "Speculative decoding: steps that verified a draft.", c.draft_steps);
      by_proposer("draft_accepted_per_step", "gauge", "Speculative decoding: mean accepted tokens per verifying step.",
                  c.draft_steps > 0 ? static_cast<double>(c.draft_tokens_accepted) / c.draft_steps : 0.0);
    }
    metric("snapshot_bytes", "gauge", "Bytes held by prefix-cache snapshots.", c.snapshot_bytes);
    metric("queue_depth", "gauge", "Requests waiting for a sequence slot.", c.queued);
    metric("sequences_running", "gauge", "Sequences being decoded.", c.running);
    metric("context_tokens", "gauge", "Context window per sequence.", service.context_tokens());
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = std::move(out);
  return r;
}

}  // namespace kapitsa::server::api
