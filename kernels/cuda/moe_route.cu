// Top-k routing (kernels/moe_route.h) on the GPU: one warp per token row, each lane owning the
// experts e = lane, lane + 32, ... of the row.
//
// Forward: the softmax's maximum and sum are warp reductions (a butterfly, so every lane holds
// the result); each lane writes its scores and reads back only what it wrote. The top k are k
// rounds of a warp arg-max under moe_math::ranks_before: in round r each lane offers its best
// expert ranking strictly after round r - 1's winner, and the butterfly leaves the round's winner
// in every lane. ranks_before is a strict total order, so the tree finds the CPU's k experts in
// the CPU's order for the same scores, with no per-lane record of what was taken. Every lane adds
// each winner's score to the sum in round order (the CPU's order); the lane that writes round r's
// expert also writes its weight, rescaled once Z is known.
//
// Backward: every lane recomputes Z and sum_j dweights_j g_j over the k chosen (in the CPU's
// order), then builds its experts' score gradients in dlogits in place; the softmax's
// sum_e p_e ds_e is a warp reduction.
//
// The CPU sums a row sequentially, the warp in a tree, and CUDA's expf differs from glibc's by an
// ulp or two, so scores and gradients agree with the CPU to a few ulps (experts wherever the
// choice values are not that close to a tie). Fixed orders throughout: a run repeats bit for bit.
#include <cstdint>
#include <limits>

#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/moe_math.h"
#include "kernels/moe_route.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

// A candidate expert: its choice value, index (-1: none) and score.
template <typename T>
struct Candidate {
  T choice;
  int32_t expert;
  T score;
};

// Whether a is a better candidate than b; a real candidate beats none.
template <typename T>
__device__ __forceinline__ bool better(const Candidate<T>& a, const Candidate<T>& b) {
  if (a.expert < 0 || b.expert < 0) return b.expert < 0 && a.expert >= 0;
  return moe_math::ranks_before(a.choice, a.expert, b.choice, b.expert);
}

// The warp's best candidate, in every lane.
template <typename T>
__device__ __forceinline__ Candidate<T> warp_best(Candidate<T> c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const Candidate<T> other{__shfl_xor_sync(kFullMask, c.choice, offset), __shfl_xor_sync(kFullMask, c.expert, offset),
                             __shfl_xor_sync(kFullMask, c.score, offset)};
    if (better(other, c)) c = other;
  }
  return c;
}

// The row of token n for the warp of this thread, or -1 past the last row (whole warps).
__device__ __forceinline__ int64_t warp_row(int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  return n < N ? n : -1;
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    route_forward_kernel(T* scores, int32_t* experts, T* weights, const T* logits, const T* bias, int64_t N, int64_t E,
                         int64_t k, MoeScore score_fn, bool renormalize, T route_scale) {
  const int64_t n = warp_row(N);
  if (n < 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const T* x = logits + n * E;
  T* s = scores + n * E;
  if (score_fn == MoeScore::sigmoid) {
    for (int64_t e = lane; e < E; e += 32) s[e] = T{1} / (T{1} + exp_of(-x[e]));
  } else {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t e = lane; e < E; e += 32) m = fmax(m, x[e]);
    m = warp_max(m);
    T sum = 0;
    for (int64_t e = lane; e < E; e += 32) sum += (s[e] = exp_of(x[e] - m));
    sum = warp_sum(sum);
    for (int64_t e = lane; e < E; e += 32) s[e] /= sum;
  }

  Candidate<T> previous{0, -1, 0};  // the last round's winner; none before the first
  T chosen_sum = 0;
  for (int64_t r = 0; r < k; ++r) {
    Candidate<T> best{0, -1, 0};
    for (int64_t e = lane; e < E; e += 32) {
      const Candidate<T> c{bias ? s[e] + bias[e] : s[e], static_cast<int32_t>(e), s[e]};
      if (previous.expert >= 0 && !better(previous, c)) continue;  // taken in an earlier round
      if (better(c, best)) best = c;
    }
    previous = warp_best(best);
    chosen_sum += previous.score;
    if (r % 32 == lane) {
      experts[n * k + r] = previous.expert;
      weights[n * k + r] = previous.score;
    }
  }
  const T Z = chosen_sum + static_cast<T>(moe_math::kRenormalizeEpsilon);
  for (int64_t r = lane; r < k; r += 32)
    weights[n * k + r] = moe_math::route_weight(weights[n * k + r], Z, renormalize, route_scale);
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    route_backward_kernel(T* dlogits, const T* dweights, const T* dscores, const T* scores, const int32_t* experts,
                          int64_t N, int64_t E, int64_t k, MoeScore score_fn, bool renormalize, T route_scale) {
  const int64_t n = warp_row(N);
  if (n < 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const T* p = scores + n * E;
  const int32_t* chosen = experts + n * k;
  const T* dw = dweights + n * k;
  T* ds = dlogits + n * E;  // the score gradient first, turned into the logit gradient in place

  T sum = 0, dot = 0;
  for (int64_t j = 0; j < k; ++j) {
    const T g = p[chosen[j]];
    sum += g;
    dot += dw[j] * g;
  }
  const T Z = sum + static_cast<T>(moe_math::kRenormalizeEpsilon);
  T total = 0;  // sum_e p_e ds_e over this lane's experts
  for (int64_t e = lane; e < E; e += 32) {
    T d = dscores ? dscores[n * E + e] : T{0};
    for (int64_t j = 0; j < k; ++j)
      if (chosen[j] == e) d += moe_math::route_weight_grad(dw[j], dot, Z, renormalize, route_scale);
    if (score_fn == MoeScore::sigmoid) {
      ds[e] = d * p[e] * (T{1} - p[e]);
    } else {
      ds[e] = d;
      total += p[e] * d;
    }
  }
  if (score_fn == MoeScore::sigmoid) return;
  total = warp_sum(total);
  for (int64_t e = lane; e < E; e += 32) ds[e] = p[e] * (ds[e] - total);
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn.template operator()<double>();
  DT_CHECK(dtype == DType::f32, "moe_route takes f32 or f64, not ", dtype_name(dtype));
  fn.template operator()<float>();
}

}  // namespace

void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing) {
  const int64_t N = logits.dim(0), E = logits.dim(1);
  if (N == 0) return;
  dispatch_float(logits.dtype, [&]<typename T>() {
    route_forward_kernel<T><<<row_blocks(N), kWarpsPerBlock * 32, 0, compute_stream()>>>(
        static_cast<T*>(scores.data), static_cast<int32_t*>(experts.data), static_cast<T*>(weights.data),
        static_cast<const T*>(logits.data), static_cast<const T*>(bias.data), N, E, routing.top_k, routing.score,
        routing.renormalize, static_cast<T>(routing.route_scale));
    DT_CUDA_CHECK_LAUNCH();
  });
}

void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing) {
  const int64_t N = scores.dim(0), E = scores.dim(1);
  if (N == 0) return;
  dispatch_float(scores.dtype, [&]<typename T>() {
    route_backward_kernel<T><<<row_blocks(N), kWarpsPerBlock * 32, 0, compute_stream()>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(dweights.data), static_cast<const T*>(dscores.data),
        static_cast<const T*>(scores.data), static_cast<const int32_t*>(experts.data), N, E, routing.top_k,
        routing.score, routing.renormalize, static_cast<T>(routing.route_scale));
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
