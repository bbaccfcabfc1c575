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
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

template <typename T>
__device__ __forceinline__ T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return expf(x);
  else
    return exp(x);
}
template <typename T>
__device__ __forceinline__ T log_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return logf(x);
  else
    return log(x);
}
// a * b - c with both roundings, never contracted into a fused multiply-add (the CPU rounds
// the product first).
template <typename T>
__device__ __forceinline__ T mul_sub_rn(T a, T b, T c) {
  if constexpr (std::is_same_v<T, float>)
    return __fsub_rn(__fmul_rn(a, b), c);
  else
    return __dsub_rn(__dmul_rn(a, b), c);
}
template <typename T>
__device__ __forceinline__ T mul_rn(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
}

// The running maximum m of the values seen and s = sum of exp(x - m) over them.
template <typename T>
struct SoftmaxState {
  T m = -std::numeric_limits<T>::infinity();
  T s = 0;

  // Adds `count` values: one rescale at most for the group.
  __device__ __forceinline__ void add(const T* x, int count) {
    // A NaN logit must make the loss NaN, as on the CPU: fmax would drop it, so the max
    // propagates NaN and the comparison lets it through.
    T group_max = x[0];
    for (int i = 1; i < count; ++i) group_max = (x[i] > group_max || x[i] != x[i]) ? x[i] : group_max;
    if (!(group_max <= m)) {
      s *= exp_of(m - group_max);  // s = 0 while m = -inf: 0 * exp(-inf) = 0
      m = group_max;
    }
    if (m == -std::numeric_limits<T>::infinity()) return;  // every value so far is -inf
    for (int i = 0; i < count; ++i) s += exp_of(x[i] - m);
  }

  __device__ __forceinline__ void merge(T other_m, T other_s) {
    const T new_m = fmax(m, other_m);
    if (new_m == -std::numeric_limits<T>::infinity()) return;  // both empty
    s = s * exp_of(m - new_m) + other_s * exp_of(other_m - new_m);
    m = new_m;
  }
};

// The block's (max, sum) in a fixed merge order, returned to every thread.
template <typename T>
__device__ SoftmaxState<T> block_merge(SoftmaxState<T> state) {
  __shared__ T warp_m[kWarps], warp_s[kWarps];
  __shared__ T block_m, block_s;
  for (int offset = 16; offset > 0; offset /= 2)
    state.merge(__shfl_down_sync(0xffffffffu, state.m, offset), __shfl_down_sync(0xffffffffu, state.s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = state.m;
    warp_s[warp] = state.s;
  }
  __syncthreads();
  if (warp == 0) {
    SoftmaxState<T> total;
    if (lane < kWarps) total = {warp_m[lane], warp_s[lane]};
    for (int offset = 16; offset > 0; offset /= 2)
      total.merge(__shfl_down_sync(0xffffffffu, total.m, offset), __shfl_down_sync(0xffffffffu, total.s, offset));
    if (lane == 0) {
      block_m = total.m;
      block_s = total.s;
    }
  }
  __syncthreads();
  return {block_m, block_s};
}

// Writes `value` (zero or NaN) over row[0, Vp).
template <typename S, bool vectorized>
__device__ void fill_row(S* row, int64_t Vp, compute_t<S> value) {
  if constexpr (vectorized) {
    using P = Pack<S, kPackWidth<S>>;
    P pack;
    for (int k = 0; k < P::width; ++k) store(&pack.v[k], value);
    P* rp = reinterpret_cast<P*>(row);
    for (int64_t i = threadIdx.x; i < Vp / P::width; i += blockDim.x) rp[i] = pack;
  } else {
    for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) store(row + v, value);
  }
}

// One block per row n. `loss_scale` null: forward only.
template <typename S, bool vectorized>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows(compute_t<S>* __restrict__ losses, S* __restrict__ logits, const int32_t* __restrict__ targets,
                       int64_t V, int64_t Vp, int32_t ignore_index, bool with_gradient, compute_t<S> loss_scale) {
  using T = compute_t<S>;
  using P = Pack<S, kPackWidth<S>>;
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

  SoftmaxState<T> state;
  int64_t tail_begin = 0;
  if constexpr (vectorized) {
    const P* rp = reinterpret_cast<const P*>(row);
    const int64_t packs = V / P::width;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const P pack = rp[i];
      T x[P::width];
      for (int k = 0; k < P::width; ++k) x[k] = load(pack.v[k]);
      state.add(x, P::width);
    }
    tail_begin = packs * P::width;
  }
  for (int64_t v = tail_begin + threadIdx.x; v < V; v += blockDim.x) {
    const T x = load(row[v]);
    state.add(&x, 1);
  }
  const SoftmaxState<T> total = block_merge(state);  // synchronizes: the row is read

  if (threadIdx.x == 0) losses[n] = log_of(total.s) + total.m - target_logit;
  if (!with_gradient) return;

  const T factor = loss_scale / total.s;
  // The gradient of column v < V from its logit x.
  const auto gradient = [&](int64_t v, T x) -> T {
    const T e = exp_of(x - total.m);
    return v == target ? mul_sub_rn(e, factor, loss_scale) : mul_rn(e, factor);
  };
  if constexpr (vectorized) {
    P* rp = reinterpret_cast<P*>(row);
    for (int64_t i = threadIdx.x; i < Vp / P::width; i += blockDim.x) {
      P pack = rp[i];
      for (int k = 0; k < P::width; ++k) {
        const int64_t v = i * P::width + k;
        store(&pack.v[k], v < V ? gradient(v, load(pack.v[k])) : T{0});
      }
      rp[i] = pack;
    }
  } else {
    for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) store(row + v, v < V ? gradient(v, load(row[v])) : T{0});
  }
}

template <typename S>
void launch(Tensor losses, Tensor logits, Tensor targets, int64_t V, int32_t ignore_index, const float* loss_scale) {
  using T = compute_t<S>;
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  if (N == 0) return;
  // Targets may come from the host (the data loader's batch); the kernel reads them on the GPU.
  Buffer staged;
  const int32_t* device_targets = static_cast<const int32_t*>(targets.data);
  if (targets.device != Device::cuda) {
    staged = Buffer(targets.bytes(), MemTag::workspace, Device::cuda, /*zero=*/false);
    copy_bytes(staged.data(), Device::cuda, targets.data, targets.device, targets.bytes());
    device_targets = static_cast<const int32_t*>(staged.data());
  }
  const bool vectorized = can_pack<S>(Vp, {logits.data});
  const T scale = loss_scale ? static_cast<T>(*loss_scale) : T{0};
  const auto kernel = vectorized ? cross_entropy_rows<S, true> : cross_entropy_rows<S, false>;
  kernel<<<static_cast<unsigned>(N), kThreads, 0, compute_stream()>>>(static_cast<T*>(losses.data),
                                                                      storage_ptr<S>(logits), device_targets, V, Vp,
                                                                      ignore_index, loss_scale != nullptr, scale);
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
