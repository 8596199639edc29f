// Whole-model benchmark: prefill and decode tokens/s of a checkpoint (or of a random one
// written from a config.json), printed beside the memory-bandwidth roofline: the machine's measured
// read bandwidth ÷ the weight bytes one decode step reads (on a GPU: its measured device-to-device copy
// bandwidth, bytes read plus written). Not a test; run it by hand:
//   build/release/bench/bench_model --config bench/configs/qwen35-0.8b.json [--prompt 512] [--decode 64]
//   build/release/bench/bench_model --model models/demo/target --device cuda
//   --batch N: N sequences decode in lockstep, one forward_batch per step (the model alone, no engine
//   or sampling: bench_runtime measures those); the aggregate tokens/s is reported beside batch 1.
//   --verify-rows 1 2 3 5 9: the cost of a speculative verification step of N rows after the prompt and
//   the decoded tokens (one forward with logits for every row and a recurrent-state checkpoint per row,
//   as the engine verifies k = N - 1 guesses), best of 5, in units of the same step of 1 row: how many
//   tokens a step must yield for speculation to pay on this model and machine.
#include "base/thread_pool.h"
#include "models/model.h"
#include "models/state_slots.h"
#include "ops/memory.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

using namespace kapitsa;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Read bandwidth of this machine with all threads: sums a buffer far larger than the caches.
double measure_read_bandwidth_gbs() {
  const size_t n = size_t{1} << 28;  // 1 GiB of floats
  std::vector<float> data(n, 1.0f);
  std::vector<double> sums(default_thread_pool().size() * 16, 0.0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    parallel_for(n, 1 << 20, [&](size_t begin, size_t end) {
      float acc[16] = {};
      for (size_t i = begin; i + 16 <= end; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += data[i + j];
      float s = 0;
      for (float a : acc) s += a;
      sums[(begin / (1 << 20)) % sums.size()] += s;
    });
    best = std::max(best, n * sizeof(float) / seconds_since(start) / 1e9);
  }
  return best;
}

// Copy bandwidth of the GPU (bytes read + written) over 1 GiB buffers, best of 5 runs of 4 copies.
double measure_device_bandwidth_gbs(Device device) {
  const int64_t n = int64_t{1} << 30;
  Buffer a = ops::zeros(device, DType::u8, {n}), b = ops::zeros(device, DType::u8, {n});
  ops::copy_bytes(b.tensor(), a.tensor());
  ops::synchronize(device);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    for (int i = 0; i < 4; ++i) ops::copy_bytes(i % 2 ? a.tensor() : b.tensor(), i % 2 ? b.tensor() : a.tensor());
    ops::synchronize(device);
    best = std::max(best, 4.0 * 2 * static_cast<double>(n) / seconds_since(start) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa whole-model benchmark: prefill and decode tokens/s beside the bandwidth roofline"};
  std::string config, model_dir;
  int prompt = 512, decode = 64, batch = 1;
  uint64_t seed = 1;
  std::string device_name = "cpu";
  std::vector<int> verify_rows;
  app.add_option("--config", config, "config.json to benchmark a random checkpoint of (written once, cached)");
  app.add_option("--model", model_dir, "Existing model folder (instead of --config)");
  app.add_option("--prompt", prompt, "Prompt tokens for the prefill measurement");
  app.add_option("--decode", decode, "Tokens to decode one at a time");
  app.add_option("--batch", batch, "Sequences decoding together (aggregate tokens/s)")->check(CLI::Range(1, 256));
  app.add_option("--seed", seed, "Seed of the random checkpoint and prompt");
  app.add_option("--device", device_name, "cpu (default), cuda or cuda:N");
  app.add_option("--verify-rows", verify_rows, "Rows of a speculative verification step to time (e.g. 1 2 3 5 9)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  if (config.empty() == model_dir.empty()) {
    fmt::print(stderr, "bench_model: give exactly one of --config or --model\n");
    return 2;
  }
  if (model_dir.empty()) {
    model_dir = (std::filesystem::temp_directory_path() / "kapitsa-bench" /
                 std::filesystem::path(config).stem()).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
      fmt::print(stderr, "writing a random checkpoint for {} to {}\n", config, model_dir);
      Status s = models::write_random_checkpoint(config, model_dir, seed);
      if (!s.ok()) {
        fmt::print(stderr, "bench_model: {}\n", s.error().message);
        return 1;
      }
    }
  }
  auto spec = ops::parse_device(device_name);
  Status selected = spec.ok() ? ops::select_device(*spec) : Status(spec.error());
  if (!selected.ok()) {
    fmt::print(stderr, "bench_model: {}\n", selected.error().message);
    return 2;
  }
  models::LoadOptions load_options;
  load_options.device = spec->device;
  const auto load_start = Clock::now();
  auto loaded = models::load_model(model_dir, load_options);
  const double load_s = seconds_since(load_start);
  if (!loaded.ok()) {
    fmt::print(stderr, "bench_model: {}\n", loaded.error().message);
    return 1;
  }
  const models::Model& model = **loaded;
  const auto& info = model.info();

  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> ids(static_cast<size_t>(prompt));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(info.vocab_size));
  Buffer logits = Buffer::allocate(DType::f32, {1, info.vocab_size});

  // Warm-up: page the weights in and touch every code path once, then one prefill of the measured length
  // on its own state (as llama-bench warms up): the first step of a size grows the workspace and, on
  // cuda, loads cuBLAS's kernels for its shapes — a server pays that once, not per prompt.
  {
    auto warm = model.new_state(8);
    const int32_t two[] = {1, 2};
    (void)model.forward(two, *warm, logits);
    if (prompt > 2) {
      auto warm_prompt = model.new_state(prompt + 1);
      (void)model.forward(ids, *warm_prompt, logits);
    }
  }

  // 1 row first: the step the others are measured against.
  if (!verify_rows.empty() && std::find(verify_rows.begin(), verify_rows.end(), 1) == verify_rows.end())
    verify_rows.insert(verify_rows.begin(), 1);
  const int max_verify = verify_rows.empty() ? 0 : *std::max_element(verify_rows.begin(), verify_rows.end());
  auto state = model.new_state(prompt + decode + 1 + max_verify);
  auto start = Clock::now();
  if (!model.forward(ids, *state, logits).ok()) return 1;
  const double prefill_s = seconds_since(start);

  start = Clock::now();
  for (int i = 0; i < decode; ++i) {
    const int32_t next[] = {static_cast<int32_t>(rng() % static_cast<uint32_t>(info.vocab_size))};
    if (!model.forward(next, *state, logits).ok()) return 1;
  }
  const double decode_s = seconds_since(start);

  // Verification steps: from a copy of the state after the prompt and the decoded tokens, N rows with
  // every row's logits and a recurrent-state checkpoint per row (the engine's verification step).
  std::vector<std::pair<int, double>> verify_s;
  for (const int rows : verify_rows) {
    double best = 1e30;
    std::vector<int32_t> ids_n(static_cast<size_t>(rows)), row_index(static_cast<size_t>(rows));
    std::iota(row_index.begin(), row_index.end(), 0);
    Buffer rows_logits = Buffer::allocate(DType::f32, {rows, info.vocab_size});
    for (int r = 0; r < 6; ++r) {  // the first run warms this row count up
      for (auto& id : ids_n) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(info.vocab_size));
      auto copy = state->clone();
      std::vector<int32_t> slots;
      if (models::StateSlotPool* pool = copy->slot_pool())
        for (int j = 0; j < rows; ++j) slots.push_back(pool->allocate());
      const models::ForwardBatch::Sequence seq{ids_n, copy.get()};
      const models::ForwardOutputs::Rows out{0, row_index, rows_logits.tensor()};
      const models::ForwardOutputs::Checkpoints ckpt{0, slots};
      models::ForwardOutputs outputs;
      outputs.logits = std::span(&out, 1);
      if (!slots.empty()) outputs.checkpoints = std::span(&ckpt, 1);
      start = Clock::now();
      const Status s = model.run_step(models::ForwardBatch{std::span(&seq, 1)}, outputs);
      if (r > 0) best = std::min(best, seconds_since(start));
      for (const int32_t slot : slots) copy->slot_pool()->release(slot);
      if (!s.ok()) {
        fmt::print(stderr, "bench_model: verification of {} rows: {}\n", rows, s.error().message);
        return 1;
      }
    }
    verify_s.emplace_back(rows, best);
  }

  // Batched decode: `batch` sequences with a short prompt each, then `decode` steps of one token each.
  double batch_tps = 0;
  if (batch > 1) {
    std::vector<std::unique_ptr<models::SequenceState>> states;
    std::vector<Buffer> batch_logits;
    for (int b = 0; b < batch; ++b) {
      states.push_back(model.new_state(16 + 2 + decode));  // prompt, warm-up, decode
      batch_logits.push_back(Buffer::allocate(DType::f32, {1, info.vocab_size}));
    }
    std::vector<int32_t> next(static_cast<size_t>(batch) * 16);
    std::vector<models::Model::BatchItem> items(static_cast<size_t>(batch));
    auto step = [&](size_t tokens) {
      for (auto& id : next) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(info.vocab_size));
      for (size_t b = 0; b < items.size(); ++b)
        items[b] = {std::span<const int32_t>(next).subspan(b * tokens, tokens), states[b].get(), batch_logits[b].tensor()};
      return model.forward_batch(items);
    };
    auto failed = [](const Status& s) {
      if (s.ok()) return false;
      fmt::print(stderr, "bench_model: batched decode: {}\n", s.error().message);
      return true;
    };
    if (failed(step(16))) return 1;  // the prompts
    for (int i = 0; i < 2; ++i)
      if (failed(step(1))) return 1;  // warm-up: first steps of this batch size (graph capture on cuda)
    start = Clock::now();
    for (int i = 0; i < decode; ++i)
      if (failed(step(1))) return 1;
    batch_tps = batch * decode / seconds_since(start);
  }

  const bool gpu = spec->device != Device::cpu;
  const double bandwidth = gpu ? measure_device_bandwidth_gbs(spec->device) : measure_read_bandwidth_gbs();
  const double bytes = static_cast<double>(info.weight_bytes_per_token);
  const double roofline = bytes > 0 ? bandwidth * 1e9 / bytes : 0;
  const double decode_tps = decode / decode_s;

  fmt::print("model      {}\n", info.summary);
  fmt::print("device     {} (loaded in {:.2f} s)\n", ops::device_name(*spec), load_s);
  if (gpu) fmt::print("gpu        {}\n", ops::cuda_report());
  else fmt::print("threads    {}\n", default_thread_pool().size());
  fmt::print("bandwidth  {:.1f} GB/s ({})\n", bandwidth, gpu ? "measured device copy, read + write" : "measured read, all threads");
  fmt::print("weights    {:.1f} MB read per decode token\n", bytes / 1e6);
  fmt::print("| measurement          | tokens/s | roofline tokens/s | of roofline |\n");
  fmt::print("|----------------------|---------:|------------------:|------------:|\n");
  fmt::print("| prefill ({:5d} tok)  | {:8.1f} |                 - |           - |\n", prompt, prompt / prefill_s);
  fmt::print("| decode  (batch 1)    | {:8.2f} | {:17.2f} | {:10.0f}% |\n", decode_tps, roofline,
             roofline > 0 ? 100 * decode_tps / roofline : 0);
  const double one_row_s = verify_s.empty() ? 0 : std::find_if(verify_s.begin(), verify_s.end(), [](const auto& v) { return v.first == 1; })->second;
  for (const auto& [rows, secs] : verify_s)
    fmt::print("| verify  ({:2d} rows)    | {:8.2f} | {:>17} | {:>11} |  {:.3f} ms a step = {:.2f} one-row steps\n", rows,
               rows / secs, "-", "-", secs * 1e3, secs / one_row_s);
  if (batch > 1)
    fmt::print("| decode  (batch {:3d})  | {:8.2f} | {:>17} | {:>11} |  aggregate, {:.2f}x batch 1\n", batch, batch_tps,
               "-", "-", batch_tps / decode_tps);
  return 0;
}
