// kapitsa: the command-line entry point. Wires subcommands together; holds no logic of its own.
#include "cli/commands.h"
#include "ops/cpu/cpu.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace kapitsa::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
const char* version() { return "0.1.0"; }
}  // namespace kapitsa::cli

namespace {

bool is_command(const CLI::App& app, const char* name) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->check_name(name)) return true;
  return false;
}

// The commands' names, comma-separated.
std::string command_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// `kapitsa` alone: where to start (instead of CLI11's "A subcommand is required").
void print_start(const CLI::App& app) {
  std::printf(
      "Kapitsa: local inference for Qwen3.5 / Qwen3-Next and Nemotron-H hybrid models.\n\n"
      "Start with:\n"
      "  kapitsa run \"def fibonacci(n):\"   complete a prompt (the bundled demo model unless --model)\n"
      "  kapitsa chat                       chat in the terminal\n"
      "  kapitsa serve                      OpenAI and Anthropic APIs on 127.0.0.1:8080\n"
      "  kapitsa opencode                   a coding agent wired to a local server (also claude, codex, pi)\n"
      "  kapitsa doctor                     what this machine can run\n"
      "  kapitsa pull 4b                    download a model from the Hugging Face Hub\n\n"
      "Commands: %s.\n`kapitsa COMMAND --help` describes each; `kapitsa --help` lists them.\n",
      command_names(app).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa: local inference for Qwen3.5 / Qwen3-Next and Nemotron-H hybrid models"};
  app.require_subcommand(1);
  // The cpu kernels' level is read when asked, so a bad KAPITSA_CPU_ISA does not stop every command.
  app.set_version_flag("--version", [] {
    return std::string("kapitsa ") + kapitsa::cli::version() + " (cpu kernels: " +
           std::string(kapitsa::ops::cpu::level_name(kapitsa::ops::cpu::selected_level())) + ")";
  });
  kapitsa::cli::add_logits_command(app);
  kapitsa::cli::add_dev_command(app);
  kapitsa::cli::add_template_command(app);
  kapitsa::cli::add_tokenize_command(app);
  kapitsa::cli::add_serve_command(app);
  kapitsa::cli::add_run_command(app);
  kapitsa::cli::add_chat_command(app);
  kapitsa::cli::add_agent_commands(app);
  kapitsa::cli::add_doctor_command(app);
  kapitsa::cli::add_pull_commands(app);
  kapitsa::cli::add_bench_command(app);
  kapitsa::cli::add_quantize_command(app);
  if (argc == 1) {
    print_start(app);
    return 0;
  }
  // An unknown command names itself and the commands (CLI11 would say "A subcommand is required").
  if (argv[1][0] != '-' && !is_command(app, argv[1])) {
    std::fprintf(stderr, "kapitsa: unknown command '%s'. Commands: %s.\n", argv[1], command_names(app).c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return kapitsa::cli::exit_code();
}
