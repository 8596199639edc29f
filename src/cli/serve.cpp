// `kapitsa serve [--model DIR] [--host H] [--port P] [--api-key K] ...`: the OpenAI (chat, completions,
// responses) and Anthropic (messages) HTTP server. Binds first and answers /health with 503 while the
// model loads in the background, then 200. SIGINT / SIGTERM: refuse new requests, end every running
// stream properly (finish events), then stop. Prints "listening on http://HOST:PORT" once bound
// (with --port 0 the port is chosen by the system), for scripts and tests to read.
#include "cli/commands.h"
#include "cli/generate_common.h"
#include "cli/device_option.h"
#include "cli/kv_dtype_option.h"
#include "server/transport.h"
#include "text/grammar/grammar.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kapitsa::cli {
namespace {

struct ServeOptions {
  std::string model;
  bool pull = false;  // --pull: download an alias / Hub id that is not cached
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  bool cors = false;
  std::vector<std::string> aliases;
  bool accept_any_model = false;
  int64_t context_tokens = 32768;
  int parallel = 16;
  double max_body_mb = 64;
  int threads = 128;
  double request_timeout_s = 30;
  int keepalive_ms = 5000;
  bool no_think = false;
  std::string template_kwargs;
  std::string grammar_file;
  std::string kv_dtype = "bf16";
  std::string device;  // --device; empty: cuda when usable
  SpecFlags spec;
  int64_t max_output_tokens = 32768;
  int max_queue = 256;
  std::string cache_dir;                         // "" → no disk prefix cache
  uint64_t cache_dir_bytes = uint64_t{10} << 30;
};

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }

int run_serve(const ServeOptions& o) {
  runtime::EngineOptions eo;
  if (Status s = o.spec.apply(eo); !s.ok()) {
    std::fprintf(stderr, "kapitsa serve: %s\n", s.error().message.c_str());
    return 2;
  }
  auto dir = resolve_model_dir(o.model, o.pull);
  if (!dir.ok()) {
    std::fprintf(stderr, "kapitsa serve: %s\n", dir.error().message.c_str());
    return 1;
  }
  const Expected<Device> device = choose_device(o.device);
  if (!device.ok()) {
    std::fprintf(stderr, "kapitsa serve: %s\n", device.error().message.c_str());
    return 1;
  }
  server::ServiceOptions so;
  so.model_ids = o.aliases.empty() ? std::vector<std::string>{served_model_id(*dir)} : o.aliases;
  so.accept_any_model = o.accept_any_model;
  so.keepalive = std::chrono::milliseconds(std::max(100, o.keepalive_ms));
  so.max_output_tokens = o.max_output_tokens;
  so.max_queued = o.max_queue;
  if (!o.template_kwargs.empty()) {
    so.template_kwargs = server::OJson::parse(o.template_kwargs, nullptr, false);
    if (!so.template_kwargs.is_object()) {
      std::fprintf(stderr, "kapitsa serve: --chat-template-kwargs must be a JSON object\n");
      return 2;
    }
  }
  if (o.no_think) so.template_kwargs["enable_thinking"] = false;
  if (!o.grammar_file.empty()) {
    std::ifstream in(o.grammar_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "kapitsa serve: cannot read --grammar-file %s\n", o.grammar_file.c_str());
      return 2;
    }
    std::stringstream source;
    source << in.rdbuf();
    auto grammar = text::parse_gbnf(source.str());
    if (!grammar.ok()) {
      std::fprintf(stderr, "kapitsa serve: --grammar-file %s: %s\n", o.grammar_file.c_str(), grammar.error().message.c_str());
      return 2;
    }
    so.default_grammar = *grammar;
  }
  server::Service service(so);

  server::TransportOptions to;
  to.host = o.host;
  to.port = o.port;
  to.api_key = o.api_key.empty() && std::getenv("KAPITSA_API_KEY") ? std::getenv("KAPITSA_API_KEY") : o.api_key;
  to.cors = o.cors;
  to.max_body_bytes = static_cast<size_t>(o.max_body_mb * 1024 * 1024);
  to.threads = o.threads;
  to.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
  if (to.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    std::fprintf(stderr,
                 "kapitsa serve: warning: binding %s without --api-key: anyone who can reach this address can use "
                 "the model\n",
                 o.host.c_str());
  server::HttpServer http(service, to);
  std::string bind_error;
  if (!http.bind(bind_error)) {
    std::fprintf(stderr, "kapitsa serve: %s\n", bind_error.c_str());
    return 1;
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client hanging up must not kill the server

  std::printf("kapitsa serve: listening on http://%s:%d (model %s, id '%s')\n", o.host.c_str(), http.port(),
              dir->c_str(), so.model_ids.front().c_str());
  std::fflush(stdout);

  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    eo.context_tokens = o.context_tokens;
    eo.max_sequences = o.parallel;
    eo.kv_dtype = kv_dtype_from_name(o.kv_dtype);
    eo.disk_cache.dir = o.cache_dir;
    eo.disk_cache.max_bytes = static_cast<size_t>(o.cache_dir_bytes);
    if (Status s = o.spec.load_draft(*dir, eo, *device); !s.ok()) {
      std::fprintf(stderr, "kapitsa serve: %s\n", s.error().message.c_str());
      load_failed = true;
      g_stop = 1;
      return;
    }
    auto loaded = load_for_generation(*dir, eo, *device);
    if (!loaded.ok()) {
      std::fprintf(stderr, "kapitsa serve: %s\n", loaded.error().message.c_str());
      load_failed = true;
      g_stop = 1;
      return;
    }
    std::fprintf(stderr, "kapitsa serve: %s\n",
                 memory_summary(loaded->engine->counters(), loaded->engine->options()).c_str());
    std::shared_ptr<const text::ChatTemplate> tmpl;
    if (loaded->chat_template) tmpl = std::make_shared<const text::ChatTemplate>(std::move(*loaded->chat_template));
    service.set_model(std::shared_ptr<runtime::Engine>(std::move(loaded->engine)), tmpl, loaded->default_sampling);
    // The engine's context: --ctx capped at the model's own limit.
    std::fprintf(stderr, "kapitsa serve: model ready (%lld-token context, %d sequences)\n",
                 static_cast<long long>(service.engine().options().context_tokens), o.parallel);
  });
  std::thread server_thread([&] { http.run(); });

  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "kapitsa serve: shutting down\n");
  service.shutdown();  // running generations end; their streams write their final events
  for (int i = 0; i < 100 && service.metrics().streams_active.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.stop();
  server_thread.join();
  loader.join();
  return load_failed ? 1 : 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve OpenAI (chat, completions, responses) and Anthropic (messages) APIs");
  cmd->add_option("--model", o->model, "Model folder, .gguf, catalog alias or org/name[:quant] (default: the bundled demo model)");
  cmd->add_flag("--pull", o->pull, "Download --model first when it is an alias or Hub id not in the cache");
  cmd->add_option("--host", o->host, "Address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key, "Require this key (Authorization: Bearer or x-api-key); default $KAPITSA_API_KEY");
  cmd->add_flag("--cors", o->cors, "Allow browser pages from any origin (off by default)");
  cmd->add_option("--alias", o->aliases, "Model id(s) to serve under (repeatable; default: the folder name)");
  cmd->add_flag("--accept-any-model", o->accept_any_model, "Answer requests naming any model id");
  cmd->add_option("--ctx", o->context_tokens, "Context window per sequence, in tokens")->check(CLI::Range(int64_t{16}, int64_t{1} << 22));
  cmd->add_option("--parallel", o->parallel, "Sequences decoded together")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-body-mb", o->max_body_mb, "Largest request body accepted, in MiB")->check(CLI::Range(0.001, 4096.0));
  cmd->add_option("--threads", o->threads, "HTTP connections served at once")->check(CLI::Range(4, 4096));
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds a connection has to send a whole request (head and body) before it is dropped; 0: no limit")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--keepalive-ms", o->keepalive_ms, "Keep-alive interval of idle streams (pings during long prefills)");
  cmd->add_flag("--no-think", o->no_think, "Render prompts with enable_thinking=false unless a request asks otherwise");
  add_kv_dtype_option(cmd, o->kv_dtype);
  add_device_option(cmd, o->device);
  cmd->add_option("--chat-template-kwargs", o->template_kwargs, "JSON object of default chat template variables");
  cmd->add_option("--grammar-file", o->grammar_file,
                  "GBNF grammar every reply follows unless its request sets its own constraint (the whole output, "
                  "reasoning included: combine with --no-think)");
  cmd->add_option("--max-output-tokens", o->max_output_tokens,
                  "Output budget of a request that names none (max_tokens etc.)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue,
                  "Requests that may wait for a sequence slot; more are answered 429 with Retry-After")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Also keep prefix-cache snapshots in this folder, so that a restarted server resumes "
                  "conversations without prefilling them again (default: off)");
  cmd->add_option("--cache-dir-size", o->cache_dir_bytes,
                  "Most bytes --cache-dir may hold (e.g. 20GiB); least recently used entries go first")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("10GiB");
  o->spec.add_to(cmd);
  cmd->callback([o] { exit_code() = run_serve(*o); });
}

}  // namespace kapitsa::cli
