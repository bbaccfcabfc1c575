// The input rows of the norm forwards (kernels/cuda/layernorm.cu and rmsnorm.cu), which may be
// fused with the residual add before them (kernels/layernorm.h, add_layernorm_forward).
#pragma once

#include <cstdint>

#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

// Pack p of a row of a or b, which need not be 16-byte aligned where the rows the pack width
// was chosen for are: one vector load when `aligned`, else V element loads.
template <typename S, int V>
__device__ __forceinline__ Pack<S, V> load_pack_maybe_unaligned(const S* row, int64_t p, bool aligned) {
  if (aligned) return load_pack<S, V>(row, p);
  Pack<S, V> q;
#pragma unroll
  for (int k = 0; k < V; ++k) q.v[k] = row[p * V + k];
  return q;
}

// Pack p of the row a forward normalizes: x's, or with y (the fused residual add) res = x + y,
// computed as add_forward computes it (one add in compute_t<S>, rounded once by store) and
// stored into res; the stored pack is returned, so the caller sums the rounded values.
// res may be x or y, which is why none of them is __restrict__ and x and y are not read through
// the read-only cache (__ldg), which assumes no writes.
template <typename S, int V>
__device__ __forceinline__ Pack<S, V> input_pack(S* res, const S* x, const S* y, int64_t p, bool xy_aligned) {
  if (y == nullptr) return load_pack<S, V>(x, p);
  const Pack<S, V> xp = load_pack_maybe_unaligned<S, V>(x, p, xy_aligned),
                   yp = load_pack_maybe_unaligned<S, V>(y, p, xy_aligned);
  Pack<S, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) store(&r.v[k], load(xp.v[k]) + load(yp.v[k]));
  reinterpret_cast<Pack<S, V>*>(res)[p] = r;
  return r;
}

}  // namespace dt::kernels::cuda
