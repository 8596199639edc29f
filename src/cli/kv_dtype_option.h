// --kv-dtype, shared by `kapitsa logits`, `run`, `chat` and `serve`: the element type of the KV cache
// pages (f32, bf16, f16). logits defaults to f32 (the test/debug interface stays exact), the serving
// commands to bf16 (docs/decisions.md, "KV cache dtype"). Also the one-line memory summary serve prints.
#pragma once

#include "runtime/engine.h"
#include "tensor/dtype.h"

#include <CLI/CLI.hpp>

#include <string>

namespace kapitsa::cli {

// Adds --kv-dtype to `cmd`, writing the name into `value` (which holds the default). CLI11 rejects any
// other value with a message naming the flag and the allowed names.
CLI::Option* add_kv_dtype_option(CLI::App* cmd, std::string& value);
// The DType of a name add_kv_dtype_option accepted ("f32", "bf16", "f16").
DType kv_dtype_from_name(const std::string& name);
// The name of one of those DTypes, lower-case as on the command line.
std::string kv_dtype_name(DType dtype);

// "KV cache bf16: 8.0 KiB per token, 256.0 MiB per sequence at 32768 tokens; recurrent state 1.5 MiB
// per sequence" from an engine's counters and options.
std::string memory_summary(const runtime::EngineCounters& counters, const runtime::EngineOptions& options);

}  // namespace kapitsa::cli
