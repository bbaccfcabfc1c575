// Sums over rows (the weight gradients of the norms, the gradient norm's sum of squares) with
// the same bits for every thread count.
//
// The N rows are cut into row_blocks(N) = min(N, 256) contiguous blocks, a number that depends
// on N alone; each block is summed in row order into its own partial, and the partials are
// added in block order. Per-thread partials would change with the thread count. 256 blocks
// keep 16 or 32 threads evenly loaded and the partials at 256 rows (2 MiB of f32 for
// C = 2048).
#pragma once

#include <algorithm>
#include <cstdint>

namespace dt::kernels::cpu {

constexpr int64_t kMaxRowBlocks = 256;

inline int64_t row_blocks(int64_t rows) { return std::min(rows, kMaxRowBlocks); }

// The elements of the partials of `sums` sums of `width` columns over `rows` rows (a norm
// backward's: 1 for RMSNorm's dweight, 2 for LayerNorm's dweight and dbias), allocated per call;
// plan/memory.h counts them.
inline int64_t block_partial_elements(int64_t rows, int64_t width, int sums) {
  return row_blocks(rows) * sums * width;
}

// out[c] += sum over blocks k, in order, of partials[k * stride + c], for c < width.
template <typename T>
void add_block_partials(T* out, const T* partials, int64_t blocks, int64_t width, int64_t stride) {
  // Columns reduced together: a 64-element accumulator stays in registers.
  constexpr int64_t kColumnBlock = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < width; c0 += kColumnBlock) {
    const int64_t n = std::min(kColumnBlock, width - c0);
    T total[kColumnBlock] = {};
    for (int64_t k = 0; k < blocks; ++k) {
      const T* p = partials + k * stride + c0;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) total[j] += p[j];
    }
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[c0 + j] += total[j];
  }
}

}  // namespace dt::kernels::cpu
