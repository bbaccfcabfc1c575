// How the one-block-per-row norm kernels (kernels/cuda/layernorm.cu and rmsnorm.cu) hold a row:
// thread t of the block owns packs t, t + blockDim.x, t + 2 * blockDim.x, ... of it, at most P,
// and keeps them in registers between the passes over the row, so each element is read from
// memory once. The backward keeps its weight-gradient partials for the same columns in
// registers too: shared-memory partials, one thread's V consecutive columns each, put the lanes
// of a warp V banks apart and serialized every update (an H100 profile had RMSNorm's backward at
// a quarter of its memory roofline).
//
// The blocks have row_threads(packs / P) threads: at most 512, as before packs were held, so a
// thread owns the packs it looped over then and the row sums run in the same order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"

namespace dt::kernels::cuda {

// The most threads a row's block has. The kernels declare it as their launch bound, so that
// the compiler keeps them within the registers 512 threads may use (spilling the widest rows'
// packs) and every block can launch.
constexpr int kMaxRowThreads = 512;

// Threads for rows of `packs` packs: a multiple of 32 (as block_sum needs), at most 512.
inline unsigned row_threads(int64_t packs) {
  return static_cast<unsigned>(std::clamp<int64_t>((packs + 31) / 32 * 32, 32, kMaxRowThreads));
}

// The most packs a thread holds: 8 of 16 bytes with 512 threads is a row of 32,768 bf16 or 16,384
// f32 columns, twice Llama 3 405B's width.
constexpr int kMaxPacksPerThread = 8;

// Pack i of this thread's P: its index in the row.
__device__ __forceinline__ int64_t owned_pack(int i) { return threadIdx.x + int64_t{i} * blockDim.x; }

// Calls fn(std::integral_constant<int, P>{}) with P the packs each of row_threads(packs)
// threads holds (1, 2, 4 or 8); a row wider than that is refused, naming `op`.
template <typename Fn>
void with_packs_per_thread(int64_t packs, int64_t C, const char* op, Fn&& fn) {
  const int64_t threads = row_threads(packs), needed = (packs + threads - 1) / threads;
  if (needed > kMaxPacksPerThread)
    throw Error(str(op, ": rows of C = ", C, " columns are wider than the ", kMaxPacksPerThread * threads,
                    " packs of ", packs == C ? "1 element" : "16 bytes",
                    " a block of the norm kernels holds; use a model width of at most that many packs"));
  if (needed <= 1) return fn(std::integral_constant<int, 1>{});
  if (needed <= 2) return fn(std::integral_constant<int, 2>{});
  if (needed <= 4) return fn(std::integral_constant<int, 4>{});
  return fn(std::integral_constant<int, 8>{});
}

}  // namespace dt::kernels::cuda
