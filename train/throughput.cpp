#include "train/throughput.h"

#include <algorithm>
#include <chrono>

#include "core/buffer.h"
#include "kernels/linear.h"

namespace dt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double step_flops(const ModelConfig& m, int64_t num_parameters, int batch_size, int seq_len) {
  const double tokens = static_cast<double>(batch_size) * seq_len;
  return 6.0 * static_cast<double>(num_parameters) * tokens + 12.0 * m.n_layer * m.d_model * seq_len * tokens;
}

double measure_gemm_peak_gflop_per_s(DType precision) {
  constexpr int64_t n = 2048;
  const size_t bytes = n * n * dtype_size(precision);
  Buffer a(bytes, MemTag::workspace), b(bytes, MemTag::workspace), c(bytes, MemTag::workspace);
  // Values do not change the speed; zeros are valid in every precision.
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    kernels::linear_forward(c.view(precision, {n, n}), a.view(precision, {n, n}), b.view(precision, {n, n}), Tensor{});
    best = std::max(best, 2.0 * n * n * n / seconds_since(start) / 1e9);
  }
  return best;
}

}  // namespace dt
