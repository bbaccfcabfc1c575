// rope_forward and rope_backward (kernels/rope.h) on the GPU; rope_table stays on the host.
//
// Each thread rotates one pack of pairs (element i with i + HS/2) of one query or key head at one
// position, in place: memory bound, so the pairs move as 16-byte packs (4 f32, 2 f64, 8
// bf16/f16) when HS/2 is a multiple of the pack width and qkv is 16-byte aligned, else one pair
// at a time; a grid-stride loop over one wave of blocks (kernels/cuda/elementwise.cuh's grid).
// The value heads are never read or written. Threads touch disjoint pairs, so the in-place update
// needs no ordering.
//
// The math is the CPU's: a * c - b * s and b * c + a * s in f32 (f64 for f64) with the table's
// f32 angles, 16-bit values widened exactly and rounded once when stored; the backward is the
// same rotation with s negated.
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/rope.h"

namespace dt::kernels::cuda {

namespace {

// qkv (N = B*T rows of W = (NH + 2*NKV) * HS): the first `rotated` = NH + NKV heads of each row
// rotated by the angles of position t = n % T. direction +1 forward, -1 backward.
template <typename S, int V>
__global__ void rotate_kernel(S* qkv, const compute_t<S>* cos_table, const compute_t<S>* sin_table, int64_t N,
                              int64_t T_len, int64_t W, int64_t HS, int64_t rotated, compute_t<S> direction) {
  using T = compute_t<S>;
  using P = Pack<S, V>;
  const int64_t half = HS / 2, packs_per_head = half / V, total = N * rotated * packs_per_head;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx % packs_per_head, h = idx / packs_per_head % rotated, n = idx / (packs_per_head * rotated);
    const int64_t t = n % T_len;  // the position within its sequence, not the row
    S* lo = qkv + n * W + h * HS + p * V;
    S* hi = lo + half;
    const P a = *reinterpret_cast<const P*>(lo), b = *reinterpret_cast<const P*>(hi);
    const T* c = cos_table + t * half + p * V;
    const T* s = sin_table + t * half + p * V;
    P new_lo, new_hi;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const T x = load(a.v[k]), y = load(b.v[k]), si = direction * s[k];
      store(&new_lo.v[k], x * c[k] - y * si);
      store(&new_hi.v[k], y * c[k] + x * si);
    }
    *reinterpret_cast<P*>(lo) = new_lo;
    *reinterpret_cast<P*>(hi) = new_hi;
  }
}

void rotate(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head, double direction) {
  const int64_t B = qkv.dim(0), T_len = qkv.dim(1), W = qkv.dim(2), N = B * T_len;
  const int64_t HS = W / (n_head + 2 * int64_t{n_kv_head}), half = HS / 2, rotated = n_head + int64_t{n_kv_head};
  if (N == 0 || half == 0) return;
  dispatch_storage(qkv.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* x = storage_ptr<S>(qkv);
    const T *c = static_cast<const T*>(cos.data), *s = static_cast<const T*>(sin.data);
    const auto d = static_cast<T>(direction);
    constexpr int V = kPackWidth<S>;
    if (can_pack<S>(half, {x})) {
      const unsigned blocks = one_wave_grid(N * rotated * (half / V));
      rotate_kernel<S, V><<<blocks, kElementwiseThreads, 0, compute_stream()>>>(x, c, s, N, T_len, W, HS, rotated, d);
    } else {
      const unsigned blocks = one_wave_grid(N * rotated * half);
      rotate_kernel<S, 1><<<blocks, kElementwiseThreads, 0, compute_stream()>>>(x, c, s, N, T_len, W, HS, rotated, d);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  rotate(qkv, cos, sin, n_head, n_kv_head, 1);
}

void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  rotate(dqkv, cos, sin, n_head, n_kv_head, -1);
}

}  // namespace dt::kernels::cuda
