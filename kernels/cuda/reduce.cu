// Reductions for the optimizer on the GPU (kernels/reduce.h): the sum of squares behind the
// global gradient norm, and the fp16 loss scaler's all-finite check.
//
// sum_of_squares is a deterministic two-pass reduction, so the gradient norm, and with it
// clipping, repeats bit for bit (issue 6's deterministic mode; no floating-point atomics):
//   pass 1: a grid whose size depends on n and on whether x is 16-byte aligned (the packed or
//           the scalar mapping), never on the GPU's SM count, so the bits repeat for a given
//           buffer layout on any GPU; each thread accumulates x^2 in double over a
//           grid-stride loop, the block adds its threads' sums in a fixed tree (warp shuffles,
//           then one warp over the warp sums) into partials[block];
//   pass 2: one block adds the partials in the same fixed tree; the double is copied to the
//           host.
// Accumulating in double as the CPU does makes the result agree with it up to the order of
// the additions (relative 1e-15 for any gradient size). The loads are 16-byte vectors
// (float4, double2) when the tensor's start allows it: gradient views into the flat buffer
// start wherever the previous parameter ended.
//
// all_finite needs no order at all: any thread that sees an inf or NaN stores 1 into one flag
// (every writer stores the same value, so the race is benign and the answer deterministic).
#include <algorithm>
#include <cstdint>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/reduce.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = 256;          // per block, both passes
constexpr int kMaxBlocks = 1024;       // pass 1's grid at most: ~8 blocks per SM on an H100
constexpr int kWarps = kThreads / 32;

// 16-byte vector of T.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int width = 4;
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int width = 2;
};

__device__ __forceinline__ double squares(float4 v) {
  const double x = v.x, y = v.y, z = v.z, w = v.w;
  return x * x + y * y + z * z + w * w;
}
__device__ __forceinline__ double squares(double2 v) { return v.x * v.x + v.y * v.y; }

// The sum of `value` over the block, in a fixed order, valid in thread 0.
__device__ double block_sum(double value) {
  __shared__ double warp_sums[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  double total = 0;
  if (warp == 0) {
    total = lane < kWarps ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_down_sync(0xffffffffu, total, offset);
  }
  return total;
}

// Pass 1: partials[blockIdx.x] = sum of x^2 over this block's grid-stride share. With
// `vectorized`, elements [0, n - n % width) are read as 16-byte vectors and the tail as
// scalars.
template <typename T, bool vectorized>
__global__ void sum_of_squares_partials(const T* __restrict__ x, int64_t n, double* __restrict__ partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double sum = 0;
  int64_t scalar_begin = 0;
  if constexpr (vectorized) {
    using V = typename Vec16<T>::type;
    constexpr int width = Vec16<T>::width;
    const int64_t vectors = n / width;
    const V* xv = reinterpret_cast<const V*>(x);
    for (int64_t i = first; i < vectors; i += stride) sum += squares(xv[i]);
    scalar_begin = vectors * width;
  }
  for (int64_t i = scalar_begin + first; i < n; i += stride) {
    const double v = x[i];
    sum += v * v;
  }
  const double total = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2: *result = the partials' sum, one block, fixed order.
__global__ void sum_partials(const double* __restrict__ partials, int count, double* __restrict__ result) {
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) *result = total;
}

template <typename T>
__global__ void find_nonfinite(const T* __restrict__ x, int64_t n, int* __restrict__ found) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    bad = bad || !isfinite(x[i]);
  // One store per warp at most; every writer stores 1.
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) *found = 1;
}

// Blocks for n elements read `width` at a time: enough to cover them, at most kMaxBlocks.
int grid_for(int64_t n, int width) {
  const int64_t needed = (n / width + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, kMaxBlocks)));
}

template <typename T>
double sum_of_squares_impl(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const T* p = static_cast<const T*>(x.data);
  const bool vectorized = aligned_16(p);
  const int blocks = grid_for(n, vectorized ? Vec16<T>::width : 1);
  // partials[0, blocks) and the result after them.
  Buffer scratch((blocks + 1) * sizeof(double), MemTag::workspace, Device::cuda, /*zero=*/false);
  double* partials = static_cast<double*>(scratch.data());
  double* result = partials + blocks;
  if (vectorized)
    sum_of_squares_partials<T, true><<<blocks, kThreads, 0, compute_stream()>>>(p, n, partials);
  else
    sum_of_squares_partials<T, false><<<blocks, kThreads, 0, compute_stream()>>>(p, n, partials);
  DT_CUDA_CHECK_LAUNCH();
  sum_partials<<<1, kThreads, 0, compute_stream()>>>(partials, blocks, result);
  DT_CUDA_CHECK_LAUNCH();
  double total = 0;
  copy_bytes(&total, Device::cpu, result, Device::cuda, sizeof(double));  // waits for the stream
  return total;
}

template <typename T>
bool all_finite_impl(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return true;
  Buffer found(sizeof(int), MemTag::workspace, Device::cuda, /*zero=*/true);
  find_nonfinite<T><<<grid_for(n, 1), kThreads, 0, compute_stream()>>>(static_cast<const T*>(x.data), n,
                                                                        static_cast<int*>(found.data()));
  DT_CUDA_CHECK_LAUNCH();
  int host_found = 0;
  copy_bytes(&host_found, Device::cpu, found.data(), Device::cuda, sizeof(int));
  return host_found == 0;
}

// The reductions take f32 and f64 (gradients and optimizer state), as on the CPU.
template <typename Fn>
auto dispatch_float(const Tensor& x, const char* op, Fn&& fn) {
  switch (x.dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    default:
      throw Error(str(op, ": x is ", x.describe(), "; the reductions take f32 or f64"));
  }
}

}  // namespace

double sum_of_squares(Tensor x) {
  return dispatch_float(x, "sum_of_squares", [&]<typename T>() { return sum_of_squares_impl<T>(x); });
}

bool all_finite(Tensor x) {
  return dispatch_float(x, "all_finite", [&]<typename T>() { return all_finite_impl<T>(x); });
}

}  // namespace dt::kernels::cuda
