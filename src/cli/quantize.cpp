// `kapitsa quantize IN OUT --bits N [--group-size G] [--mixed RECIPE]`: an MLX affine-quantized copy of
// a checkpoint folder (models/quantize_checkpoint.h), with a progress bar over the tensor bytes.
#include "cli/commands.h"
#include "cli/hub/progress.h"
#include "models/quantize_checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

namespace kapitsa::cli {

void add_quantize_command(CLI::App& app) {
  struct Options {
    std::string in, out, mixed;
    int bits = 0, group_size = 64;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write an MLX affine-quantized copy of a bf16/f16/f32 model folder");
  cmd->add_option("IN", o->in, "Model folder to quantize (safetensors + config.json)")->required();
  cmd->add_option("OUT", o->out, "Output folder (must not exist)")->required();
  cmd->add_option("--bits", o->bits, "Bits per weight: 2, 3, 4, 5, 6 or 8 (with --mixed: the default for the config)");
  cmd->add_option("--group-size", o->group_size, "Weights per scale and bias: 32, 64 or 128")->capture_default_str();
  cmd->add_option("--mixed", o->mixed, "mlx-lm's mixed recipe: mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6");
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->callback([o] {
    if (o->bits == 0 && o->mixed.empty()) {
      std::fprintf(stderr, "kapitsa quantize: --bits is required (2, 3, 4, 5, 6 or 8), or --mixed RECIPE\n");
      exit_code() = 2;
      return;
    }
    // The bar starts with the first tensor, so that a refused run prints its error alone.
    std::unique_ptr<hub::Progress> progress;
    models::QuantizeOptions options{o->bits, o->group_size, o->mixed, {}, {}};
    options.on_tensor = [&](int64_t bytes) {
      if (!progress)
        if (auto total = models::checkpoint_tensor_bytes(o->in); total.ok())
          progress = std::make_unique<hub::Progress>("quantize", *total, 0, -1, ::isatty(STDERR_FILENO) != 0, o->quiet);
      if (progress) progress->add(bytes);
    };
    options.on_shard = [&](const std::string& file, int64_t bytes) { if (progress) progress->file_done(file, bytes); };
    auto summary = models::quantize_checkpoint(o->in, o->out, options);
    if (progress) progress->finish(summary.ok());
    if (!summary.ok()) {
      std::fprintf(stderr, "kapitsa quantize: %s\n", summary.error().message.c_str());
      exit_code() = 1;
      return;
    }
    if (!o->quiet)
      std::fprintf(stderr, "%s: %d modules quantized (%.3f bits per weight with scales and biases), %d tensors kept, %d left "
                           "out (vision tower); %s of tensors from %s\n",
                   o->out.c_str(), summary->quantized, summary->bits_per_weight, summary->kept, summary->dropped,
                   hub::Progress::bytes(double(summary->output_bytes)).c_str(),
                   hub::Progress::bytes(double(summary->input_bytes)).c_str());
  });
}

}  // namespace kapitsa::cli
