// swiglu_forward and swiglu_backward (kernels/swiglu.h) on the GPU.
//
// Elementwise over the (N, F) output with the gate and up halves of each (N, 2F) input row read
// at the same column: memory bound, so each thread moves 16-byte packs (4 f32, 2 f64, 8
// bf16/f16) when F is a multiple of the pack width and the pointers are 16-byte aligned, else
// single elements; a grid-stride loop over one wave of blocks (kernels/cuda/elementwise.cuh's
// grid) covers any size. Not elementwise_map itself: the inputs are the two halves of a wider
// row, and the backward writes two outputs. The header forbids out/inp and dinp/inp,dout
// overlap, so no ordering between threads is needed.
//
// The math is the CPU's in f32 (f64 for f64), 16-bit values widened exactly and rounded once
// when stored. The sigmoid's exponential differs (the CPU's Cephes expf against CUDA's expf,
// each within 2 ulp), so results agree to a few f32 ulps, not bit for bit.
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/swiglu.h"

namespace dt::kernels::cuda {

namespace {

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

template <typename T>
__device__ __forceinline__ T sigmoid(T x) {
  return T{1} / (T{1} + exp_of(-x));
}

// Pack p of row n of an (N, width) tensor stored as S, V elements per pack.
template <typename S, int V>
__device__ __forceinline__ Pack<S, V>* pack_at(S* base, int64_t width, int64_t n, int64_t p) {
  return reinterpret_cast<Pack<S, V>*>(base + n * width) + p;
}
template <typename S, int V>
__device__ __forceinline__ const Pack<S, V>* pack_at(const S* base, int64_t width, int64_t n, int64_t p) {
  return reinterpret_cast<const Pack<S, V>*>(base + n * width) + p;
}

// out[n, f] = silu(gate[n, f]) * up[n, f] for the pack (n, p) of each thread.
template <typename S, int V>
__global__ void forward_kernel(S* out, const S* inp, int64_t N, int64_t F) {
  using T = compute_t<S>;
  const int64_t packs_per_row = F / V, total = N * packs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs_per_row, p = i % packs_per_row;
    const Pack<S, V> gate = *pack_at<S, V>(inp, 2 * F, n, p);
    const Pack<S, V> up = *pack_at<S, V>(inp + F, 2 * F, n, p);
    Pack<S, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const T g = load(gate.v[k]);
      store(&o.v[k], g * sigmoid(g) * load(up.v[k]));
    }
    *pack_at<S, V>(out, F, n, p) = o;
  }
}

// dgate = dout * up * silu'(gate), dup = dout * silu(gate), silu'(g) = s (1 + g (1 - s)).
template <typename S, int V>
__global__ void backward_kernel(S* dinp, const S* dout, const S* inp, int64_t N, int64_t F) {
  using T = compute_t<S>;
  const int64_t packs_per_row = F / V, total = N * packs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs_per_row, p = i % packs_per_row;
    const Pack<S, V> gate = *pack_at<S, V>(inp, 2 * F, n, p);
    const Pack<S, V> up = *pack_at<S, V>(inp + F, 2 * F, n, p);
    const Pack<S, V> dy = *pack_at<S, V>(dout, F, n, p);
    Pack<S, V> dgate, dup;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const T g = load(gate.v[k]), u = load(up.v[k]), d = load(dy.v[k]), s = sigmoid(g);
      store(&dgate.v[k], d * u * s * (T{1} + g * (T{1} - s)));
      store(&dup.v[k], d * g * s);
    }
    *pack_at<S, V>(dinp, 2 * F, n, p) = dgate;
    *pack_at<S, V>(dinp + F, 2 * F, n, p) = dup;
  }
}

}  // namespace

void swiglu_forward(Tensor out, Tensor inp) {
  const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
  if (N == 0) return;
  dispatch_storage(inp.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(out);
    const S* x = storage_ptr<S>(inp);
    if (can_pack<S>(F, {o, x})) {
      constexpr int V = kPackWidth<S>;
      forward_kernel<S, V><<<one_wave_grid(N * (F / V)), kElementwiseThreads, 0, compute_stream()>>>(o, x, N, F);
    } else {
      forward_kernel<S, 1><<<one_wave_grid(N * F), kElementwiseThreads, 0, compute_stream()>>>(o, x, N, F);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
  if (N == 0) return;
  dispatch_storage(inp.dtype, [&]<typename S>() {
    S* dx = storage_ptr<S>(dinp);
    const S *dy = storage_ptr<S>(dout), *x = storage_ptr<S>(inp);
    if (can_pack<S>(F, {dx, dy, x})) {
      constexpr int V = kPackWidth<S>;
      backward_kernel<S, V><<<one_wave_grid(N * (F / V)), kElementwiseThreads, 0, compute_stream()>>>(dx, dy, x, N,
                                                                                                       F);
    } else {
      backward_kernel<S, 1><<<one_wave_grid(N * F), kElementwiseThreads, 0, compute_stream()>>>(dx, dy, x, N, F);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
