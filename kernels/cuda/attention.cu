// Causal grouped-query attention (kernels/attention.h) on the GPU: our own flash-attention
// kernels (FlashAttention-2, Dao 2023), written as tiled SIMT code.
//
// Forward: one block of 16 x 16 threads per (query tile, head, batch). The block keeps its query
// tile in shared memory and walks the key tiles up to the diagonal, one at a time: S = Q K^T
// (each thread a few rows x keys in registers), the online softmax (row max by shuffles across
// the 16 threads of a row; running max, running sum, output rescaled), P to shared memory
// (rounded to the storage type, as the CPU kernel rounds it), then O += P V with each thread
// owning a few rows x head columns of O in registers. K and V take turns in one shared buffer.
// The last (longest) query tiles are launched first, so the short ones fill the tail.
//
// Backward: deterministic without atomics, FlashAttention-2's split:
//   1. softmax_row_term_kernel: D = rowsum(dout * out), one warp per (position, head);
//   2. dkdv_kernel: one block per (key tile, kv head, batch) owns dK and dV of its keys and loops
//      over the query heads of its group, then the query tiles at or below the diagonal, in a
//      fixed order, recomputing P = exp(S - lse) and dS = P (dP - D);
//   3. dq_kernel: one block per (query tile, head, batch) owns dQ and loops over key tiles.
// Every gradient element is summed by one thread in one order: runs repeat bit for bit. The
// price is computing S and dP twice (7 tile products per pair of tiles instead of 5).
//
// Head sizes 1..256: the kernels are compiled for buckets of at most 64, 128 and 256 (the
// register tiles of O, dK, dV, dQ are sized by the bucket) and loop over the actual HS inside.
// Tile sizes per kernel come from fit_tile(): the largest of 64 x 64 .. 16 x 16 whose shared
// memory fits kSmemBudgetBytes, so two blocks share an H100 SM and one fits an A100's.
//
// Numerics (kernels/README.md): tiles are widened to f32 (f64 for f64) in shared memory; scores,
// softmax and every product accumulate in f32; P and dS are rounded to the storage type before
// their products, exactly where the CPU kernel rounds them; out and dqkv are rounded once when
// stored. The scale 1/sqrt(HS) is computed on the host as the CPU computes it. Only summation
// orders (and expf vs the CPU's vec_exp, both within 2 ulp) differ from the CPU.
//
// What a faster version would change: tensor cores (mma.sync m16n8k16 on bf16/f16 fragments,
// or wgmma on Hopper) for the four products, with Q, K, V kept in shared memory in the storage
// type; cp.async (TMA on Hopper) double-buffering of the next K/V tile behind the current one;
// exp2 with log2(e) folded into the scale; and stores of out and dqkv staged through shared
// memory as 16-byte packs. This SIMT version is the readable baseline those are checked against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/buffer.h"
#include "kernels/attention.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {
namespace {

// Blocks are kSide x kSide threads: thread (ty, tx) owns rows ty + kSide * r and columns
// tx + kSide * c of each register tile, so the 16 threads of a row sit in one half-warp.
constexpr int kSide = 16;
constexpr int kThreads = kSide * kSide;
constexpr int kMaxHeadSize = 256;

// 100 KiB: two blocks per H100 SM (228 KiB); one per A100 SM (opt-in limit 163 KiB per block).
constexpr int64_t kSmemBudgetBytes = 100 * 1024;
constexpr int64_t kSmemLimitBytes = 163 * 1024;

// Shapes of one call and where each head sits in a qkv row (as in kernels/cpu/attention.cpp).
struct Dims {
  int64_t B, T;
  int NH, NKV, HS, group, phase;  // query head h reads key/value head (h + phase) / group
  int64_t qkv_row, out_row;  // elements per position of qkv and of out
  __host__ __device__ int64_t q_col(int h) const { return int64_t{h} * HS; }
  __host__ __device__ int64_t k_col(int g) const { return int64_t{NH + g} * HS; }
  __host__ __device__ int64_t v_col(int g) const { return int64_t{NH + NKV + g} * HS; }
};

// Shared-memory rows of HS elements are padded to an odd length: the 16 threads of a row read
// 16 different rows at one column, which then fall in 16 different banks.
__host__ __device__ constexpr int padded(int head_size) { return head_size | 1; }

// Query rows and keys of one block's tiles.
struct Tile {
  int rows, keys;
};

// Shared memory of each kernel in elements, for head rows `ld` long; the kernels carve their
// buffers in this order.
constexpr int64_t forward_smem(Tile t, int ld) {  // q, k-or-v, p
  return int64_t{t.rows + t.keys} * ld + t.rows * (t.keys + 1);
}
constexpr int64_t dkdv_smem(Tile t, int ld) {  // k, v, q, dout, p, ds, lse, D
  return 2 * int64_t{t.rows + t.keys} * ld + 2 * t.rows * (t.keys + 1) + 2 * t.rows;
}
constexpr int64_t dq_smem(Tile t, int ld) {  // q, dout, k, v, ds, lse, D
  return 2 * int64_t{t.rows + t.keys} * ld + t.rows * (t.keys + 1) + 2 * t.rows;
}

// The largest tile from 64 x 64 down to 16 x 16, halving the longer side first, whose shared
// memory at the bucket's largest head size fits the budget (or 16 x 16).
constexpr Tile fit_tile(int64_t (*smem)(Tile, int), int head_max, int element_bytes) {
  Tile t{64, 64};
  while (smem(t, padded(head_max)) * element_bytes > kSmemBudgetBytes && (t.rows > kSide || t.keys > kSide)) {
    if (t.keys >= t.rows && t.keys > kSide)
      t.keys /= 2;
    else
      t.rows /= 2;
  }
  return t;
}

template <typename T>
__device__ __forceinline__ T exp_of(T x) {
  if constexpr (sizeof(T) == 4) return expf(x); else return exp(x);
}
template <typename T>
__device__ __forceinline__ T log_of(T x) {
  if constexpr (sizeof(T) == 4) return logf(x); else return log(x);
}
template <typename T>
__device__ __forceinline__ T max_of(T a, T b) { return a > b ? a : b; }
__device__ __forceinline__ int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// Max and sum over the 16 threads of a row (lanes differing in their low 4 bits), in a fixed
// butterfly order: every thread of the row gets the same, reproducible value.
template <typename T>
__device__ __forceinline__ T row_max(T v) {
#pragma unroll
  for (int offset = kSide / 2; offset > 0; offset /= 2) v = max_of(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <typename T>
__device__ __forceinline__ T row_sum(T v) {
#pragma unroll
  for (int offset = kSide / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ int thread_row() { return static_cast<int>(threadIdx.x) / kSide; }
__device__ __forceinline__ int thread_col() { return static_cast<int>(threadIdx.x) % kSide; }

// dst (rows, HS), rows ld apart in shared memory, = src (rows, HS), rows src_ld apart in global
// memory, widened to T; rows >= valid_rows (past the sequence) are zero and not read. With
// `packed`, 16 bytes per load (the host checked HS * sizeof(S) % 16 == 0 and the alignment).
template <typename S, typename T>
__device__ void load_tile(T* dst, int ld, const S* __restrict__ src, int64_t src_ld, int rows, int valid_rows,
                          int head_size, bool packed) {
  if (packed) {
    constexpr int kWidth = 16 / sizeof(S);
    const int packs_per_row = head_size / kWidth;
    for (int idx = threadIdx.x; idx < rows * packs_per_row; idx += blockDim.x) {
      const int r = idx / packs_per_row, col = (idx - r * packs_per_row) * kWidth;
      T* out = dst + r * ld + col;
      if (r < valid_rows) {
        const uint4 bits = *reinterpret_cast<const uint4*>(src + r * src_ld + col);
        S values[kWidth];
        memcpy(values, &bits, sizeof(bits));
#pragma unroll
        for (int e = 0; e < kWidth; ++e) out[e] = load(values[e]);
      } else {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) out[e] = T(0);
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * head_size; idx += blockDim.x) {
      const int r = idx / head_size, col = idx - r * head_size;
      dst[r * ld + col] = r < valid_rows ? load(src[r * src_ld + col]) : T(0);
    }
  }
}

// lse and D of query rows i0.. of one head into shared memory; zero past the sequence.
template <typename T>
__device__ void load_row_stats(T* lse_rows, T* delta_rows, const T* lse, const T* delta, int rows, int valid_rows) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    lse_rows[r] = r < valid_rows ? lse[r] : T(0);
    delta_rows[r] = r < valid_rows ? delta[r] : T(0);
  }
}

// acc[r][c] = sum_{d < HS} a[(ty + 16 r) * ld + d] * b[(tx + 16 c) * ld + d]: row-by-row dot
// products of two shared tiles (Q K^T, dout V^T).
template <int RM, int RN, typename T>
__device__ __forceinline__ void row_dots(T (&acc)[RM][RN], const T* a, const T* b, int ld, int head_size) {
  const int ty = thread_row(), tx = thread_col();
#pragma unroll
  for (int r = 0; r < RM; ++r)
#pragma unroll
    for (int c = 0; c < RN; ++c) acc[r][c] = T(0);
#pragma unroll 4
  for (int d = 0; d < head_size; ++d) {
    T av[RM], bv[RN];
#pragma unroll
    for (int r = 0; r < RM; ++r) av[r] = a[(ty + kSide * r) * ld + d];
#pragma unroll
    for (int c = 0; c < RN; ++c) bv[c] = b[(tx + kSide * c) * ld + d];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < RN; ++c) acc[r][c] += av[r] * bv[c];
  }
}

// acc[r][c] += sum_{k < K} A(ty + 16 r, k) * b[k * ldb + tx + 16 c] for columns tx + 16 c < HS,
// with A(i, k) = a[i * a_row + k * a_k]: (a_row, a_k) = (lda, 1) reads A, (1, lda) its transpose.
template <int RM, int RC, typename T>
__device__ __forceinline__ void accumulate_product(T (&acc)[RM][RC], const T* a, int a_row, int a_k, const T* b,
                                                   int ldb, int K, int head_size) {
  const int ty = thread_row(), tx = thread_col();
#pragma unroll 2
  for (int k = 0; k < K; ++k) {
    T av[RM], bv[RC];
#pragma unroll
    for (int r = 0; r < RM; ++r) av[r] = a[(ty + kSide * r) * a_row + k * a_k];
#pragma unroll
    for (int c = 0; c < RC; ++c) bv[c] = tx + kSide * c < head_size ? b[k * ldb + tx + kSide * c] : T(0);
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < RC; ++c) acc[r][c] += av[r] * bv[c];
  }
}

// Stores the register tile acc (rows ty + 16 r, head columns tx + 16 c) times `factor` into
// rows first.. of dst (row_ld apart), rows below valid_rows and columns below HS only.
template <int RM, int RC, typename S, typename T>
__device__ __forceinline__ void store_rows(S* dst, int64_t row_ld, const T (&acc)[RM][RC], T factor, int valid_rows,
                                           int head_size) {
  const int ty = thread_row(), tx = thread_col();
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    if (ty + kSide * r >= valid_rows) continue;
#pragma unroll
    for (int c = 0; c < RC; ++c)
      if (tx + kSide * c < head_size) store(dst + (ty + kSide * r) * row_ld + tx + kSide * c, acc[r][c] * factor);
  }
}

template <typename S, int kHeadMax, int kRows, int kKeys>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Dims d, compute_t<S> scale, S* __restrict__ out, compute_t<S>* __restrict__ lse,
                   const S* __restrict__ qkv, bool packed) {
  using T = compute_t<S>;
  constexpr int RM = kRows / kSide, RN = kKeys / kSide, RC = kHeadMax / kSide;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int ld = padded(d.HS), p_ld = kKeys + 1;
  T* q_tile = reinterpret_cast<T*>(smem_bytes);
  T* kv_tile = q_tile + kRows * ld;
  T* p_tile = kv_tile + kKeys * ld;

  const int64_t i0 = int64_t{gridDim.x - 1 - blockIdx.x} * kRows;  // longest tiles first
  const int h = blockIdx.y, g = (h + d.phase) / d.group;
  const int64_t b = blockIdx.z;
  const int ty = thread_row(), tx = thread_col();
  const int valid_rows = static_cast<int>(smaller(kRows, d.T - i0));
  const S* qkv_b = qkv + b * d.T * d.qkv_row;
  load_tile(q_tile, ld, qkv_b + i0 * d.qkv_row + d.q_col(h), d.qkv_row, kRows, valid_rows, d.HS, packed);

  T o[RM][RC] = {};
  T running_max[RM], running_sum[RM];  // running_sum: this thread's columns only, until the end
#pragma unroll
  for (int r = 0; r < RM; ++r) running_max[r] = -INFINITY, running_sum[r] = T(0);

  // Keys past the tile's last query are hidden from all of it. Key 0 is visible to every row,
  // so after the first key tile each running max is finite and exp(max_old - max_new) is safe.
  const int64_t key_end = smaller(d.T, i0 + kRows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    const int valid_keys = static_cast<int>(smaller(kKeys, key_end - j0));
    __syncthreads();  // the previous P.V is done with kv_tile (and the q tile is loaded)
    load_tile(kv_tile, ld, qkv_b + j0 * d.qkv_row + d.k_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);
    __syncthreads();
    T s[RM][RN];
    row_dots(s, q_tile, kv_tile, ld, d.HS);
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      const int64_t i = i0 + ty + kSide * r;
      T tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < RN; ++c) {
        s[r][c] = j0 + tx + kSide * c <= i ? s[r][c] * scale : T(-INFINITY);
        tile_max = max_of(tile_max, s[r][c]);
      }
      const T new_max = max_of(running_max[r], row_max(tile_max));
      const T correction = exp_of(running_max[r] - new_max);
      running_max[r] = new_max;
      running_sum[r] *= correction;
#pragma unroll
      for (int c = 0; c < RC; ++c) o[r][c] *= correction;
#pragma unroll
      for (int c = 0; c < RN; ++c) {
        const T p = exp_of(s[r][c] - new_max);
        running_sum[r] += p;                                             // the f32 P
        p_tile[(ty + kSide * r) * p_ld + tx + kSide * c] = round_to<S>(p);  // P to S for P.V
      }
    }
    __syncthreads();  // scores are done with K; P is visible
    load_tile(kv_tile, ld, qkv_b + j0 * d.qkv_row + d.v_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);
    __syncthreads();
    accumulate_product(o, p_tile, p_ld, 1, kv_tile, ld, valid_keys, d.HS);
  }

  T inv_sum[RM];
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const T sum = row_sum(running_sum[r]);
    inv_sum[r] = T(1) / sum;
    const int64_t i = i0 + ty + kSide * r;
    if (tx == 0 && i < d.T) lse[(b * d.NH + h) * d.T + i] = running_max[r] + log_of(sum);
#pragma unroll
    for (int c = 0; c < RC; ++c) o[r][c] *= inv_sum[r];
  }
  store_rows(out + (b * d.T + i0) * d.out_row + d.q_col(h), d.out_row, o, T(1), valid_rows, d.HS);
}

// delta[b, h, i] = sum_d dout[b, i, h, d] * out[b, i, h, d]: one warp per (position, head),
// i.e. per HS-long row of out viewed as (B * T * NH, HS).
template <typename S>
__global__ void softmax_row_term_kernel(Dims d, compute_t<S>* __restrict__ delta, const S* __restrict__ dout,
                                        const S* __restrict__ out) {
  using T = compute_t<S>;
  const int lane = threadIdx.x % 32, warps_per_block = blockDim.x / 32;
  const int64_t rows = d.B * d.T * d.NH;
  for (int64_t row = int64_t{blockIdx.x} * warps_per_block + threadIdx.x / 32; row < rows;
       row += int64_t{gridDim.x} * warps_per_block) {
    T dot = 0;
    for (int c = lane; c < d.HS; c += 32) dot += load(dout[row * d.HS + c]) * load(out[row * d.HS + c]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) {
      const int64_t position = row / d.NH, h = row % d.NH, b = position / d.T, i = position % d.T;
      delta[(b * d.NH + h) * d.T + i] = dot;
    }
  }
}

// P and dS of one (query tile, key tile) pair from the scores and dP in registers; writes
// round(P) (when p_tile is given) and round(dS) to shared memory. dS = P (dP - D), before the
// 1/sqrt(HS), from the f32 P (the CPU kernel's order).
template <typename S, int RM, int RN, typename T>
__device__ __forceinline__ void softmax_gradient_tile(const T (&s)[RM][RN], const T (&dp)[RM][RN], T scale, int64_t i0,
                                                      int64_t j0, int64_t T_len, const T* lse_rows,
                                                      const T* delta_rows, T* p_tile, T* ds_tile, int p_ld) {
  const int ty = thread_row(), tx = thread_col();
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const int row = ty + kSide * r;
    const int64_t i = i0 + row;
#pragma unroll
    for (int c = 0; c < RN; ++c) {
      const int col = tx + kSide * c;
      const bool visible = j0 + col <= i && i < T_len;
      const T p = visible ? exp_of(s[r][c] * scale - lse_rows[row]) : T(0);
      const T ds = p * (dp[r][c] - delta_rows[row]);
      if (p_tile != nullptr) p_tile[row * p_ld + col] = round_to<S>(p);
      ds_tile[row * p_ld + col] = round_to<S>(ds);
    }
  }
}

template <typename S, int kHeadMax, int kRows, int kKeys>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Dims d, compute_t<S> scale, S* __restrict__ dqkv, const S* __restrict__ dout,
                const S* __restrict__ qkv, const compute_t<S>* __restrict__ lse,
                const compute_t<S>* __restrict__ delta, bool packed) {
  using T = compute_t<S>;
  constexpr int RQ = kRows / kSide, RK = kKeys / kSide, RC = kHeadMax / kSide;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int ld = padded(d.HS), p_ld = kKeys + 1;
  T* k_tile = reinterpret_cast<T*>(smem_bytes);
  T* v_tile = k_tile + kKeys * ld;
  T* q_tile = v_tile + kKeys * ld;
  T* dout_tile = q_tile + kRows * ld;
  T* p_tile = dout_tile + kRows * ld;
  T* ds_tile = p_tile + kRows * p_ld;
  T* lse_rows = ds_tile + kRows * p_ld;
  T* delta_rows = lse_rows + kRows;

  const int64_t j0 = int64_t{blockIdx.x} * kKeys;  // the first key tiles see the most queries: first
  const int g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int valid_keys = static_cast<int>(smaller(kKeys, d.T - j0));
  const S* qkv_b = qkv + b * d.T * d.qkv_row;
  const S* dout_b = dout + b * d.T * d.out_row;
  load_tile(k_tile, ld, qkv_b + j0 * d.qkv_row + d.k_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);
  load_tile(v_tile, ld, qkv_b + j0 * d.qkv_row + d.v_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);

  T dk[RK][RC] = {}, dv[RK][RC] = {};
  for (int hh = 0; hh < d.group; ++hh) {
    // The query heads reading key/value head g; fewer than `group` at the ends of a
    // tensor-parallel rank's heads (the same for the whole block: no thread skips a barrier alone).
    const int h = g * d.group - d.phase + hh;
    if (h < 0 || h >= d.NH) continue;
    // Query tiles wholly above this key tile see none of it.
    for (int64_t i0 = j0 / kRows * kRows; i0 < d.T; i0 += kRows) {
      const int valid_rows = static_cast<int>(smaller(kRows, d.T - i0));
      __syncthreads();  // the previous products are done with the q, dout, p and ds tiles
      load_tile(q_tile, ld, qkv_b + i0 * d.qkv_row + d.q_col(h), d.qkv_row, kRows, valid_rows, d.HS, packed);
      load_tile(dout_tile, ld, dout_b + i0 * d.out_row + d.q_col(h), d.out_row, kRows, valid_rows, d.HS, packed);
      const int64_t stats_at = (b * d.NH + h) * d.T + i0;
      load_row_stats(lse_rows, delta_rows, lse + stats_at, delta + stats_at, kRows, valid_rows);
      __syncthreads();
      T s[RQ][RK], dp[RQ][RK];
      row_dots(s, q_tile, k_tile, ld, d.HS);
      row_dots(dp, dout_tile, v_tile, ld, d.HS);
      softmax_gradient_tile<S>(s, dp, scale, i0, j0, d.T, lse_rows, delta_rows, p_tile, ds_tile, p_ld);
      __syncthreads();
      // dv[j] += sum_i round(P)[i, j] dout[i];  dk[j] += sum_i round(dS)[i, j] q[i] (scaled below)
      accumulate_product(dv, p_tile, 1, p_ld, dout_tile, ld, valid_rows, d.HS);
      accumulate_product(dk, ds_tile, 1, p_ld, q_tile, ld, valid_rows, d.HS);
    }
  }
  S* dqkv_tile = dqkv + (b * d.T + j0) * d.qkv_row;
  store_rows(dqkv_tile + d.k_col(g), d.qkv_row, dk, scale, valid_keys, d.HS);
  store_rows(dqkv_tile + d.v_col(g), d.qkv_row, dv, T(1), valid_keys, d.HS);
}

template <typename S, int kHeadMax, int kRows, int kKeys>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Dims d, compute_t<S> scale, S* __restrict__ dqkv, const S* __restrict__ dout,
              const S* __restrict__ qkv, const compute_t<S>* __restrict__ lse,
              const compute_t<S>* __restrict__ delta, bool packed) {
  using T = compute_t<S>;
  constexpr int RM = kRows / kSide, RN = kKeys / kSide, RC = kHeadMax / kSide;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int ld = padded(d.HS), p_ld = kKeys + 1;
  T* q_tile = reinterpret_cast<T*>(smem_bytes);
  T* dout_tile = q_tile + kRows * ld;
  T* k_tile = dout_tile + kRows * ld;
  T* v_tile = k_tile + kKeys * ld;
  T* ds_tile = v_tile + kKeys * ld;
  T* lse_rows = ds_tile + kRows * p_ld;
  T* delta_rows = lse_rows + kRows;

  const int64_t i0 = int64_t{gridDim.x - 1 - blockIdx.x} * kRows;  // longest tiles first
  const int h = blockIdx.y, g = (h + d.phase) / d.group;
  const int64_t b = blockIdx.z;
  const int valid_rows = static_cast<int>(smaller(kRows, d.T - i0));
  const S* qkv_b = qkv + b * d.T * d.qkv_row;
  load_tile(q_tile, ld, qkv_b + i0 * d.qkv_row + d.q_col(h), d.qkv_row, kRows, valid_rows, d.HS, packed);
  load_tile(dout_tile, ld, dout + (b * d.T + i0) * d.out_row + d.q_col(h), d.out_row, kRows, valid_rows, d.HS,
            packed);
  const int64_t stats_at = (b * d.NH + h) * d.T + i0;
  load_row_stats(lse_rows, delta_rows, lse + stats_at, delta + stats_at, kRows, valid_rows);

  T dq[RM][RC] = {};
  const int64_t key_end = smaller(d.T, i0 + kRows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    const int valid_keys = static_cast<int>(smaller(kKeys, key_end - j0));
    __syncthreads();  // the previous dS.K is done with k_tile and ds_tile (and q, dout are loaded)
    load_tile(k_tile, ld, qkv_b + j0 * d.qkv_row + d.k_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);
    load_tile(v_tile, ld, qkv_b + j0 * d.qkv_row + d.v_col(g), d.qkv_row, kKeys, valid_keys, d.HS, packed);
    __syncthreads();
    T s[RM][RN], dp[RM][RN];
    row_dots(s, q_tile, k_tile, ld, d.HS);
    row_dots(dp, dout_tile, v_tile, ld, d.HS);
    softmax_gradient_tile<S>(s, dp, scale, i0, j0, d.T, lse_rows, delta_rows, static_cast<T*>(nullptr), ds_tile,
                             p_ld);
    __syncthreads();
    accumulate_product(dq, ds_tile, p_ld, 1, k_tile, ld, valid_keys, d.HS);  // dq[i] += sum_j round(dS)[i, j] k[j]
  }
  store_rows(dqkv + (b * d.T + i0) * d.qkv_row + d.q_col(h), d.qkv_row, dq, scale, valid_rows, d.HS);
}

// ---- host side ----

Dims dims_of(const Tensor& qkv, AttentionHeads heads) {
  const int n_head = heads.n_head, n_kv_head = heads.n_kv_head;
  Dims d{.B = qkv.dim(0), .T = qkv.dim(1), .NH = n_head, .NKV = n_kv_head, .HS = 0, .group = heads.group,
         .phase = heads.phase, .qkv_row = qkv.dim(2), .out_row = 0};
  d.HS = static_cast<int>(d.qkv_row / (n_head + 2 * n_kv_head));
  d.out_row = int64_t{n_head} * d.HS;
  return d;
}

// Calls fn.template operator()<kHeadMax>() for the bucket that holds HS; a clear error past 256.
template <typename Fn>
void dispatch_head_size(std::string_view op, int head_size, Fn&& fn) {
  if (head_size <= 64) return fn.template operator()<64>();
  if (head_size <= 128) return fn.template operator()<128>();
  if (head_size <= kMaxHeadSize) return fn.template operator()<kMaxHeadSize>();
  throw Error(str(op, ": head size ", head_size, " is not supported by the CUDA attention kernels, which take head ",
                  "sizes 1 to ", kMaxHeadSize, " (compiled for buckets of at most 64, 128 and 256); use n_head so ",
                  "that n_embd / n_head <= ", kMaxHeadSize, ", or device = \"cpu\", whose kernel takes any head size"));
}

// The grid is (tiles along T, heads, batch): heads and batch must fit CUDA's 65535 limit of y, z.
void check_grid(std::string_view op, const Dims& d, int heads) {
  DT_CHECK(heads <= 65535 && d.B <= 65535, op, ": ", heads, " heads x batch ", d.B,
           " exceeds the CUDA grid's 65535 blocks per dimension");
}

template <typename Kernel>
void launch_tiled(Kernel kernel, dim3 grid, int64_t smem_elements, int element_bytes, auto... args) {
  const int64_t bytes = smem_elements * element_bytes;
  // Tiles are fixed at compile time; f64 at head sizes above 128 needs about 136 KB, more than
  // sm_86/sm_89 parts (A10, L4, L40) give a block. Say so rather than pass on cudaErrorInvalidValue.
  static const int limit = [] {
    int device = 0, bytes_limit = 0;
    DT_CUDA_CHECK(cudaGetDevice(&device));
    DT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return bytes_limit;
  }();
  if (bytes > limit)
    throw Error(str("attention: this head size and dtype need ", bytes, " bytes of shared memory per block and ",
                    ::dt::cuda::device_info().name, " allows ", limit, "; use f32/bf16/f16 storage (f64 is for the "
                    "CPU's finite-difference tests) or a head size of at most 128"));
  DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<grid, kThreads, static_cast<size_t>(bytes), compute_stream()>>>(args...);
  DT_CUDA_CHECK_LAUNCH();
}

unsigned tiles_along(int64_t length, int tile) { return static_cast<unsigned>((length + tile - 1) / tile); }

}  // namespace

void simt_attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  constexpr std::string_view op = "attention_forward";
  const Dims d = dims_of(qkv, heads);
  if (d.B == 0 || d.T == 0) return;
  check_grid(op, d, d.NH);
  dispatch_storage(qkv.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const T scale = T(1) / std::sqrt(T(d.HS));  // as the CPU kernel computes it
    // Every head starts at a multiple of HS, so HS a multiple of the pack width and 16-byte
    // aligned base pointers make every row of every tile aligned for 16-byte loads.
    const bool packed = can_pack<S>(d.HS, {qkv.data});
    dispatch_head_size(op, d.HS, [&]<int kHeadMax>() {
      constexpr Tile tile = fit_tile(forward_smem, kHeadMax, sizeof(T));
      static_assert(forward_smem(tile, padded(kHeadMax)) * int64_t{sizeof(T)} <= kSmemLimitBytes);
      launch_tiled(forward_kernel<S, kHeadMax, tile.rows, tile.keys>,
                   dim3(tiles_along(d.T, tile.rows), d.NH, static_cast<unsigned>(d.B)),
                   forward_smem(tile, padded(d.HS)), sizeof(T), d, scale, storage_ptr<S>(out), lse.ptr<T>(),
                   static_cast<const S*>(storage_ptr<S>(qkv)), packed);
    });
  });
}

void simt_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  constexpr std::string_view op = "attention_backward";
  const Dims d = dims_of(qkv, heads);
  if (d.B == 0 || d.T == 0) return;
  check_grid(op, d, d.NH);
  dispatch_storage(qkv.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const T scale = T(1) / std::sqrt(T(d.HS));
    const bool packed = can_pack<S>(d.HS, {qkv.data, dout.data});  // as in the forward
    dispatch_head_size(op, d.HS, [&]<int kHeadMax>() {
      // D = rowsum(dout * out), (B, NH, T) like lse; freed to the stream-ordered cache on return.
      const Buffer delta_buffer(static_cast<size_t>(d.B * d.NH * d.T) * sizeof(T), MemTag::workspace, Device::cuda,
                                /*zero=*/false);
      T* delta = static_cast<T*>(delta_buffer.data());
      constexpr int kRowThreads = 256;
      const int64_t warps = d.B * d.T * d.NH;
      const int64_t wave = int64_t{::dt::cuda::device_info().sm_count} * 32;  // grid-stride beyond that
      const unsigned row_blocks =
          static_cast<unsigned>(std::min<int64_t>((warps + kRowThreads / 32 - 1) / (kRowThreads / 32), wave));
      softmax_row_term_kernel<S><<<row_blocks, kRowThreads, 0, compute_stream()>>>(
          d, delta, storage_ptr<S>(dout), storage_ptr<S>(out));
      DT_CUDA_CHECK_LAUNCH();

      constexpr Tile kv_tile = fit_tile(dkdv_smem, kHeadMax, sizeof(T));
      static_assert(dkdv_smem(kv_tile, padded(kHeadMax)) * int64_t{sizeof(T)} <= kSmemLimitBytes);
      launch_tiled(dkdv_kernel<S, kHeadMax, kv_tile.rows, kv_tile.keys>,
                   dim3(tiles_along(d.T, kv_tile.keys), d.NKV, static_cast<unsigned>(d.B)),
                   dkdv_smem(kv_tile, padded(d.HS)), sizeof(T), d, scale, storage_ptr<S>(dqkv),
                   static_cast<const S*>(storage_ptr<S>(dout)), static_cast<const S*>(storage_ptr<S>(qkv)),
                   static_cast<const T*>(lse.ptr<T>()), static_cast<const T*>(delta), packed);

      constexpr Tile q_tile = fit_tile(dq_smem, kHeadMax, sizeof(T));
      static_assert(dq_smem(q_tile, padded(kHeadMax)) * int64_t{sizeof(T)} <= kSmemLimitBytes);
      launch_tiled(dq_kernel<S, kHeadMax, q_tile.rows, q_tile.keys>,
                   dim3(tiles_along(d.T, q_tile.rows), d.NH, static_cast<unsigned>(d.B)),
                   dq_smem(q_tile, padded(d.HS)), sizeof(T), d, scale, storage_ptr<S>(dqkv),
                   static_cast<const S*>(storage_ptr<S>(dout)), static_cast<const S*>(storage_ptr<S>(qkv)),
                   static_cast<const T*>(lse.ptr<T>()), static_cast<const T*>(delta), packed);
    });
  });
}

// cuDNN where it takes the call: its tensor-core kernels run the 16-bit attention of GPT-2 and
// Llama shapes many times faster than the SIMT ones (the closing figures of issue 20 in the
// README). Shapes it refuses (f32, f64, odd head sizes, a tensor-parallel rank's heads) run here.
void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  if (qkv.dim(0) == 0 || qkv.dim(1) == 0) return;
  if (cudnn_attention_refusal(qkv, heads, /*backward=*/false, {out.data, lse.data, qkv.data}).empty())
    return cudnn_attention_forward(out, lse, qkv, heads);
  simt_attention_forward(out, lse, qkv, heads);
}

void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  if (qkv.dim(0) == 0 || qkv.dim(1) == 0) return;
  if (cudnn_attention_refusal(qkv, heads, /*backward=*/true, {dqkv.data, dout.data, qkv.data, out.data, lse.data})
          .empty())
    return cudnn_attention_backward(dqkv, dout, qkv, out, lse, heads);
  simt_attention_backward(dqkv, dout, qkv, out, lse, heads);
}

std::string attention_kernels(const Tensor& qkv, AttentionHeads heads) {
  const std::string forward = cudnn_attention_refusal(qkv, heads, false, {qkv.data});
  const std::string backward = forward.empty() ? cudnn_attention_refusal(qkv, heads, true, {qkv.data}) : forward;
  return attention_kernels_chosen(forward, backward, "dtrain's SIMT flash attention");
}

}  // namespace dt::kernels::cuda
