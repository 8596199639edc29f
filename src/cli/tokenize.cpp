// `kapitsa tokenize --model DIR [--decode]`: a line-oriented tokenizer for tests and scripts. Each stdin
// line is a JSON string (encode → one line with the JSON array of ids) or, with --decode, a JSON array
// of ids (→ one line with the JSON string). DIR is any folder holding tokenizer.json. A bad line is
// reported on stderr with its number and the command exits 1 after finishing the other lines.
#include "cli/commands.h"
#include "base/json.h"
#include "text/tokenizer/tokenizer.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

namespace kapitsa::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  bool decode = false;
  bool skip_special = false;
  bool no_special = false;   // treat special-token text as plain text when encoding
  bool add_special = false;  // apply the post-processor (e.g. BOS), as HF's add_special_tokens=True
};

int run_tokenize(const TokenizeOptions& o) {
  auto tok = text::Tokenizer::load(o.model_dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "kapitsa tokenize: %s\n", tok.error().message.c_str());
    return 1;
  }
  text::EncodeOptions encode;
  encode.allow_special = !o.no_special;
  encode.add_special = o.add_special;
  int status = 0;
  std::string line;
  for (size_t number = 1; std::getline(std::cin, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const Json value = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string out;
    if (!o.decode) {
      if (!value.is_string()) {
        std::fprintf(stderr, "kapitsa tokenize: stdin line %zu: expected a JSON string\n", number);
        status = 1;
        continue;
      }
      out = Json(tok->encode(value.get<std::string>(), encode)).dump();
    } else {
      bool ok = value.is_array();
      std::vector<int32_t> ids;
      for (size_t i = 0; ok && i < value.size(); ++i) {
        ok = value[i].is_number_integer() && value[i].get<int64_t>() >= 0 && value[i].get<int64_t>() < tok->vocab_size();
        if (ok) ids.push_back(value[i].get<int32_t>());
      }
      if (!ok) {
        std::fprintf(stderr, "kapitsa tokenize: stdin line %zu: expected a JSON array of token ids below %d\n", number,
                     tok->vocab_size());
        status = 1;
        continue;
      }
      out = Json(tok->decode(ids, o.skip_special)).dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);  // a driving script may wait for each answer before sending the next line
  }
  return status;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode JSON strings from stdin to token ids (or --decode ids)");
  cmd->add_option("--model", options->model_dir, "Folder holding tokenizer.json")->required();
  cmd->add_flag("--decode", options->decode, "Read JSON arrays of ids, write JSON strings");
  cmd->add_flag("--skip-special", options->skip_special, "With --decode: leave special tokens out");
  cmd->add_flag("--no-special", options->no_special, "Encode special-token text (<|im_start|>) as plain text");
  cmd->add_flag("--add-special", options->add_special, "Apply the tokenizer's post-processor (e.g. add BOS)");
  cmd->callback([options] { exit_code() = run_tokenize(*options); });
}

}  // namespace kapitsa::cli
