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

StepFlops training_flops(const ModelConfig& m, int seq_len, int64_t tokens, Recompute recompute) {
  const double n = static_cast<double>(tokens);
  StepFlops f;
  f.model = 3 * forward_flops_per_token(m, seq_len) * n;
  double repeated = 0;
  if (recompute == Recompute::selective) repeated = m.n_layer * attention_core_flops(m, seq_len);
  // Full recomputation reruns each block up to the MLP's activation: backward needs neither
  // the MLP's output projection nor the residual after it (the next block's input is kept).
  if (recompute == Recompute::full) repeated = m.n_layer * (block_flops(m, seq_len) - 2.0 * m.ffn_hidden() * m.d_model);
  f.hardware = f.model + repeated * n;
  return f;
}

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
