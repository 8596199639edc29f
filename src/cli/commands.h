// Each subcommand lives in its own file and registers itself on the CLI11 app here; main.cpp only
// calls these. A subcommand's callback returns the process exit code through CommandResult.
#pragma once

#include <CLI/CLI.hpp>

namespace kapitsa::cli {

// Set by the subcommand that ran; main returns it.
int& exit_code();
// "0.1.0": what --version prints and kapitsa bench reports.
const char* version();

void add_logits_command(CLI::App& app);
void add_dev_command(CLI::App& app);  // kapitsa dev random-model ...
void add_template_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_serve_command(CLI::App& app);  // kapitsa serve (src/cli/serve.cpp)
void add_run_command(CLI::App& app);   // kapitsa run
void add_chat_command(CLI::App& app);  // kapitsa chat
void add_agent_commands(CLI::App& app);  // kapitsa opencode|claude|codex|pi (src/cli/agents/)
void add_doctor_command(CLI::App& app);  // kapitsa doctor (src/cli/doctor.cpp)
void add_pull_commands(CLI::App& app);   // kapitsa pull|ls|rm (src/cli/pull.cpp)
void add_bench_command(CLI::App& app);   // kapitsa bench (src/cli/bench.cpp)
void add_quantize_command(CLI::App& app);  // kapitsa quantize (src/cli/quantize.cpp)

}  // namespace kapitsa::cli
