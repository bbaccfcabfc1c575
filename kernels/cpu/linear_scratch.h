// The workspace the CPU's linear kernels (kernels/cpu/linear.cpp) allocate during one call, for
// the memory plan (plan/memory.h) to count what a step holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace dt::kernels::cpu {

// For `rows` rows of `in` -> `out` features stored in `storage`: nothing in f32 and f64, nor in
// bf16 where oneDNN runs it on the processor's bf16 units; else (f16, and bf16 without them) the
// operands widened to f32 and the f32 product, rows·out + rows·in + out·in values for the forward
// and the input gradient, the most of a layer's three calls.
size_t linear_scratch_bytes(int64_t rows, int64_t in, int64_t out, DType storage);

}  // namespace dt::kernels::cpu
