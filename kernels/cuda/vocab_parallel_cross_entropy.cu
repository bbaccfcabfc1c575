// The vocabulary-parallel cross-entropy (kernels/vocab_parallel_cross_entropy.h) on the GPU, one
// block per row as in cross_entropy.cu: the statistics are that kernel's online softmax over the
// slice's columns; the loss merges the ranks' statistics (every thread the same, in rank order)
// and writes the gradient over the row with the same roundings.
#include <cstdint>
#include <limits>

#include "kernels/cuda/softmax_rows.cuh"
#include "kernels/vocab_parallel_cross_entropy.h"

namespace dt::kernels::cuda {

namespace {

template <typename S, bool vectorized>
__global__ void __launch_bounds__(kRowThreads)
    slice_statistics_rows(compute_t<S>* __restrict__ stats, const S* __restrict__ logits,
                          const int32_t* __restrict__ targets, int64_t first_id, int64_t rows, int64_t Vp,
                          int32_t ignore_index) {
  using T = compute_t<S>;
  const int64_t n = blockIdx.x;
  const S* row = logits + n * Vp;
  const SoftmaxState<T> total = block_merge(row_softmax_state<S, vectorized>(row, rows));
  if (threadIdx.x != 0) return;
  const int64_t target = int64_t{targets[n]} - first_id;
  const bool here = targets[n] != ignore_index && target >= 0 && target < rows;
  stats[3 * n] = total.m;
  stats[3 * n + 1] = total.s;
  stats[3 * n + 2] = here ? load(row[target]) : T{0};
}

template <typename S, bool vectorized>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_slice_rows(compute_t<S>* __restrict__ losses, S* __restrict__ logits,
                             const compute_t<S>* __restrict__ all_stats, int64_t ranks, int64_t N,
                             const int32_t* __restrict__ targets, int64_t first_id, int64_t rows, int64_t Vp,
                             int32_t ignore_index, bool with_gradient, compute_t<S> loss_scale) {
  using T = compute_t<S>;
  const int64_t n = blockIdx.x;
  S* row = logits + n * Vp;
  if (targets[n] == ignore_index) {
    if (threadIdx.x == 0) losses[n] = 0;
    if (with_gradient) fill_row<S, vectorized>(row, Vp, T{0});
    return;
  }
  // The ranks' statistics merged in rank order, by every thread alike.
  T max = -std::numeric_limits<T>::infinity(), sum = 0, target_logit = 0;
  for (int64_t r = 0; r < ranks; ++r) max = fmax(max, all_stats[(r * N + n) * 3]);
  for (int64_t r = 0; r < ranks; ++r) {
    const T* s = all_stats + (r * N + n) * 3;
    sum += s[1] * exp_of(s[0] - max);
    target_logit += s[2];
  }
  if (threadIdx.x == 0) losses[n] = log_of(sum) + max - target_logit;
  if (!with_gradient) return;
  const T factor = loss_scale / sum;
  const int64_t target = int64_t{targets[n]} - first_id;
  const auto gradient = [&](int64_t v, T x) -> T {
    const T e = exp_of(x - max);
    return v == target ? mul_sub_rn(e, factor, loss_scale) : mul_rn(e, factor);
  };
  write_row_gradient<S, vectorized>(row, rows, Vp, gradient);
}

}  // namespace

void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index) {
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  if (N == 0) return;
  dispatch_storage(logits.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    Buffer staged;
    const int32_t* on_gpu = device_targets(targets, staged);
    const auto kernel = can_pack<S>(Vp, {logits.data}) ? slice_statistics_rows<S, true> : slice_statistics_rows<S, false>;
    kernel<<<static_cast<unsigned>(N), kRowThreads, 0, compute_stream()>>>(
        static_cast<T*>(stats.data), storage_ptr<S>(logits), on_gpu, first_id, rows, Vp, ignore_index);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale, int32_t ignore_index) {
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  if (N == 0) return;
  dispatch_storage(logits.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    Buffer staged;
    const int32_t* on_gpu = device_targets(targets, staged);
    const auto kernel =
        can_pack<S>(Vp, {logits.data}) ? cross_entropy_slice_rows<S, true> : cross_entropy_slice_rows<S, false>;
    kernel<<<static_cast<unsigned>(N), kRowThreads, 0, compute_stream()>>>(
        static_cast<T*>(losses.data), storage_ptr<S>(logits), static_cast<const T*>(all_stats.data),
        all_stats.dim(0), N, on_gpu, first_id, rows, Vp, ignore_index, with_gradient, static_cast<T>(loss_scale));
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
