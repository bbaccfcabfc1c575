#include "train/throughput.h"

#include <algorithm>
#include <chrono>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/linear.h"

namespace dt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double measure_gemm_peak_gflop_per_s(DType precision, Device device) {
  constexpr int64_t n = 2048;
  const size_t bytes = n * n * dtype_size(precision);
  Buffer a(bytes, MemTag::workspace, device), b(bytes, MemTag::workspace, device), c(bytes, MemTag::workspace, device);
  // Values do not change the speed; zeros are valid in every precision.
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    kernels::linear_forward(c.view(precision, {n, n}), a.view(precision, {n, n}), b.view(precision, {n, n}), Tensor{});
    synchronize(device);
    best = std::max(best, 2.0 * n * n * n / seconds_since(start) / 1e9);
  }
  return best;
}

}  // namespace dt
