// Element-wise maps on the GPU: the launch shape shared by the memory-bound kernels (add.cu,
// gelu.cu; swiglu.cu, rope.cu and embedding.cu use its grid).
//
// elementwise_map(out, a, b, n, op) sets out[i] = op(a[i], b[i]) for the n elements stored as
// S. Threads move 16-byte packs (4 f32, 2 f64, 8 bf16/f16; storage.cuh) when out, a and b are
// 16-byte aligned, and the n % width elements left over go element by element; a grid-stride
// loop over at most one wave of blocks covers any size. Each element is read and then written by
// the same thread, so out may alias a or b (in-place updates need no ordering). Runs on the
// compute stream.
//
// op is a device functor in the compute type T = compute_t<S>:
//
//   struct Op {
//     static constexpr int kInputs = 1;  // or 2; with 1, b is never read (pass nullptr)
//     template <typename T> __device__ T operator()(T x, T y) const;  // y is T{0} for 1 input
//   };
//
// Each value is widened exactly by load() and the result rounded once by store(), so a map's
// numerics are those of op alone.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

constexpr int kElementwiseThreads = 256;

// Blocks of kElementwiseThreads for `work` items, at most one full wave (2048 resident threads
// per SM on sm_80 and sm_90); the kernels' grid-stride loops cover the rest.
inline unsigned one_wave_grid(int64_t work) {
  const unsigned wave = static_cast<unsigned>(::dt::cuda::device_info().sm_count) * (2048 / kElementwiseThreads);
  return std::min(blocks_for(work, kElementwiseThreads), wave);
}

// out[i] = op(a[i], b[i]) (b unread for one-input ops), V elements per pack.
template <typename S, int V, typename Op>
__global__ void elementwise_map_kernel(S* out, const S* a, const S* b, int64_t n, Op op) {
  using P = Pack<S, V>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / V;
  for (int64_t i = first; i < packs; i += stride) {
    const P pa = reinterpret_cast<const P*>(a)[i];
    P pb{};
    if constexpr (Op::kInputs == 2) pb = reinterpret_cast<const P*>(b)[i];
    P po;
#pragma unroll
    for (int k = 0; k < V; ++k) store(&po.v[k], op(load(pa.v[k]), load(pb.v[k])));
    reinterpret_cast<P*>(out)[i] = po;
  }
  for (int64_t i = packs * V + first; i < n; i += stride) {
    compute_t<S> y{0};
    if constexpr (Op::kInputs == 2) y = load(b[i]);
    store(out + i, op(load(a[i]), y));
  }
}

template <typename S, typename Op>
void elementwise_map(S* out, const S* a, const S* b, int64_t n, Op op) {
  if (n == 0) return;
  const bool packed = aligned_16(out) && aligned_16(a) && (Op::kInputs == 1 || aligned_16(b));
  if (packed) {
    constexpr int V = kPackWidth<S>;
    // n < V still needs a block for the tail.
    const unsigned blocks = std::max(1u, one_wave_grid(n / V));
    elementwise_map_kernel<S, V><<<blocks, kElementwiseThreads, 0, compute_stream()>>>(out, a, b, n, op);
  } else {
    elementwise_map_kernel<S, 1><<<one_wave_grid(n), kElementwiseThreads, 0, compute_stream()>>>(out, a, b, n, op);
  }
  DT_CUDA_CHECK_LAUNCH();
}

}  // namespace dt::kernels::cuda
