// llama's rotary tables (kernels/rope.h): for positions [0, rows), cos and sin of each
// position's angle per frequency, (rows, HS/2) f32 each, in one buffer on `device`. Rows
// [p, p + T) rotate T positions starting at position p. Computed on the CPU and copied.
#pragma once

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/config.h"

namespace dt {

struct RopeTables {
  Buffer buffer;
  Tensor cos, sin;
};
RopeTables make_rope_tables(const ModelConfig& config, int rows, Device device = Device::cpu);
// The bytes make_rope_tables allocates on the device.
size_t rope_table_bytes(const ModelConfig& config, int rows);

}  // namespace dt
