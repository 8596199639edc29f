// --device, shared by `kapitsa logits`, `run`, `chat` and `serve`: where the model runs — cpu, cuda
// (cuda:0) or cuda:N. Unset: cuda when this build has the CUDA backend and a usable GPU is present,
// else cpu. Choosing resolves and selects the device once, before the model loads, so a missing driver
// or GPU is an error naming what is missing rather than a failure mid-load.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

#include <CLI/CLI.hpp>

#include <string>

namespace kapitsa::cli {

// Adds --device to `cmd`, writing the text into `value` (empty: the default above).
CLI::Option* add_device_option(CLI::App* cmd, std::string& value);
// Parses and selects the device `value` names (or the default); logs the choice when it is a GPU.
Expected<Device> choose_device(const std::string& value);

}  // namespace kapitsa::cli
