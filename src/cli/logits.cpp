// `kapitsa logits`: the stable test/debug interface. Full forward pass over token ids from a JSON
// file, logits (and optionally hidden states and a greedy continuation) written to safetensors.
#include "base/json.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/generate_common.h"
#include "cli/kv_dtype_option.h"
#include "models/model.h"
#include "ops/ops.h"
#include "weights/safetensors_writer.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace kapitsa::cli {
namespace {

struct LogitsOptions {
  std::string model_dir;
  std::string ids_file;
  std::string out;
  int generate = 0;
  bool hidden_states = false;
  std::string backend = "cpu";
  bool rope_bf16 = false;
  std::string device = "cpu";  // --device: the test/debug interface stays on the cpu unless told
  std::string kv_dtype = "f32";  // exact by default: this is the test/debug interface
};

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;  // first maximum wins, as torch.argmax
  return static_cast<int32_t>(best);
}

Status run_logits(const LogitsOptions& o) {
  if (o.backend == "ref") ops::set_backend(ops::Backend::ref);
  else if (o.backend != "cpu") return error("--backend must be 'cpu' or 'ref', got '{}'", o.backend);
  if (o.generate < 0) return error("--generate must be non-negative, got {}", o.generate);
  KAPITSA_TRY(std::vector<int32_t> ids, read_token_ids(o.ids_file));
  KAPITSA_TRY(const Device device, choose_device(o.device));
  models::LoadOptions load{o.rope_bf16};
  load.device = device;
  KAPITSA_TRY(std::unique_ptr<models::Model> model, models::load_model(o.model_dir, load));
  const auto& info = model->info();
  log::info("{}", info.summary);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= info.vocab_size)
      return error("{}: token id {} at index {} is outside the vocabulary [0, {})", o.ids_file, ids[i], i, info.vocab_size);

  const int64_t T = static_cast<int64_t>(ids.size()), V = info.vocab_size, H = info.hidden_size, L = info.n_layers;
  // A pool of the chosen element type (the model's default pool is f32).
  models::KvLayout layout = model->kv_layout();
  layout.dtype = kv_dtype_from_name(o.kv_dtype);
  auto state = model->new_state(T + o.generate, std::make_shared<models::KvPagePool>(layout));
  Buffer logits = Buffer::allocate(DType::f32, {T, V});
  Buffer hidden;
  if (o.hidden_states) hidden = Buffer::allocate(DType::f32, {L + 1, T, H});
  KAPITSA_RETURN_IF_ERROR(model->forward(ids, *state, logits, hidden.tensor()));

  std::vector<weights::NamedTensor> outputs = {{"logits", logits.tensor()}};
  if (o.hidden_states) outputs.push_back({"hidden_states", hidden.tensor()});

  Buffer greedy_ids, greedy_logits;
  if (o.generate > 0) {
    // greedy_logits[i] are the logits that chose greedy_ids[i]; row 0 is the prompt's last row.
    greedy_ids = Buffer::allocate(DType::i32, {o.generate});
    greedy_logits = Buffer::allocate(DType::f32, {o.generate, V});
    ops::copy(logits.tensor().rows(T - 1, T), greedy_logits.tensor().rows(0, 1));
    for (int i = 0; i < o.generate; ++i) {
      const Tensor row = greedy_logits.tensor().rows(i, i + 1);
      const int32_t next = argmax(row.f32(), V);
      greedy_ids.tensor().data_as<int32_t>()[i] = next;
      if (i + 1 < o.generate) {
        const int32_t one[] = {next};
        KAPITSA_RETURN_IF_ERROR(model->forward(one, *state, greedy_logits.tensor().rows(i + 1, i + 2)));
      }
    }
    std::string text;
    for (int i = 0; i < o.generate; ++i) text += fmt::format("{}{}", i ? ", " : "", greedy_ids.tensor().data_as<int32_t>()[i]);
    log::info("greedy continuation: [{}]", text);
    outputs.push_back({"greedy_ids", greedy_ids.tensor()});
    outputs.push_back({"greedy_logits", greedy_logits.tensor()});
  }
  return weights::write_safetensors(o.out, outputs);
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto options = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Dump the logits of a forward pass over token ids (tests, debugging)");
  cmd->add_option("--model", options->model_dir, "Model folder (config.json + safetensors)")->required();
  cmd->add_option("--ids-file", options->ids_file, "JSON file holding an array of token ids")->required();
  cmd->add_option("--out", options->out, "Output .safetensors: logits [T, V] f32 (+ greedy_ids, greedy_logits, hidden_states)")
      ->required();
  cmd->add_option("--generate", options->generate, "Also decode N greedy tokens one at a time, carrying the state");
  cmd->add_flag("--hidden-states", options->hidden_states, "Also write hidden_states [L+1, T, H]");
  cmd->add_option("--backend", options->backend, "Op backend: cpu (default) or ref (the scalar oracle)");
  cmd->add_flag("--rope-bf16", options->rope_bf16,
                "Round RoPE frequencies through bf16 as transformers does for bf16-loaded checkpoints");
  add_kv_dtype_option(cmd, options->kv_dtype);
  add_device_option(cmd, options->device)->default_str("cpu");
  cmd->callback([options] {
    Status status = run_logits(*options);
    if (!status.ok()) {
      std::fprintf(stderr, "kapitsa logits: %s\n", status.error().message.c_str());
      exit_code() = 1;
    }
  });
}

}  // namespace kapitsa::cli
