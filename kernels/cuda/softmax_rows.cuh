// What the classifier kernels share (kernels/cuda/cross_entropy.cu and
// vocab_parallel_cross_entropy.cu): one block of kRowThreads per row of logits, the online
// softmax state each thread keeps over its share of a row and the block's merge of those
// states in a fixed order, the exact roundings the gradient uses, and the targets staged on the
// GPU. See cross_entropy.cu for the numerics.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

constexpr int kRowThreads = 512;
constexpr int kRowWarps = kRowThreads / 32;

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
  __shared__ T warp_m[kRowWarps], warp_s[kRowWarps];
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
    if (lane < kRowWarps) total = {warp_m[lane], warp_s[lane]};
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


// Every thread's share of row[0, V) added to a softmax state, 16-byte packs at a time when
// `vectorized`.
template <typename S, bool vectorized>
__device__ SoftmaxState<compute_t<S>> row_softmax_state(const S* row, int64_t V) {
  using T = compute_t<S>;
  using P = Pack<S, kPackWidth<S>>;
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
  return state;
}

// Writes gradient(v, x) over row[v] for v < V and zero over the padding [V, Vp).
template <typename S, bool vectorized, typename Gradient>
__device__ void write_row_gradient(S* row, int64_t V, int64_t Vp, Gradient gradient) {
  using T = compute_t<S>;
  using P = Pack<S, kPackWidth<S>>;
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

// The targets on the GPU: the tensor itself, or a copy in `staged` (the data loader's batch may
// be in host memory).
inline const int32_t* device_targets(const Tensor& targets, Buffer& staged) {
  if (targets.device == Device::cuda) return static_cast<const int32_t*>(targets.data);
  staged = Buffer(targets.bytes(), MemTag::workspace, Device::cuda, /*zero=*/false);
  copy_bytes(staged.data(), Device::cuda, targets.data, targets.device, targets.bytes());
  return static_cast<const int32_t*>(staged.data());
}

}  // namespace dt::kernels::cuda
