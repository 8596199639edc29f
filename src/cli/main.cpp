// kapitsa: the command-line entry point. Wires subcommands together; holds no logic of its own.
#include "cli/commands.h"

#include <cstdio>

namespace kapitsa::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
}  // namespace kapitsa::cli

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa: local inference for Qwen3.5 / Qwen3-Next and Nemotron-H hybrid models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kapitsa 0.1.0");
  kapitsa::cli::add_logits_command(app);
  kapitsa::cli::add_dev_command(app);
  kapitsa::cli::add_template_command(app);
  kapitsa::cli::add_tokenize_command(app);
  kapitsa::cli::add_serve_command(app);
  kapitsa::cli::add_run_command(app);
  kapitsa::cli::add_chat_command(app);
  kapitsa::cli::add_agent_commands(app);
  kapitsa::cli::add_doctor_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return kapitsa::cli::exit_code();
}
