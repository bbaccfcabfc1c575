// The sigmoid gate (kernels/sigmoid_gate.h) on the GPU: forward one thread per element, backward
// one warp per row (its lanes' partial sums, over columns lane, lane + 32, ..., added by a
// butterfly). Fixed orders: results repeat bit for bit.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/sigmoid_gate.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = kElementwiseThreads;

__device__ __forceinline__ float sigmoid_of(float z) { return 1.0f / (1.0f + expf(-z)); }
__device__ __forceinline__ double sigmoid_of(double z) { return 1.0 / (1.0 + exp(-z)); }
__device__ __forceinline__ float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_of(double a, double b, double c) { return fma(a, b, c); }

template <typename S>
__global__ void forward_kernel(S* out, const S* a, const S* h, const compute_t<S>* z, int64_t N, int64_t C) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out + i, fma_of(sigmoid_of(z[i / C]), load(h[i]), load(a[i])));
}

template <typename S>
__global__ void backward_kernel(S* dh, compute_t<S>* dz, const S* dout, const S* h, const compute_t<S>* z, int64_t N,
                                int64_t C) {
  using T = compute_t<S>;
  constexpr int kWarps = kThreads / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T s = sigmoid_of(z[n]);
    T dot = 0;
    for (int64_t c = lane; c < C; c += 32) {
      const T g = load(dout[n * C + c]);
      store(dh + n * C + c, s * g);
      dot = fma_of(g, load(h[n * C + c]), dot);
    }
    dot = warp_sum(dot);
    if (lane == 0) dz[n] = s * (T{1} - s) * dot;
  }
}

unsigned grid_for(int64_t work) { return std::max(1u, one_wave_grid(work)); }

}  // namespace

void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z) {
  const int64_t N = h.dim(0), C = h.dim(1);
  if (N * C == 0) return;
  dispatch_storage(h.dtype, [&]<typename S>() {
    forward_kernel<S><<<grid_for(N * C), kThreads, 0, compute_stream()>>>(
        storage_ptr<S>(out), storage_ptr<S>(a), storage_ptr<S>(h), static_cast<const compute_t<S>*>(z.data), N, C);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z) {
  const int64_t N = h.dim(0), C = h.dim(1);
  if (N == 0) return;
  dispatch_storage(h.dtype, [&]<typename S>() {
    backward_kernel<S><<<grid_for(N * 32), kThreads, 0, compute_stream()>>>(
        storage_ptr<S>(dh), static_cast<compute_t<S>*>(dz.data), storage_ptr<S>(dout), storage_ptr<S>(h),
        static_cast<const compute_t<S>*>(z.data), N, C);
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
