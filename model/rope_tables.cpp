#include "model/rope_tables.h"

#include "core/device.h"
#include "kernels/rope.h"

namespace dt {

RopeTables make_rope_tables(const ModelConfig& config, int rows, Device device) {
  const int64_t half = config.head_size() / 2;
  const size_t bytes = rope_table_bytes(config, rows);
  const auto tables = [&](Buffer buffer) {
    RopeTables t{.buffer = std::move(buffer), .cos = {}, .sin = {}};
    t.cos = t.buffer.view(DType::f32, {rows, half});
    t.sin = t.buffer.view(DType::f32, {rows, half}, static_cast<size_t>(rows * half) * sizeof(float));
    return t;
  };
  RopeTables host = tables(Buffer(bytes, MemTag::workspace));
  const kernels::RopeScaling scaling{.factor = config.rope_scaling_factor,
                                     .low_freq_factor = config.rope_low_freq_factor,
                                     .high_freq_factor = config.rope_high_freq_factor,
                                     .original_max_seq_len = static_cast<double>(config.rope_original_max_seq_len)};
  kernels::rope_table(host.cos, host.sin,
                      kernels::rope_inverse_frequencies(config.head_size(), config.rope_theta, scaling));
  if (device == Device::cpu) return host;
  RopeTables on_device = tables(Buffer(bytes, MemTag::workspace, device, false));
  copy_bytes(on_device.buffer.data(), device, host.buffer.data(), Device::cpu, bytes);
  return on_device;
}

size_t rope_table_bytes(const ModelConfig& config, int rows) {
  return static_cast<size_t>(2 * int64_t{rows} * (config.head_size() / 2)) * sizeof(float);
}

}  // namespace dt
