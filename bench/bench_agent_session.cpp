// A recorded coding-agent session replayed through the server (issue 17 part 5; whole process, not
// Google Benchmark): every request of tests/fixtures/agents/AGENT.jsonl goes through the Service as the
// agent sent it (session headers, its echo of each reply), each reply forced to the recorded one
// (tests/server/agent_session.h), on a random checkpoint of a real shape (default Qwen3.5-0.8B; its
// vocabulary cut to the demo tokenizer's 16384 ids, which the recorded prompts and the grammars of the
// forced replies use) with the demo model's tokenizer and the Qwen3.5 template, thinking off, as recorded. Per request it prints the
// prompt, the tokens the prefix cache served, those prefilled, the server's preparation time (request
// in → engine submission) and the time to first token: warm (this engine, which served the earlier
// turns and preloaded each reply) vs cold (a second engine without a prefix cache, the same prompt ids).
// Between requests it waits for the engine to finish folding the reply, as an agent running a tool or a
// user reading would.
//   build/release/bench/bench_agent_session --session tests/fixtures/agents/claude.jsonl
//   [--config bench/configs/qwen35-0.8b.json | --model DIR] [--device cpu|cuda|cuda:N]
#include "../tests/server/agent_session.h"
#include "cli/bench/timeline.h"  // greedy, read_all
#include "models/model.h"
#include "ops/memory.h"
#include "server/service.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <thread>

using namespace kapitsa;
namespace replay = kapitsa::server::replay;

namespace {

std::string source_dir() { return std::filesystem::path(__FILE__).parent_path().parent_path().string(); }

template <typename T>
T or_exit(Expected<T> e, const char* what) {
  if (!e.ok()) {
    fmt::print(stderr, "bench_agent_session: {}: {}\n", what, e.error().message);
    std::exit(1);
  }
  return std::move(e).value();
}

// Waits until the engine has nothing running or queued and has stopped folding (the preload).
void wait_idle(const runtime::Engine& engine) {
  int64_t folded = -1;
  for (int i = 0; i < 6000; ++i) {
    const runtime::EngineCounters c = engine.counters();
    if (c.running == 0 && c.queued == 0 && c.end_of_turn_tokens == folded) return;
    folded = c.end_of_turn_tokens;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa: a recorded agent session replayed through the server, per turn cold vs warm"};
  std::string session_path = source_dir() + "/tests/fixtures/agents/claude.jsonl";
  std::string config = source_dir() + "/bench/configs/qwen35-0.8b.json", model_dir, device_name = "cpu";
  std::string root = source_dir();
  uint64_t seed = 1;
  app.add_option("--root", root, "The source tree (the demo tokenizer, the Qwen3.5 template); default: where this was built from");
  app.add_option("--session", session_path, "A recorded session (tests/fixtures/agents/AGENT.jsonl)");
  app.add_option("--config", config, "config.json of a random checkpoint (written once, cached in /tmp)");
  app.add_option("--model", model_dir, "Existing model folder (instead of --config); its tokenizer is not used");
  app.add_option("--device", device_name, "cpu (default), cuda or cuda:N");
  app.add_option("--seed", seed, "Seed of the random checkpoint");
  CLI11_PARSE(app, argc, argv);
  auto spec = or_exit(ops::parse_device(device_name), "--device");
  if (Status s = ops::select_device(spec); !s.ok()) {
    fmt::print(stderr, "bench_agent_session: {}\n", s.error().message);
    return 2;
  }
  auto tokenizer = std::make_shared<const text::Tokenizer>(or_exit(text::Tokenizer::load(root + "/models/demo/target"), "tokenizer"));
  if (model_dir.empty()) {
    // The shape of --config with the demo tokenizer's vocabulary and end-of-text id: the recorded text
    // is in that tokenizer's ids, and the forced replies' grammar needs the model to share them.
    std::ifstream in(config);
    nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (c.is_discarded()) {
      fmt::print(stderr, "bench_agent_session: cannot read {}\n", config);
      return 1;
    }
    nlohmann::json& text_config = c.contains("text_config") ? c["text_config"] : c;
    text_config["vocab_size"] = 16384;
    text_config["eos_token_id"] = 16353;
    model_dir = (std::filesystem::temp_directory_path() / "kapitsa-bench" /
                 (std::filesystem::path(config).stem().string() + "-demo-vocab")).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
      std::filesystem::create_directories(model_dir);
      const std::string written = model_dir + "/source-config.json";
      std::ofstream(written) << c.dump(2);
      fmt::print(stderr, "writing a random checkpoint for {} (demo vocabulary) to {}\n", config, model_dir);
      if (Status s = models::write_random_checkpoint(written, model_dir, seed); !s.ok()) {
        fmt::print(stderr, "bench_agent_session: {}\n", s.error().message);
        return 1;
      }
    }
  }
  const std::vector<replay::Recorded> session = replay::load_session(session_path);
  auto chat_template = std::make_shared<const text::ChatTemplate>(
      or_exit(text::ChatTemplate::from_file(root + "/tests/text/data/templates/qwen3.5.jinja"), "template"));
  models::LoadOptions load;
  load.device = spec.device;
  runtime::EngineOptions o;
  o.context_tokens = 65536;
  o.max_sequences = 2;
  auto warm = std::make_shared<replay::Replayer>(
      or_exit(runtime::Engine::create(or_exit(models::load_model(model_dir, load), "model"), tokenizer, o), "engine"));
  o.prefix_cache_bytes = 0;
  auto cold = or_exit(runtime::Engine::create(or_exit(models::load_model(model_dir, load), "model"), tokenizer, o), "engine");

  server::ServiceOptions so;
  so.accept_any_model = true;
  so.template_kwargs = {{"enable_thinking", false}};
  server::Service service(so);
  service.set_model(warm, chat_template);
  server::HttpServer transport(service, server::TransportOptions{.log_requests = false});

  fmt::print("session {} ({} requests), model {} on {}\n", session_path, session.size(), model_dir, ops::device_name(spec));
  fmt::print("{:>3} {:>5} {:>7} {:>7} {:>9} {:>11} {:>13} {:>13} {:>6}\n", "#", "kind", "prompt", "cached", "prefilled",
             "prepare ms", "TTFT warm ms", "TTFT cold ms", "warm%");
  for (size_t i = 0; i < session.size(); ++i) {
    const replay::Turn t = replay::replay_request(transport, *warm, session[i]);
    if (t.response.status != 200) {
      fmt::print(stderr, "bench_agent_session: request {} answered {}: {}\n", i, t.response.status, t.response.body.substr(0, 300));
      return 1;
    }
    wait_idle(*warm);
    auto g = or_exit(cold->submit(cli::bench::greedy(t.ids, 1)), "cold submit");
    const double cold_ttft = cli::bench::read_all(*g).finish.stats.time_to_first_token_s;
    fmt::print("{:>3} {:>5} {:>7} {:>7} {:>9} {:>11.2f} {:>13.1f} {:>13.1f} {:>5.1f}%\n", i,
               replay::offers_tools(session[i]) ? "main" : "side", t.prompt, t.reused, t.prefilled, 1e3 * t.prepare_s,
               1e3 * t.ttft_s, 1e3 * cold_ttft, cold_ttft > 0 ? 100 * t.ttft_s / cold_ttft : 0.0);
  }
  return 0;
}
