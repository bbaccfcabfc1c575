// AdamW on the GPU (kernels/adamw.h): one elementwise pass over param, grad, m and v, all f32.
//
// The step's scalars (bias corrections, decay factor, step size) are formed on the host in
// double and rounded to f32 exactly as kernels/cpu/adamw.cpp forms them, and each element
// then follows the CPU's sequence of f32 operations. The operations are written with the
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn), which nvcc never
// contracts into fused multiply-adds: each step rounds as PyTorch's unfused AdamW does, and
// the result is the same whatever -fmad the build uses. (The CPU build may contract some of
// them, so the two agree to a few ulps rather than to the bit; kernels/cuda/
// classifier_optimizer_test.cpp states the bound.)
//
// Memory-bound: 16 bytes read and 12 written per parameter. All ranges of the model go in one
// launch (kernels/cuda/flat_ranges.cuh); each thread takes quads of four elements, moved as
// float4s when the buffers and the ranges' starts allow (the flat buffers' parameters start on
// 16-element boundaries, so they do), element by element otherwise. Grid-stride loops over a
// grid sized for the work, capped at a few waves.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/cuda/flat_ranges.cuh"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// The per-step scalars, rounded to f32 as the CPU rounds them.
struct AdamWScalars {
  float decay;                  // 1 - lr * weight_decay
  float neg_step_size;          // -lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps, grad_scale;
};

AdamWScalars scalars_for(const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  return {.decay = static_cast<float>(1.0 - static_cast<double>(s.lr) * s.weight_decay),
          .neg_step_size = static_cast<float>(-static_cast<double>(s.lr) / bias_correction1),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
          .beta1 = s.beta1,
          .one_minus_beta1 = static_cast<float>(1.0 - s.beta1),
          .beta2 = s.beta2,
          .one_minus_beta2 = static_cast<float>(1.0 - s.beta2),
          .eps = s.eps,
          .grad_scale = s.grad_scale};
}

// One element, in the CPU's order of operations (kernels/cpu/adamw.cpp).
__device__ __forceinline__ void update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  const float gi = __fmul_rn(g, s.grad_scale);
  p = __fmul_rn(p, s.decay);
  m = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(s.one_minus_beta1, gi));
  v = __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, m), denom));
}

// Every element of the table's ranges; with `vectorized`, full quads as float4s.
template <bool vectorized>
__global__ void adamw_ranges(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, const RangeTable ranges, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, quads = ranges.quads();
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const Quad quad = find_quad(ranges, q);
    const int64_t i = quad.first;
    if (vectorized && quad.count == 4) {
      float4 p = *reinterpret_cast<float4*>(param + i), mi = *reinterpret_cast<float4*>(m + i),
             vi = *reinterpret_cast<float4*>(v + i);
      const float4 g = *reinterpret_cast<const float4*>(grad + i);
      update(p.x, g.x, mi.x, vi.x, s);
      update(p.y, g.y, mi.y, vi.y, s);
      update(p.z, g.z, mi.z, vi.z, s);
      update(p.w, g.w, mi.w, vi.w, s);
      *reinterpret_cast<float4*>(param + i) = p;
      *reinterpret_cast<float4*>(m + i) = mi;
      *reinterpret_cast<float4*>(v + i) = vi;
    } else {
      for (int k = 0; k < quad.count; ++k) update(param[i + k], grad[i + k], m[i + k], v[i + k], s);
    }
  }
}

unsigned grid_for(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks_for(items, kThreads), kMaxBlocks)));
}

}  // namespace

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& step) {
  const AdamWScalars s = scalars_for(step);
  float *p = static_cast<float*>(param.data), *mp = static_cast<float*>(m.data), *vp = static_cast<float*>(v.data);
  const float* g = static_cast<const float*>(grad.data);
  const bool buffers_aligned = aligned_16(p) && aligned_16(g) && aligned_16(mp) && aligned_16(vp);
  for (const RangeTable& table : range_tables(ranges)) {
    if (buffers_aligned && table.quads_aligned)
      adamw_ranges<true><<<grid_for(table.quads()), kThreads, 0, compute_stream()>>>(p, g, mp, vp, table, s);
    else
      adamw_ranges<false><<<grid_for(table.quads()), kThreads, 0, compute_stream()>>>(p, g, mp, vp, table, s);
    DT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dt::kernels::cuda
