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

#include "core/error.h"
#include "kernels/cuda/storage.cuh"

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

// Calls fn.template operator()<V, P>() with V the elements of S a pack holds (kPackWidth<S>
// where `packed`, else 1) and P the packs each of row_threads(C / V) threads holds for rows of
// C (1, 2, 4 or 8); a row wider than that is refused, naming `op`.
template <typename S, typename Fn>
void with_row_layout(int64_t C, bool packed, const char* op, Fn&& fn) {
  const int V = packed ? kPackWidth<S> : 1;
  const int64_t packs = C / V, threads = row_threads(packs), needed = (packs + threads - 1) / threads;
  if (needed > kMaxPacksPerThread)
    throw Error(str(op, ": rows of C = ", C, " columns are wider than the ", kMaxPacksPerThread * threads,
                    " packs of ", V == 1 ? "1 element" : "16 bytes",
                    " a block of the norm kernels holds; use a model width of at most that many packs"));
  const auto with_v = [&]<int P>() {
    if (packed) return fn.template operator()<kPackWidth<S>, P>();
    fn.template operator()<1, P>();
  };
  if (needed <= 1) return with_v.template operator()<1>();
  if (needed <= 2) return with_v.template operator()<2>();
  if (needed <= 4) return with_v.template operator()<4>();
  with_v.template operator()<8>();
}

}  // namespace dt::kernels::cuda
