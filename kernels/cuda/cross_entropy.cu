// The fused classifier on the GPU (kernels/cross_entropy.h): log-softmax, the loss and, with
// forward_backward, the logits' gradient written over the logits, one block per row.
//
// A row is read once to find its maximum and its sum of exponentials together (the online
// softmax: each thread keeps a running maximum m and a sum s of exp(x - m), rescaling s when m
// grows; the block then merges the threads' (m, s) pairs in a fixed tree). With the gradient
// the row is read a second time and each element replaced by
//   loss_scale * exp(x - max) / sum   (minus loss_scale at the target),   0 for v >= V,
// so the (N, Vp) gradient needs no buffer of its own, and V-wide rows (50257 for GPT-2,
// 128256 for Llama 3) cost two reads and one write of the logits rather than the CPU's three
// passes. Rows are read as 16-byte vectors (8 bf16/f16, 4 f32, 2 f64) when the logits start
// at a 16-byte boundary and Vp keeps every row there (Vp is padded to a multiple of 64 or
// 128 in practice); otherwise element by element.
//
// Numerics follow kernels/cpu/cross_entropy.cpp: 16-bit logits are loaded exactly, the row is
// computed in f32 (f64 for f64 logits), the gradient is exp(x - max) * (loss_scale / sum),
// minus loss_scale at the target, rounded once into the logits' storage. The sums differ from
// the CPU's only in their order (and the online rescaling), a few ulps of the sum.
// Deterministic: every reduction has a fixed order, no atomics.
//
// Ignored rows (target == ignore_index) get loss 0 and, with the gradient, a zero row. A target
// outside [0, V) that is not the ignore index cannot happen after the dispatch's checks; were
// one to reach the kernel it would get a NaN loss and a NaN gradient row instead of an
// out-of-bounds read, so the loss scaler's all_finite check stops the step.
#include <cstdint>
#include <limits>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/softmax_rows.cuh"

namespace dt::kernels::cuda {

namespace {

// One block per row n. `loss_scale` null: forward only.
template <typename S, bool vectorized>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_rows(compute_t<S>* __restrict__ losses, S* __restrict__ logits, const int32_t* __restrict__ targets,
                       int64_t V, int64_t Vp, int32_t ignore_index, bool with_gradient, compute_t<S> loss_scale) {
  using T = compute_t<S>;
  const int64_t n = blockIdx.x;
  S* row = logits + n * Vp;
  const int32_t target = targets[n];

  if (target == ignore_index || target < 0 || target >= V) {
    const T value = target == ignore_index ? T{0} : std::numeric_limits<T>::quiet_NaN();
    if (threadIdx.x == 0) losses[n] = value;
    if (with_gradient) fill_row<S, vectorized>(row, Vp, value);
    return;
  }

  // Read before any thread overwrites the row.
  const T target_logit = threadIdx.x == 0 ? load(row[target]) : T{0};

  const SoftmaxState<T> total = block_merge(row_softmax_state<S, vectorized>(row, V));  // the row is read

  if (threadIdx.x == 0) losses[n] = log_of(total.s) + total.m - target_logit;
  if (!with_gradient) return;

  const T factor = loss_scale / total.s;
  // The gradient of column v < V from its logit x.
  const auto gradient = [&](int64_t v, T x) -> T {
    const T e = exp_of(x - total.m);
    return v == target ? mul_sub_rn(e, factor, loss_scale) : mul_rn(e, factor);
  };
  write_row_gradient<S, vectorized>(row, V, Vp, gradient);
}

template <typename S>
void launch(Tensor losses, Tensor logits, Tensor targets, int64_t V, int32_t ignore_index, const float* loss_scale) {
  using T = compute_t<S>;
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  if (N == 0) return;
  Buffer staged;
  const int32_t* on_gpu = device_targets(targets, staged);
  const bool vectorized = can_pack<S>(Vp, {logits.data});
  const T scale = loss_scale ? static_cast<T>(*loss_scale) : T{0};
  const auto kernel = vectorized ? cross_entropy_rows<S, true> : cross_entropy_rows<S, false>;
  kernel<<<static_cast<unsigned>(N), kRowThreads, 0, compute_stream()>>>(
      static_cast<T*>(losses.data), storage_ptr<S>(logits), on_gpu, V, Vp, ignore_index, loss_scale != nullptr, scale);
  DT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size, int32_t ignore_index) {
  dispatch_storage(logits.dtype,
                   [&]<typename S>() { launch<S>(losses, logits, targets, vocab_size, ignore_index, nullptr); });
}

void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index) {
  dispatch_storage(logits.dtype,
                   [&]<typename S>() { launch<S>(losses, logits, targets, vocab_size, ignore_index, &loss_scale); });
}

}  // namespace dt::kernels::cuda
