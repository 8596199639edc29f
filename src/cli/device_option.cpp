// --device: parse, default (cuda when usable), select (see device_option.h).
#include "cli/device_option.h"

#include "base/log.h"
#include "ops/memory.h"

namespace kapitsa::cli {

CLI::Option* add_device_option(CLI::App* cmd, std::string& value) {
  return cmd->add_option("--device", value,
                         "Where the model runs: cpu, cuda or cuda:N (default: cuda when a usable GPU is present, else cpu)");
}

Expected<Device> choose_device(const std::string& value) {
  ops::DeviceSpec spec;
  if (value.empty()) {
    spec.device = ops::cuda_usable() ? Device::cuda : Device::cpu;
  } else {
    KAPITSA_TRY(spec, ops::parse_device(value));
  }
  if (Status s = ops::select_device(spec); !s.ok()) return error("--device {}", s.error().message);
  if (spec.device == Device::cuda) {
    const ops::DeviceMemoryInfo m = ops::device_memory(spec.device);
    log::info("device {}: {:.1f} GiB free of {:.1f} GiB", ops::device_name(spec),
              static_cast<double>(m.free_bytes) / (1ull << 30), static_cast<double>(m.total_bytes) / (1ull << 30));
  }
  return spec.device;
}

}  // namespace kapitsa::cli
