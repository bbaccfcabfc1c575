// Decode attention (kernels/attention_decode.h) on the GPU: M query rows against a KV cache.
//
// One block of kWarps warps per (query m, head h). Warp w takes keys w, w + kWarps, ... in turn:
// the lanes hold the query and their slice of the output row (HS / 32 elements each, HS up to
// 256), read a key row and a value row coalesced, reduce q.k by shuffles, and keep an online
// softmax (running max, running sum, output rescaled). The warps' partial results are then
// combined in a fixed order through shared memory. Every sum runs in one order, so results
// repeat bit for bit; no atomics.
//
// Why this shape: a decoding step (M = 1) is bound by reading the cache, and a warp per key row
// reads it in full 128-byte lines. What a faster version would change: at M = 1 there are only
// NH blocks, fewer than the SMs of a large GPU for long caches; flash-decoding splits each
// (m, h) pair's keys over several blocks and combines their (max, sum, out) in a second kernel,
// and the heads of one group would share their KV reads. Keys per warp could also be unrolled
// two or four deep to keep more loads in flight.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "kernels/attention_decode.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxHeadSize = 256;

struct DecodeDims {
  int64_t M, T;       // query rows, cached positions (T >= M)
  int NH, NKV, HS, group;
  int64_t q_row, kv_row;  // elements per row of q (and out) and of kv
};

template <typename T>
__device__ __forceinline__ T exp_of(T x) {
  if constexpr (sizeof(T) == 4) return expf(x); else return exp(x);
}

// kPerLane = head-size bucket / 32: lane l holds columns l + 32 e, e < kPerLane, below HS.
template <typename T, int kPerLane>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(DecodeDims d, T scale, T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kv) {
  __shared__ T warp_max[kWarps], warp_sum[kWarps];
  __shared__ T warp_out[kWarps][kPerLane * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t m = blockIdx.x / d.NH;
  const int h = static_cast<int>(blockIdx.x % d.NH), g = h / d.group;
  const int64_t visible = d.T - d.M + m + 1;  // keys 0..p(m)
  const T* q_head = q + m * d.q_row + int64_t{h} * d.HS;
  const T* k_head = kv + int64_t{g} * d.HS;
  const T* v_head = kv + int64_t{d.NKV + g} * d.HS;

  T q_lane[kPerLane], o[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    q_lane[e] = c < d.HS ? q_head[c] : T(0);
    o[e] = T(0);
  }
  T running_max = -INFINITY, running_sum = 0;
  for (int64_t j = warp; j < visible; j += kWarps) {
    const T* k_row = k_head + j * d.kv_row;
    const T* v_row = v_head + j * d.kv_row;
    T dot = 0;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < d.HS) dot += q_lane[e] * k_row[c];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const T score = dot * scale;
    const T new_max = score > running_max ? score : running_max;
    const T correction = exp_of(running_max - new_max), p = exp_of(score - new_max);
    running_sum = running_sum * correction + p;
    running_max = new_max;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int c = lane + 32 * e;
      o[e] = o[e] * correction + (c < d.HS ? p * v_row[c] : T(0));
    }
  }
  // A warp that had no keys leaves max -inf, sum 0, out 0: its weight exp(-inf - max) below is 0.
  // Warp 0 always has key 0, so the combined max is finite.
  if (lane == 0) warp_max[warp] = running_max, warp_sum[warp] = running_sum;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) warp_out[warp][lane + 32 * e] = o[e];
  __syncthreads();

  T max = warp_max[0];
  for (int w = 1; w < kWarps; ++w) max = warp_max[w] > max ? warp_max[w] : max;
  T sum = 0;
  for (int w = 0; w < kWarps; ++w) sum += warp_sum[w] * exp_of(warp_max[w] - max);
  const T inv_sum = T(1) / sum;
  T* out_head = out + m * d.q_row + int64_t{h} * d.HS;
  for (int c = threadIdx.x; c < d.HS; c += blockDim.x) {
    T value = 0;
    for (int w = 0; w < kWarps; ++w) value += warp_out[w][c] * exp_of(warp_max[w] - max);
    out_head[c] = value * inv_sum;
  }
}

template <typename T, int kPerLane>
void launch(const DecodeDims& d, Tensor out, Tensor q, Tensor kv) {
  const T scale = T(1) / std::sqrt(T(d.HS));  // as the CPU kernel computes it
  const int64_t blocks = d.M * d.NH;
  DT_CHECK(blocks <= int64_t{0x7fffffff}, "attention_decode: ", d.M, " queries x ", d.NH,
           " heads exceed the CUDA grid's 2^31 - 1 blocks");
  decode_kernel<T, kPerLane><<<static_cast<unsigned>(blocks), kThreads, 0, compute_stream()>>>(
      d, scale, out.ptr<T>(), q.ptr<T>(), kv.ptr<T>());
  DT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void decode(const DecodeDims& d, Tensor out, Tensor q, Tensor kv) {
  if (d.HS <= 64) return launch<T, 2>(d, out, q, kv);
  if (d.HS <= 128) return launch<T, 4>(d, out, q, kv);
  if (d.HS <= kMaxHeadSize) return launch<T, 8>(d, out, q, kv);
  throw Error(str("attention_decode: head size ", d.HS, " is not supported by the CUDA decode kernel, which takes ",
                  "head sizes 1 to ", kMaxHeadSize, "; use n_head so that n_embd / n_head <= ", kMaxHeadSize,
                  ", or device = \"cpu\", whose kernel takes any head size"));
}

}  // namespace

void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head) {
  const DecodeDims d{.M = q.dim(0), .T = kv.dim(0), .NH = n_head, .NKV = n_kv_head,
                     .HS = static_cast<int>(q.dim(1) / n_head), .group = n_head / n_kv_head, .q_row = q.dim(1),
                     .kv_row = kv.dim(1)};
  if (d.M == 0) return;
  switch (q.dtype) {
    case DType::f32:
      return decode<float>(d, out, q, kv);
    case DType::f64:
      return decode<double>(d, out, q, kv);
    default:
      throw Error(str("attention_decode: q is ", q.describe(), "; the CUDA decode kernel takes f32 or f64, as the ",
                      "CPU one does (generation runs the f32 weights)"));
  }
}

}  // namespace dt::kernels::cuda
