// Reductions for the optimizer on the GPU (kernels/reduce.h): the sum of squares behind the
// global gradient norm, and the fp16 loss scaler's all-finite check.
//
// sum_of_squares is a deterministic two-pass reduction over ranges of a flat buffer (one range
// for a whole tensor, every parameter's range for the global gradient norm), so the norm, and
// with it clipping, repeats bit for bit (issue 6's deterministic mode; no floating-point
// atomics):
//   pass 1: per launch of up to kRangesPerLaunch ranges (kernels/cuda/flat_ranges.cuh), a grid
//           whose size depends on the ranges alone, never on the GPU's SM count; each thread
//           accumulates x^2 in double over a grid-stride loop of quads (four elements, one
//           16-byte load of f32 when aligned), the block adds its threads' sums in a fixed
//           tree (warp shuffles, then one warp over the warp sums) into partials[block];
//   pass 2: one block adds all launches' partials in the same fixed tree; the double is copied
//           to the host: one read-back, one synchronization, for the whole model.
// Accumulating in double as the CPU does makes the result agree with it up to the order of
// the additions (relative 1e-15 for any gradient size).
//
// all_finite needs no order at all: any thread that sees an inf or NaN stores 1 into one flag
// (every writer stores the same value, so the race is benign and the answer deterministic).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cuda/flat_ranges.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/reduce.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = 256;          // per block, both passes
constexpr int kMaxBlocks = 1024;       // pass 1's grid at most: ~8 blocks per SM on an H100
constexpr int kWarps = kThreads / 32;

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

// Pass 1: partials[blockIdx.x] = sum of x^2 over this block's grid-stride share of the quads.
// With `vectorized` (f32, aligned), a full quad is one float4.
template <typename T, bool vectorized>
__global__ void sum_of_squares_partials(const T* __restrict__ x, const RangeTable ranges,
                                        double* __restrict__ partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, quads = ranges.quads();
  double sum = 0;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const Quad quad = find_quad(ranges, q);
    if constexpr (vectorized) {
      if (quad.count == 4) {
        const float4 v = *reinterpret_cast<const float4*>(x + quad.first);
        const double a = v.x, b = v.y, c = v.z, d = v.w;
        sum += a * a + b * b + c * c + d * d;
        continue;
      }
    }
    for (int k = 0; k < quad.count; ++k) {
      const double v = x[quad.first + k];
      sum += v * v;
    }
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

// Blocks for n items: enough to cover them, at most kMaxBlocks.
int grid_for(int64_t n) {
  const int64_t needed = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, kMaxBlocks)));
}

template <typename T>
double sum_of_squares_impl(const Tensor& flat, std::span<const FlatRange> ranges) {
  const T* x = static_cast<const T*>(flat.data);
  const std::vector<RangeTable> tables = range_tables(ranges);
  std::vector<int> grids;
  int blocks = 0;
  for (const RangeTable& t : tables) blocks += grids.emplace_back(grid_for(t.quads()));
  // partials[0, blocks) of all launches, and the result after them.
  Buffer scratch((blocks + 1) * sizeof(double), MemTag::workspace, Device::cuda, /*zero=*/false);
  double* partials = static_cast<double*>(scratch.data());
  double* result = partials + blocks;
  constexpr bool float4_loads = std::is_same_v<T, float>;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (float4_loads && aligned_16(x) && tables[i].quads_aligned)
      sum_of_squares_partials<T, float4_loads><<<grids[i], kThreads, 0, compute_stream()>>>(x, tables[i], partials);
    else
      sum_of_squares_partials<T, false><<<grids[i], kThreads, 0, compute_stream()>>>(x, tables[i], partials);
    DT_CUDA_CHECK_LAUNCH();
    partials += grids[i];
  }
  sum_partials<<<1, kThreads, 0, compute_stream()>>>(static_cast<double*>(scratch.data()), blocks, result);
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
  find_nonfinite<T><<<grid_for(n), kThreads, 0, compute_stream()>>>(static_cast<const T*>(x.data), n,
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

double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges) {
  return dispatch_float(flat, "sum_of_squares", [&]<typename T>() { return sum_of_squares_impl<T>(flat, ranges); });
}

bool all_finite(Tensor x) {
  return dispatch_float(x, "all_finite", [&]<typename T>() { return all_finite_impl<T>(x); });
}

}  // namespace dt::kernels::cuda
