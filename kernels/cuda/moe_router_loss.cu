// The routers' auxiliary losses (kernels/moe_router_loss.h) on the GPU.
//
// Statistics: a block per sequence, each of its warps taking every kWarps-th row of it, each lane
// the experts e = lane, lane + 32, ... A warp adds its rows' values into its own shared-memory
// row (a row's sigmoid sum and logsumexp are warp reductions; lane 0 adds the row's counts, so
// that an expert a row names twice is counted twice without a race), then the warps' rows are
// summed in warp order. Gradients: a warp per token row. No atomics: results repeat bit for bit.
#include <cstdint>

#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/moe_math.h"
#include "kernels/moe_router_loss.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

// The logsumexp of row x (E values), in every lane.
template <typename T>
__device__ T row_lse(const T* x, int64_t E, int lane) {
  T m = -INFINITY;
  for (int64_t e = lane; e < E; e += 32) m = fmax(m, x[e]);
  m = warp_max(m);
  T sum = 0;
  for (int64_t e = lane; e < E; e += 32) sum += exp_of(x[e] - m);
  return m + log_of(warp_sum(sum));
}

// Z: a row's sigmoid scores' sum plus the balance loss's epsilon, in every lane.
template <typename T>
__device__ T sigmoid_sum(const T* s, int64_t E, int lane) {
  T sum = 0;
  for (int64_t e = lane; e < E; e += 32) sum += s[e];
  return warp_sum(sum) + static_cast<T>(moe_math::kBalanceEpsilon);
}

// Shared memory: kWarps rows of E counts, kWarps of E probs, kWarps z values.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    stats_kernel(T* counts, T* probs, T* z, const T* scores, const int32_t* experts, const T* logits, int64_t L,
                 int64_t E, int64_t k, MoeScore score) {
  extern __shared__ unsigned char shared_bytes[];
  T* acc = reinterpret_cast<T*>(shared_bytes);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  T* count_row = acc + warp * E;
  T* prob_row = acc + (kWarps + warp) * E;
  T* z_slot = acc + 2 * kWarps * E + warp;
  for (int64_t e = lane; e < E; e += 32) count_row[e] = prob_row[e] = 0;
  if (lane == 0) *z_slot = 0;
  __syncwarp();
  const int64_t q = blockIdx.x;
  for (int64_t n = q * L + warp; n < (q + 1) * L; n += kWarps) {
    if (counts != nullptr && lane == 0)
      for (int64_t j = 0; j < k; ++j) count_row[experts[n * k + j]] += 1;
    if (probs != nullptr) {
      const T* s = scores + n * E;
      if (score == MoeScore::sigmoid) {
        const T Z = sigmoid_sum(s, E, lane);
        for (int64_t e = lane; e < E; e += 32) prob_row[e] += s[e] / Z;
      } else {
        for (int64_t e = lane; e < E; e += 32) prob_row[e] += s[e];
      }
    }
    if (z != nullptr) {
      const T lse = row_lse(logits + n * E, E, lane);
      if (lane == 0) *z_slot += lse * lse;
    }
    __syncwarp();
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += kWarps * 32) {
    T c = 0, p = 0;
    for (int w = 0; w < kWarps; ++w) {
      c += acc[w * E + e];
      p += acc[(kWarps + w) * E + e];
    }
    if (counts != nullptr) counts[q * E + e] = c;
    if (probs != nullptr) probs[q * E + e] = p;
  }
  if (z != nullptr && threadIdx.x == 0) {
    T total = 0;
    for (int w = 0; w < kWarps; ++w) total += acc[2 * kWarps * E + w];
    z[q] = total;
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    balance_backward_kernel(T* dscores, const T* counts, const T* scores, int64_t N, int64_t L, int64_t E, T scale,
                            MoeScore score) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (n >= N) return;
  const T* g = counts + (n / L) * E;
  const T* s = scores + n * E;
  T* ds = dscores + n * E;
  if (score == MoeScore::softmax) {
    for (int64_t e = lane; e < E; e += 32) ds[e] = scale * g[e];
    return;
  }
  const T Z = sigmoid_sum(s, E, lane);
  T dot = 0;
  for (int64_t e = lane; e < E; e += 32) dot += scale * g[e] * (s[e] / Z);
  dot = warp_sum(dot);
  for (int64_t e = lane; e < E; e += 32) ds[e] = moe_math::balance_sigmoid_grad(scale * g[e], dot, Z);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    z_loss_backward_kernel(T* dlogits, const T* logits, int64_t N, int64_t E, T scale) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (n >= N) return;
  const T* x = logits + n * E;
  const T lse = row_lse(x, E, lane);
  for (int64_t e = lane; e < E; e += 32) dlogits[n * E + e] += scale * T{2} * lse * exp_of(x[e] - lse);
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kWarps - 1) / kWarps); }

template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn.template operator()<double>();
  DT_CHECK(dtype == DType::f32, "the router's losses take f32 or f64, not ", dtype_name(dtype));
  fn.template operator()<float>();
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data) : nullptr;
}

}  // namespace

void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score) {
  const Tensor& sets = scores.defined() ? scores : logits;
  const int64_t N = sets.dim(0), E = sets.dim(1);
  const int64_t S = (counts.defined() ? counts : probs.defined() ? probs : z).dim(0);
  if (N == 0) return;
  dispatch_float(sets.dtype, [&]<typename T>() {
    const size_t shared = (2 * kWarps * static_cast<size_t>(E) + kWarps) * sizeof(T);
    DT_CHECK(shared <= 48 * 1024, "moe_router_stats: ", E, " experts need ", shared,
             " bytes of shared memory per block, over the 48 KiB a block gets without opting in");
    stats_kernel<T><<<static_cast<unsigned>(S), kWarps * 32, shared, compute_stream()>>>(
        ptr_or_null<T>(counts), ptr_or_null<T>(probs), ptr_or_null<T>(z), ptr_or_null<const T>(scores),
        ptr_or_null<const int32_t>(experts), ptr_or_null<const T>(logits), N / S, E,
        counts.defined() ? experts.dim(1) : 0, score);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score) {
  const int64_t N = scores.dim(0), E = scores.dim(1);
  if (N == 0) return;
  dispatch_float(scores.dtype, [&]<typename T>() {
    balance_backward_kernel<T><<<row_blocks(N), kWarps * 32, 0, compute_stream()>>>(
        static_cast<T*>(dscores.data), static_cast<const T*>(counts.data), static_cast<const T*>(scores.data), N,
        N / counts.dim(0), E, static_cast<T>(scale), score);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale) {
  const int64_t N = logits.dim(0), E = logits.dim(1);
  if (N == 0) return;
  dispatch_float(logits.dtype, [&]<typename T>() {
    z_loss_backward_kernel<T><<<row_blocks(N), kWarps * 32, 0, compute_stream()>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data), N, E, static_cast<T>(scale));
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
