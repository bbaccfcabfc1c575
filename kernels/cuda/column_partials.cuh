// Deterministic column sums over many rows, without atomics, so a gradient summed over N rows
// repeats bit for bit: the layernorm and rmsnorm weight (and bias) gradients, and the column
// sums of linear.cu's bias gradient.
//
// The norm backwards walk their rows once per block and keep per-column partials in registers
// (kernels/cuda/row_packs.cuh says why; layernorm.cu's header why the rows are cut so):
//
//   kernel, block k of G = row_blocks(N):
//     T part[Count][P][V] = {};                          // e.g. dweight, dbias
//     for (n in block_row_range(N)) part[a][i][j] += ... for the thread's own pack i, column j;
//     store_column_partials(partials, part, C);          // partials: (G, Count, C)
//   host, per gradient a:
//     add_column_partials(dweight, partials + a * C, G, C, Count * C);   // dweight += sum over k
//
// A thread owns the V columns of each of its packs (row_packs.cuh), so no two threads touch one
// partial.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/row_packs.cuh"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

// Row ranges of the norm backwards: a function of N alone, so the bits do not depend on the
// device.
constexpr int64_t kMaxRowBlocks = 1024;

inline int64_t row_blocks(int64_t N) { return std::min(N, kMaxRowBlocks); }

struct RowRange {
  int64_t begin, end;
};

// Block blockIdx.x's rows of N: the same split as kernels/cpu/float_type.h's split_range,
// N / G rows each, one more for the first N % G blocks (G = gridDim.x).
__device__ __forceinline__ RowRange block_row_range(int64_t N) {
  const int64_t G = gridDim.x, base = N / G, extra = N % G, k = blockIdx.x;
  const int64_t begin = k * base + std::min(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

// partials[blockIdx.x] (Count, C) = this thread's partials: part[a][i] holds gradient a's
// columns of the thread's pack i.
template <int Count, int P, int V, typename T>
__device__ __forceinline__ void store_column_partials(T* partials, const T (&part)[Count][P][V], int64_t C) {
  T* out = partials + blockIdx.x * int64_t{Count} * C;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t c = owned_pack(i) * V;
    if (c >= C) break;
#pragma unroll
    for (int a = 0; a < Count; ++a)
#pragma unroll
      for (int j = 0; j < V; ++j) out[a * C + c + j] = part[a][i][j];
  }
}

// A (kColumnSumColumns, kColumnSumLanes) block sums 32 columns over a range of rows.
constexpr int kColumnSumColumns = 32, kColumnSumLanes = 8;

// The sum over rows r in [begin, end) of x[r * stride + column], column < width, in a fixed
// order: lane y = threadIdx.y adds rows begin + y, begin + y + 8, ... (each load a coalesced
// 32-column row), then the lanes' sums are added in lane order. Valid in the threads with
// threadIdx.y == 0 and column < width (0 in the others); every thread of the block must call it.
template <typename T, typename X>
__device__ __forceinline__ T column_sum(const X* x, int64_t begin, int64_t end, int64_t stride, int64_t column,
                                        int64_t width) {
  __shared__ T lane_sums[kColumnSumLanes][kColumnSumColumns];
  T sum = 0;
  if (column < width)
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnSumLanes) sum += load(x[r * stride + column]);
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  T total = 0;
  if (threadIdx.y == 0 && column < width)
    for (int lane = 0; lane < kColumnSumLanes; ++lane) total += lane_sums[lane][threadIdx.x];
  return total;
}

// out[c] += sum over k < blocks of partials[k * stride + c], in column_sum's order.
template <typename T>
__global__ void add_column_partials_kernel(T* out, const T* partials, int64_t blocks, int64_t width, int64_t stride) {
  const int64_t c = blockIdx.x * int64_t{kColumnSumColumns} + threadIdx.x;
  const T total = column_sum<T>(partials, 0, blocks, stride, c, width);
  if (threadIdx.y == 0 && c < width) out[c] += total;
}

// out (width) += the `blocks` partial rows, stride apart, on the compute stream.
template <typename T>
void add_column_partials(T* out, const T* partials, int64_t blocks, int64_t width, int64_t stride) {
  const dim3 threads(kColumnSumColumns, kColumnSumLanes);
  const auto grid = static_cast<unsigned>((width + kColumnSumColumns - 1) / kColumnSumColumns);
  add_column_partials_kernel<T><<<grid, threads, 0, compute_stream()>>>(out, partials, blocks, width, stride);
  DT_CUDA_CHECK_LAUNCH();
}

}  // namespace dt::kernels::cuda
