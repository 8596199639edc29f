// Speculative decoding benchmark (whole process, not Google Benchmark): greedy decode through the
// Engine with and without n-gram guesses, on an edit workload (a file in the prompt, the model writes it
// again with a small change: an agent's typical reply) and on free-running code completion. Prints
// decode tokens/s, the speed-up, the accepted share of guesses and tokens per forward step, and checks
// that every run gave the same tokens as plain decoding. Run it by hand:
//   build/release/bench/bench_spec [--model models/demo/target] [--max-tokens 160] [--spec-k 2 4 8]
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/proposer.h"
#include "text/tokenizer/tokenizer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

using namespace kapitsa;

namespace {

const char* kModule = R"(def mean(values):
    """Average of a non-empty list."""
    total = 0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    """Population variance of a non-empty list."""
    m = mean(values)
    total = 0
    for v in values:
        total += (v - m) ** 2
    return total / len(values)


def normalize(values):
    """Scale values to mean 0 and variance 1."""
    m = mean(values)
    s = variance(values) ** 0.5
    return [(v - m) / s for v in values]
)";

struct Workload {
  std::string name, prompt;
};

std::vector<Workload> workloads() {
  return {
      {"edit (rewrite a module)", std::string(kModule) + "\n\n# The same module, with the docstrings kept:\n\ndef mean(values):\n"},
      {"completion", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
  };
}

struct Result {
  std::vector<int32_t> ids;
  double decode_tok_s = 0;
  int proposed = 0, accepted = 0;
};

Result generate(const std::string& model_dir, std::shared_ptr<const text::Tokenizer> tok, const std::string& prompt,
                int max_tokens, std::shared_ptr<runtime::Proposer> proposer, int k) {
  auto model = models::load_model(model_dir);
  if (!model.ok()) throw std::runtime_error(model.error().message);
  runtime::EngineOptions options;
  options.max_sequences = 1;
  options.prefix_cache_bytes = 0;
  options.proposer = std::move(proposer);
  options.spec_tokens = k;
  auto engine = runtime::Engine::create(std::move(model).value(), tok, options);
  if (!engine.ok()) throw std::runtime_error(engine.error().message);
  runtime::GenerateRequest r;
  r.prompt_ids = tok->encode(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  auto g = (*engine)->submit(std::move(r));
  if (!g.ok()) throw std::runtime_error(g.error().message);
  Result out;
  runtime::Event e;
  while ((*g)->next(e)) {
    if (auto* t = std::get_if<runtime::TokenEvent>(&e)) out.ids.push_back(t->id);
    else {
      const auto& f = std::get<runtime::FinishEvent>(e);
      out.decode_tok_s = f.stats.decode_tokens_per_s;
      out.proposed = f.stats.draft_tokens;
      out.accepted = f.stats.draft_tokens_accepted;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa speculative decoding benchmark: n-gram guesses vs plain greedy decoding"};
  std::string model_dir = "models/demo/target";
  int max_tokens = 160;
  std::vector<int> ks = {2, 4, 8};
  app.add_option("--model", model_dir, "Model folder (with its tokenizer)");
  app.add_option("--max-tokens", max_tokens, "Tokens generated per run");
  app.add_option("--spec-k", ks, "Guesses per step to try");
  CLI11_PARSE(app, argc, argv);
  auto tok = text::Tokenizer::load(model_dir);
  if (!tok.ok()) {
    fmt::print(stderr, "bench_spec: {}\n", tok.error().message);
    return 1;
  }
  auto tokenizer = std::make_shared<const text::Tokenizer>(std::move(tok).value());
  fmt::print("model {}, greedy, {} tokens per run\n", model_dir, max_tokens);
  fmt::print("| workload | spec | decode tok/s | speed-up | guesses accepted | tokens per step | same tokens |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---|\n");
  bool all_same = true;
  for (const Workload& w : workloads()) {
    const Result plain = generate(model_dir, tokenizer, w.prompt, max_tokens, nullptr, 1);
    fmt::print("| {} | none | {:.1f} | 1.00 | | 1.00 | |\n", w.name, plain.decode_tok_s);
    for (int k : ks) {
      const Result spec = generate(model_dir, tokenizer, w.prompt, max_tokens, std::make_shared<runtime::NgramProposer>(), k);
      const bool same = spec.ids == plain.ids;
      all_same = all_same && same;
      // Decode steps: every token after the first comes from a step that emits 1 + its accepted guesses.
      const double steps = static_cast<double>(spec.ids.size()) - 1 - spec.accepted;
      fmt::print("| {} | ngram k={} | {:.1f} | {:.2f} | {} of {} ({:.0f}%) | {:.2f} | {} |\n", w.name, k, spec.decode_tok_s,
                 spec.decode_tok_s / plain.decode_tok_s, spec.accepted, spec.proposed,
                 spec.proposed > 0 ? 100.0 * spec.accepted / spec.proposed : 0.0,
                 steps > 0 ? (static_cast<double>(spec.ids.size()) - 1) / steps : 0.0, same ? "yes" : "NO");
    }
  }
  return all_same ? 0 : 1;
}
