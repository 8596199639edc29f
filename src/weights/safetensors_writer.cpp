// Safetensors writer: header JSON, space padding to 8 bytes, then the tensors back to back.
// Writes to PATH.tmp and renames, so a failed write never leaves a half file under the real name.
#include "weights/safetensors_writer.h"

#include "base/json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kapitsa::weights {

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    Json shape = Json::array();
    for (int i = 0; i < tensor.rank(); ++i) shape.push_back(tensor.dim(i));
    header[name] = {{"dtype", dtype_name(tensor.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return error("{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = std::fwrite(&header_len, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [name, tensor] : tensors) {
    if (!ok) break;
    if (tensor.nbytes() > 0) ok = std::fwrite(tensor.data(), 1, tensor.nbytes(), f) == tensor.nbytes();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return error("{}: write failed: {}", path, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return error("{}: cannot rename from {}: {}", path, tmp, std::strerror(errno));
  return ok_status();
}

}  // namespace kapitsa::weights
