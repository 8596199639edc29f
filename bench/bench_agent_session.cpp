// A recorded coding-agent session replayed through the server (issue 17 part 5; whole process, not
// Google Benchmark): every request of tests/fixtures/agents/AGENT.jsonl goes through the Service as the
// agent sent it (session headers, its echo of each reply), each reply forced to the recorded one
// (tests/server/agent_session.h), on a random checkpoint of a real shape (default Qwen3.5-0.8B; its
// vocabulary cut to the demo tokenizer's 16384 ids, which the recorded prompts and the grammars of the
// forced replies use; --layers keeps its widths and cuts its depth) with the demo model's tokenizer and
// the Qwen3.5 template, thinking off, as recorded. Per request it prints the prompt, the tokens the
// prefix cache served, those prefilled, the server's preparation time (request in → engine submission)
// and the time to first token: warm (this engine, which served the earlier turns and preloaded each
// reply) vs cold (a second engine without a prefix cache, the same prompt ids, run after the whole
// warm pass so that nothing runs beside it). Between requests it waits for the engine to finish folding
// the reply, as a user reading would (EngineCounters::end_of_turn_pending at 0); "to fold" shows what
// was still left to fold when a request came (0 unless --no-fold-wait: its time is then in the TTFT).
//   build/release/bench/bench_agent_session --session tests/fixtures/agents/pi.jsonl
//   [--config bench/configs/qwen35-0.8b.json | --model DIR] [--layers N] [--shrink] [--device cpu|cuda|cuda:N]
//   [--no-fold-wait]
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
#include <tuple>

using namespace kapitsa;
namespace replay = kapitsa::server::replay;

namespace {

std::string source_dir() { return KAPITSA_SOURCE_DIR; }

template <typename T>
T or_exit(Expected<T> e, const char* what) {
  if (!e.ok()) {
    fmt::print(stderr, "bench_agent_session: {}: {}\n", what, e.error().message);
    std::exit(1);
  }
  return std::move(e).value();
}

// Waits until the engine has nothing running, queued or left to fold (end_of_turn_pending: set before
// a fold starts) and its counters have not moved for `still` (the preload a reply's end queues reaches
// the engine within it); at most 10 minutes in all. Without `folds` it does not look at what is left
// to fold (as before 2026-12-02: the counters still for as long as the reply took to decode, which a
// fold on a busy machine can outlast — the next request then waits for the rest of it).
void wait_idle(const runtime::Engine& engine, std::chrono::milliseconds still, bool folds) {
  using Clock = std::chrono::steady_clock;
  auto key = [folds](const runtime::EngineCounters& c) {
    return std::tuple(c.running, c.queued, c.end_of_turn_tokens, c.snapshots, folds ? c.end_of_turn_pending : 0);
  };
  auto last = key(engine.counters());
  auto since = Clock::now();
  for (const auto deadline = since + std::chrono::minutes(10); Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto now = key(engine.counters());
    if (now != last) {
      last = now;
      since = Clock::now();
    } else if (std::get<0>(now) == 0 && std::get<1>(now) == 0 && std::get<4>(now) == 0 && Clock::now() - since >= still) {
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa: a recorded agent session replayed through the server, per turn cold vs warm"};
  std::string session_path = source_dir() + "/tests/fixtures/agents/claude.jsonl";
  std::string config = source_dir() + "/bench/configs/qwen35-0.8b.json", model_dir, device_name = "cpu";
  std::string root = source_dir();
  uint64_t seed = 1;
  int layers = 0;
  bool shrink = false;
  bool no_fold_wait = false;
  app.add_option("--root", root, "The source tree (the demo tokenizer, the Qwen3.5 template); default: where this was built from");
  app.add_option("--session", session_path, "A recorded session (tests/fixtures/agents/AGENT.jsonl)");
  app.add_option("--config", config, "config.json of a random checkpoint (written once, cached in /tmp)");
  app.add_option("--model", model_dir, "Existing model folder (instead of --config); its tokenizer is not used");
  app.add_option("--device", device_name, "cpu (default), cuda or cuda:N");
  app.add_option("--seed", seed, "Seed of the random checkpoint");
  app.add_option("--layers", layers, "Layers of the random checkpoint (its widths kept; a multiple of full_attention_interval); default: the config's");
  app.add_flag("--shrink", shrink, "Replay the session shrunk as the replay test does (only the called tools, long strings cut)");
  app.add_flag("--no-fold-wait", no_fold_wait,
               "Between requests, wait only until the counters are still for as long as the reply took to decode (the "
               "earlier rule), not for the folds to end: a request may then wait for the rest of a fold");
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
    std::string name = std::filesystem::path(config).stem().string() + "-demo-vocab";
    if (layers > 0) {
      text_config["num_hidden_layers"] = layers;
      name += "-" + std::to_string(layers) + "-layers";
    }
    model_dir = (std::filesystem::temp_directory_path() / "kapitsa-bench" / name).string();
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
  std::vector<replay::Recorded> session = replay::load_session(session_path);
  if (shrink) replay::shrink_session(session);
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
  server::TransportOptions to;
  to.log_requests = false;
  server::HttpServer transport(service, to);

  fmt::print("session {} ({} requests{}), model {} on {}\n", session_path, session.size(), shrink ? ", shrunk" : "", model_dir,
             ops::device_name(spec));
  std::vector<replay::Turn> turns;
  for (size_t i = 0; i < session.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    replay::Turn t = replay::replay_request(transport, *warm, session[i]);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t.response.status != 200) {
      fmt::print(stderr, "bench_agent_session: request {} answered {}: {}\n", i, t.response.status, t.response.body.substr(0, 300));
      return 1;
    }
    const double decode_s = std::max(0.0, wall_s - t.prepare_s - t.ttft_s);
    if (no_fold_wait)
      wait_idle(*warm, std::max(std::chrono::milliseconds(500), std::chrono::milliseconds(static_cast<int64_t>(1e3 * decode_s))), false);
    else
      wait_idle(*warm, std::chrono::milliseconds(500), true);
    fmt::print(stderr, "request {}: {} prompt tokens, {:.1f} s\n", i, t.prompt, wall_s);
    turns.push_back(std::move(t));
  }
  wait_idle(*warm, std::chrono::milliseconds(2000), true);
  fmt::print("{:>3} {:>5} {:>7} {:>7} {:>9} {:>8} {:>11} {:>13} {:>13} {:>6}\n", "#", "kind", "prompt", "cached", "prefilled",
             "to fold", "prepare ms", "TTFT warm ms", "TTFT cold ms", "warm%");
  double worst = 0;  // the largest warm/cold ratio of a main-conversation request from the second on
  int main_turns = 0;
  for (size_t i = 0; i < session.size(); ++i) {
    const replay::Turn& t = turns[i];
    auto g = or_exit(cold->submit(cli::bench::greedy(t.ids, 1)), "cold submit");
    const double cold_ttft = cli::bench::read_all(*g).finish.stats.time_to_first_token_s;
    const double ratio = cold_ttft > 0 ? t.ttft_s / cold_ttft : 0.0;
    const bool main_turn = replay::offers_tools(session[i]);
    if (main_turn && ++main_turns >= 2) worst = std::max(worst, ratio);
    fmt::print("{:>3} {:>5} {:>7} {:>7} {:>9} {:>8} {:>11.2f} {:>13.1f} {:>13.1f} {:>5.1f}%\n", i, main_turn ? "main" : "side",
               t.prompt, t.reused, t.prefilled, t.pending_fold, 1e3 * t.prepare_s, 1e3 * t.ttft_s, 1e3 * cold_ttft, 100 * ratio);
    std::fflush(stdout);
  }
  fmt::print("aim (from turn 2 on, warm time to first token <= 10% of a cold prefill): worst {:.1f}% — {}\n", 100 * worst,
             worst <= 0.10 ? "met" : "NOT met");
  return 0;
}
