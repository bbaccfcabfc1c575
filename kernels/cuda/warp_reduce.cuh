// Reductions over the 32 lanes of a warp by butterfly: every lane ends with the result, and the
// order of the additions depends on nothing but the values' lanes, so results repeat bit for bit
// (the mixture-of-experts kernels, one warp per token row).
#pragma once

namespace dt::kernels::cuda {

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace dt::kernels::cuda
