// The sha256 of a file (OpenSSL's EVP digest), as lowercase hex: what the Hub's LFS metadata records.
#pragma once

#include "base/status.h"

#include <filesystem>
#include <string>

namespace kapitsa::cli::hub {

Expected<std::string> sha256_file(const std::filesystem::path& path);

}  // namespace kapitsa::cli::hub
