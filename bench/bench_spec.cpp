// Speculative decoding benchmark (whole process, not Google Benchmark): greedy decode through the
// Engine with and without guesses — n-gram lookup, a draft model and the target's MTP head — on an edit workload (a file in
// the prompt, the model writes it again with a small change: an agent's typical reply) and on
// free-running code completion. Prints decode tokens/s, the speed-up, the accepted share of guesses,
// tokens per target forward step (= per read of the target's weights) and weight bytes read per
// token (target, draft or MTP head), and checks that every run gave the same tokens as plain decoding. By hand:
//   build/release/bench/bench_spec [--model models/demo/target] [--draft models/demo/draft]
//       [--max-tokens 160] [--spec-k 2 4 8] [--draft-k 2 3 4] [--mtp-k 1 2 3] [--proposers ngram draft mtp]
//       [--repeat 5] [--device cuda]  (with KAPITSA_CUDA_SPEC_GRAPHS=1: speculative steps as CUDA graphs)
//       [--cost-aware]  (k is then the most guesses; the engine drafts the length that pays)
//       [--warm]  (each engine generates once unmeasured first, as a server that has served a request)
#include "models/model.h"
#include "ops/memory.h"
#include "runtime/draft_proposer.h"
#include "runtime/engine.h"
#include "runtime/mtp_proposer.h"
#include "runtime/proposer.h"
#include "weights/safetensors.h"
#include "text/tokenizer/tokenizer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
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

// Where the models run (--device): every run loads its models there afresh, so each starts with no
// captured CUDA graphs, as one `kapitsa run` does.
models::LoadOptions g_load;
bool g_cost_aware = false;  // --cost-aware: k is the most guesses, the engine drafts what pays
// --warm: the measured generation is the engine's second (the same prompt again), so that its CUDA
// graphs are captured and its kernels loaded, as in a server after its first request; without it the
// first steps' captures (a few ms each) are in the figure, as in one `kapitsa run`.
bool g_warm = false;

Result generate(const std::string& model_dir, std::shared_ptr<const text::Tokenizer> tok, const std::string& prompt,
                int max_tokens, std::shared_ptr<runtime::Proposer> proposer, int k) {
  auto model = models::load_model(model_dir, g_load);
  if (!model.ok()) throw std::runtime_error(model.error().message);
  runtime::EngineOptions options;
  options.max_sequences = 1;
  options.prefix_cache_bytes = 0;
  options.proposer = std::move(proposer);
  options.spec_tokens = k;
  options.spec_cost_aware = g_cost_aware;
  auto engine = runtime::Engine::create(std::move(model).value(), tok, options);
  if (!engine.ok()) throw std::runtime_error(engine.error().message);
  runtime::GenerateRequest r;
  r.prompt_ids = tok->encode(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  runtime::Event e;
  if (g_warm) {
    auto first = (*engine)->submit(r);
    if (!first.ok()) throw std::runtime_error(first.error().message);
    while ((*first)->next(e)) {
    }
  }
  auto g = (*engine)->submit(std::move(r));
  if (!g.ok()) throw std::runtime_error(g.error().message);
  Result out;
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
  CLI::App app{"Kapitsa speculative decoding benchmark: n-gram and draft-model guesses vs plain greedy decoding"};
  std::string model_dir = "models/demo/target";
  int max_tokens = 160;
  std::string draft_dir = "models/demo/draft";
  std::vector<int> ks = {2, 4, 8}, draft_ks = {2, 3, 4}, mtp_ks = {1, 2, 3};
  std::vector<std::string> proposers = {"ngram", "draft"};
  app.add_option("--model", model_dir, "Model folder (with its tokenizer)");
  app.add_option("--draft", draft_dir, "Draft model folder (same tokenizer)");
  app.add_option("--max-tokens", max_tokens, "Tokens generated per run");
  app.add_option("--spec-k", ks, "Guesses per step to try with n-gram");
  app.add_option("--draft-k", draft_ks, "Guesses per step to try with the draft model");
  app.add_option("--mtp-k", mtp_ks, "Guesses per step to try with the MTP head");
  app.add_option("--proposers", proposers, "Which proposers to run: ngram, draft, mtp");
  int repeat = 1;
  app.add_option("--repeat", repeat, "Runs of every configuration, interleaved; the median tok/s is shown (noisy machines)");
  std::string device_name = "cpu";
  app.add_option("--device", device_name, "cpu (default), cuda or cuda:N");
  app.add_flag("--cost-aware", g_cost_aware,
               "Draft only as many guesses as pay on this machine, up to k (as kapitsa run and serve do)");
  app.add_flag("--warm", g_warm,
               "Measure each engine's second generation (graphs captured, kernels loaded: a server after its first request)");
  CLI11_PARSE(app, argc, argv);
  auto device = ops::parse_device(device_name);
  const Status selected = device.ok() ? ops::select_device(*device) : Status(device.error());
  if (!selected.ok()) {
    fmt::print(stderr, "bench_spec: {}\n", selected.error().message);
    return 2;
  }
  g_load.device = device->device;
  auto tok = text::Tokenizer::load(model_dir);
  if (!tok.ok()) {
    fmt::print(stderr, "bench_spec: {}\n", tok.error().message);
    return 1;
  }
  auto tokenizer = std::make_shared<const text::Tokenizer>(std::move(tok).value());
  auto target_info = models::load_model(model_dir);
  if (!target_info.ok()) {
    fmt::print(stderr, "bench_spec: {}\n", target_info.error().message);
    return 1;
  }
  const double target_bytes = static_cast<double>((*target_info)->info().weight_bytes_per_token);
  double draft_bytes = 0;
  const bool with_draft = std::find(proposers.begin(), proposers.end(), "draft") != proposers.end();
  if (with_draft) {
    auto d = models::load_model(draft_dir);
    if (!d.ok()) {
      fmt::print(stderr, "bench_spec: --draft {}: {}\n", draft_dir, d.error().message);
      return 1;
    }
    draft_bytes = static_cast<double>((*d)->info().weight_bytes_per_token);
  }
  // The MTP head's reads per head row: its mtp.* tensors and the (shared) output head.
  double mtp_bytes = 0;
  if (std::find(proposers.begin(), proposers.end(), "mtp") != proposers.end()) {
    // The head as stored: lm_head, or the tied embedding (with its scales and biases when quantized).
    auto ckpt = weights::Checkpoint::open(model_dir);
    if (ckpt.ok()) {
      std::string head;
      for (const std::string& name : ckpt->names()) {
        if (name.rfind("mtp.", 0) == 0) mtp_bytes += static_cast<double>(ckpt->find(name)->nbytes);
        if (name.ends_with("lm_head.weight") || (head.empty() && name.ends_with("embed_tokens.weight")))
          head = name.substr(0, name.size() - std::string_view(".weight").size());
      }
      for (const char* part : {".weight", ".scales", ".biases"})
        if (const auto* e = ckpt->find(head + part)) mtp_bytes += static_cast<double>(e->nbytes);
    }
  }
  fmt::print("model {} ({:.1f} MB weights read per step), draft {} ({:.1f} MB), MTP head {:.1f} MB per row, greedy, {} "
             "tokens per run, on {}\n", model_dir, target_bytes / 1e6, with_draft ? draft_dir : "-", draft_bytes / 1e6,
             mtp_bytes / 1e6, max_tokens, ops::device_name(*device));
  fmt::print("| workload | spec | decode tok/s | speed-up | guesses accepted | tokens per target step | weight MB per token | same tokens |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|---|\n");
  bool all_same = true;
  for (const Workload& w : workloads()) {
    struct Run {
      std::string name;
      int k;
      std::function<std::shared_ptr<runtime::Proposer>()> make;
      double bytes_per_guess;  // weights a guess reads besides the target's
    };
    std::vector<Run> runs;
    for (const std::string& p : proposers) {
      if (p == "ngram")
        for (int k : ks) runs.push_back({"ngram", k, [] { return std::make_shared<runtime::NgramProposer>(); }, 0.0});
      if (p == "mtp")
        for (int k : mtp_ks)
          runs.push_back({"mtp", k, [] { return std::make_shared<runtime::MtpProposer>(runtime::MtpProposer::Options{}); },
                          mtp_bytes});
      if (p == "draft")
        for (int k : draft_ks)
          runs.push_back({"draft", k, [&] {
                            auto m = models::load_model(draft_dir, g_load);
                            if (!m.ok()) throw std::runtime_error(m.error().message);
                            return std::make_shared<runtime::DraftModelProposer>(std::move(m).value(),
                                                                                 runtime::DraftModelProposer::Options{});
                          },
                          draft_bytes});
    }
    // Every configuration `repeat` times, interleaved (plain first in each round), so that a change in
    // the machine's load hits all of them alike; the median decode rate of each is shown.
    std::vector<std::vector<double>> rates(runs.size() + 1);
    std::vector<Result> results(runs.size() + 1);
    for (int round = 0; round < std::max(repeat, 1); ++round)
      for (size_t c = 0; c <= runs.size(); ++c) {
        results[c] = c == 0 ? generate(model_dir, tokenizer, w.prompt, max_tokens, nullptr, 1)
                            : generate(model_dir, tokenizer, w.prompt, max_tokens, runs[c - 1].make(), runs[c - 1].k);
        rates[c].push_back(results[c].decode_tok_s);
      }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    const Result& plain = results[0];
    const double plain_rate = median(rates[0]);
    fmt::print("| {} | none | {:.1f} | 1.00 | | 1.00 | {:.1f} | |\n", w.name, plain_rate, target_bytes / 1e6);
    for (size_t c = 1; c <= runs.size(); ++c) {
      const Run& run = runs[c - 1];
      const Result& spec = results[c];
      const double rate = median(rates[c]);
      const bool same = spec.ids == plain.ids;
      all_same = all_same && same;
      // Decode steps: every token after the first comes from a step that emits 1 + its accepted guesses.
      const double tokens = static_cast<double>(spec.ids.size()) - 1;
      const double steps = tokens - spec.accepted;
      // Bytes read per token: the target's weights once per step, the draft's (or the MTP head's) once
      // per guess (the head's catch-up rows ride in the first guess's step).
      const double bytes = tokens > 0 ? (target_bytes * steps + run.bytes_per_guess * spec.proposed) / tokens : 0;
      fmt::print("| {} | {} k={} | {:.1f} | {:.2f} | {} of {} ({:.0f}%) | {:.2f} | {:.1f} | {} |\n", w.name, run.name, run.k,
                 rate, rate / plain_rate, spec.accepted, spec.proposed,
                 spec.proposed > 0 ? 100.0 * spec.accepted / spec.proposed : 0.0, steps > 0 ? tokens / steps : 0.0,
                 bytes / 1e6, same ? "yes" : "NO");
    }
  }
  return all_same ? 0 : 1;
}
