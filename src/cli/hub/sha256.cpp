// sha256_file (sha256.h): read in 1 MiB pieces through EVP_DigestUpdate.
#include "cli/hub/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace kapitsa::cli::hub {

Expected<std::string> sha256_file(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return error("reading {}: {}", path.string(), std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return error("sha256: OpenSSL refused to start a digest");
  std::vector<unsigned char> buffer(1 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buffer.data(), n);
  if (std::ferror(f.get())) return error("reading {}: {}", path.string(), std::strerror(errno));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace kapitsa::cli::hub
