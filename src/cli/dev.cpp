// `kapitsa dev …`: developer tools. `dev random-model` writes a random checkpoint of any supported
// config in the real HF layout, so tests and benchmarks can use real model sizes without downloads.
#include "cli/commands.h"
#include "models/model.h"

#include <cstdio>

namespace kapitsa::cli {

void add_dev_command(CLI::App& app) {
  CLI::App* dev = app.add_subcommand("dev", "Developer tools");
  dev->require_subcommand(1);

  struct RandomModelOptions {
    std::string config;
    std::string out;
    uint64_t seed = 1;
  };
  auto options = std::make_shared<RandomModelOptions>();
  CLI::App* random = dev->add_subcommand("random-model", "Write a random bf16 checkpoint for a config.json");
  random->add_option("--config", options->config, "A Hugging Face config.json of a supported architecture")->required();
  random->add_option("--out", options->out, "Output folder (created)")->required();
  random->add_option("--seed", options->seed, "Random seed (same seed, same weights)");
  random->callback([options] {
    Status status = models::write_random_checkpoint(options->config, options->out, options->seed);
    if (!status.ok()) {
      std::fprintf(stderr, "kapitsa dev random-model: %s\n", status.error().message.c_str());
      exit_code() = 1;
    }
  });
}

}  // namespace kapitsa::cli
