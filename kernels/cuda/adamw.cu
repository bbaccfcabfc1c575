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
// Memory-bound: 16 bytes read and 12 written per parameter. When all four tensors start at
// 16-byte boundaries each thread moves float4s (parameter ranges of the flat buffer often do;
// a bias of odd length shifts the ones after it, which then take the scalar path). Grid-stride
// loops over a grid sized for the tensor, capped at a few waves.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/adamw.h"
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

__global__ void adamw_scalar(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    update(param[i], grad[i], m[i], v[i], s);
}

// Elements [0, 4 * vectors) as float4s; the caller runs the tail with adamw_scalar.
__global__ void adamw_vector4(float4* __restrict__ param, const float4* __restrict__ grad, float4* __restrict__ m,
                              float4* __restrict__ v, int64_t vectors, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    float4 p = param[i], mi = m[i], vi = v[i];
    const float4 g = grad[i];
    update(p.x, g.x, mi.x, vi.x, s);
    update(p.y, g.y, mi.y, vi.y, s);
    update(p.z, g.z, mi.z, vi.z, s);
    update(p.w, g.w, mi.w, vi.w, s);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

unsigned grid_for(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks_for(items, kThreads), kMaxBlocks)));
}

}  // namespace

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& step) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const AdamWScalars s = scalars_for(step);
  float *p = static_cast<float*>(param.data), *mp = static_cast<float*>(m.data), *vp = static_cast<float*>(v.data);
  const float* g = static_cast<const float*>(grad.data);
  int64_t done = 0;
  if (aligned_16(p) && aligned_16(g) && aligned_16(mp) && aligned_16(vp) && n >= 4) {
    const int64_t vectors = n / 4;
    adamw_vector4<<<grid_for(vectors), kThreads, 0, compute_stream()>>>(
        reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(mp),
        reinterpret_cast<float4*>(vp), vectors, s);
    DT_CUDA_CHECK_LAUNCH();
    done = vectors * 4;
  }
  if (done < n) {
    const int64_t rest = n - done;
    adamw_scalar<<<grid_for(rest), kThreads, 0, compute_stream()>>>(p + done, g + done, mp + done, vp + done, rest, s);
    DT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dt::kernels::cuda
