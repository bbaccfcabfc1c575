// Sums over the threads of one block, in a fixed order, for the one-block-per-row kernels
// (layernorm.cu, rmsnorm.cu): the bits depend on the block size alone, never on timing.
//
// reduce.cu's block_sum is a different tree (shuffles down, result in thread 0) on purpose: its
// order is the one sum_of_squares documents, so it stays there.
#pragma once

namespace dt::kernels::cuda {

// The sum of v over the block (a multiple of 32 threads), the same value in every thread:
// a butterfly within each warp, then the warps' sums in warp order. warp_sums: 32 shared slots.
template <typename T>
__device__ T block_sum(T v, T* warp_sums) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warp_sums[w];
  __syncthreads();  // the slots are reused by the next call
  return total;
}

}  // namespace dt::kernels::cuda
