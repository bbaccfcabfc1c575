// Token dispatch and combine (kernels/moe_permute.h) on the GPU.
//
// moe_count_assignments: a histogram of the experts with integer atomics (exact, so the counts
// do not depend on timing), copied to the host: the one synchronization of the dispatch.
//
// moe_assign_rows: CUB's stable radix sort of the assignments' indices by expert gives the
// expert-contiguous order, equal experts in assignment order: sorted position r is row r, the
// CPU's counting sort exactly. With a capacity, a first sort by (expert, weight descending) puts
// each expert's assignments in moe_math::ranks_before's order (the weight's key bits keep that
// order: NaN lowest, -0 as +0; equal keys stay in assignment order); those at rank >= capacity
// within their expert are dropped, and the second sort then sends them past every expert
// (key E) so that they take no row.
//
// The row kernels move 16-byte packs (4 f32, 2 f64, 8 bf16/f16) when C and the pointers allow,
// else single elements, in grid-stride loops over one wave of blocks (elementwise.cuh's grid).
// Sums run in slot order in the compute type, the weighted ones as fused multiply-adds (fmaf,
// as the CPU's std::fma), each 16-bit result rounded once: the CPU's bits. dweights is a warp's
// sum over C (lane partials then a butterfly), within a few ulps of the CPU's; fixed orders and
// no floating-point atomics, so every result repeats bit for bit.
#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/moe_permute.h"

namespace dt::kernels::cuda {

namespace {

constexpr int kThreads = kElementwiseThreads;
constexpr unsigned kFullMask = 0xffffffffu;
unsigned grid_for(int64_t work) { return std::max(1u, one_wave_grid(work)); }

// A grid-stride loop: for (int64_t i = grid_first(); i < n; i += grid_stride()).
__device__ __forceinline__ int64_t grid_first() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

Buffer device_scratch(size_t bytes) {
  return Buffer(std::max<size_t>(bytes, 1), MemTag::workspace, Device::cuda, false);
}

// ---- the dispatch ------------------------------------------------------------------------

__global__ void count_kernel(int32_t* counts, const int32_t* experts, int64_t A, int64_t E) {
  for (int64_t i = grid_first(); i < A; i += grid_stride()) {
    const int32_t e = experts[i];
    atomicAdd(counts + (e >= 0 && e < E ? e : E), 1);
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) out[i] = static_cast<int32_t>(i);
}

// Unsigned bits ordered as moe_math::ranks_before orders weights: a larger weight, larger bits;
// -0 as +0; a NaN below every number (0; no number maps to 0: only a NaN has the bits ~0).
__device__ __forceinline__ uint32_t weight_order_bits(float w) {
  if (w != w) return 0;
  const uint32_t b = __float_as_uint(w == 0.0f ? 0.0f : w);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Key of the capacity sort: expert in the high word, the weight's order bits inverted below
// (ascending keys: expert ascending, weight descending).
__global__ void capacity_keys_kernel(uint64_t* keys, const int32_t* experts, const float* weights, int64_t A) {
  for (int64_t i = grid_first(); i < A; i += grid_stride()) {
    keys[i] = (static_cast<uint64_t>(experts[i]) << 32) | (0xffffffffu - weight_order_bits(weights[i]));
  }
}

// kept[index[r]] for sorted position r: its rank within its expert below capacity. The expert's
// first position is a binary search for its smallest key.
__global__ void keep_kernel(uint8_t* kept, const uint64_t* sorted_keys, const int32_t* index, int64_t A,
                            int64_t capacity) {
  for (int64_t r = grid_first(); r < A; r += grid_stride()) {
    const uint64_t first_key = sorted_keys[r] & 0xffffffff00000000ull;
    int64_t lo = 0, hi = r;  // the first position with key >= first_key is in [lo, hi]
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted_keys[mid] < first_key)
        lo = mid + 1;
      else
        hi = mid;
    }
    kept[index[r]] = r - lo < capacity;
  }
}

// Key of the row sort: the expert, or E for a dropped assignment (kept null: none dropped).
__global__ void row_keys_kernel(uint32_t* keys, const int32_t* experts, const uint8_t* kept, int64_t A, int64_t E) {
  for (int64_t i = grid_first(); i < A; i += grid_stride())
    keys[i] = kept == nullptr || kept[i] ? static_cast<uint32_t>(experts[i]) : static_cast<uint32_t>(E);
}

__global__ void rows_kernel(int32_t* row_of, const uint32_t* sorted_keys, const int32_t* index, int64_t A, int64_t E) {
  for (int64_t r = grid_first(); r < A; r += grid_stride())
    row_of[index[r]] = sorted_keys[r] < E ? static_cast<int32_t>(r) : -1;
}

// Bits that distinguish keys below `limit`: the radix sort looks at no more.
int key_bits(int64_t limit) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < limit) ++bits;
  return bits;
}

// Stable ascending sort of `keys` (A of them), carrying the assignment indices 0..A-1 along.
template <typename Key>
void sort_indices(const Key* keys, Key* sorted_keys, int32_t* sorted_index, int64_t A, int end_bit) {
  const cudaStream_t stream = compute_stream();
  Buffer index = device_scratch(static_cast<size_t>(A) * sizeof(int32_t));
  auto* in = static_cast<int32_t*>(index.data());
  iota_kernel<<<grid_for(A), kThreads, 0, stream>>>(in, A);
  DT_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = 0;
  const auto count = static_cast<int>(A);
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_keys, in, sorted_index, count, 0,
                                                end_bit, stream));
  Buffer temp = device_scratch(temp_bytes);
  DT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys, sorted_keys, in, sorted_index, count, 0,
                                                end_bit, stream));
}

// ---- the rows ----------------------------------------------------------------------------

__device__ __forceinline__ float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_of(double a, double b, double c) { return fma(a, b, c); }

template <typename S, int V>
__device__ __forceinline__ Pack<S, V>& pack_at(S* base, int64_t row, int64_t C, int64_t p) {
  return reinterpret_cast<Pack<S, V>*>(base + row * C)[p];
}
template <typename S, int V>
__device__ __forceinline__ const Pack<S, V>& pack_at(const S* base, int64_t row, int64_t C, int64_t p) {
  return reinterpret_cast<const Pack<S, V>*>(base + row * C)[p];
}

// permuted[row_of[i]] = x[i / k], pack p of each row.
template <typename S, int V>
__global__ void permute_kernel(S* permuted, const S* x, const int32_t* row_of, int64_t A, int64_t k, int64_t C) {
  const int64_t packs = C / V;
  for (int64_t t = grid_first(); t < A * packs; t += grid_stride()) {
    const int64_t i = t / packs, p = t % packs;
    const int32_t r = row_of[i];
    if (r >= 0) pack_at<S, V>(permuted, r, C, p) = pack_at<S, V>(x, i / k, C, p);
  }
}

// out[n] = sum over kept j of (weighted ? fma(w[n, j], rows[row_of[n, j]], acc) : rows[...] + acc).
template <typename S, int V, bool kWeighted>
__global__ void gather_sum_kernel(S* out, const S* rows, const compute_t<S>* weights, const int32_t* row_of, int64_t N,
                                  int64_t k, int64_t C) {
  using T = compute_t<S>;
  const int64_t packs = C / V;
  for (int64_t t = grid_first(); t < N * packs; t += grid_stride()) {
    const int64_t n = t / packs, p = t % packs;
    T acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_of[n * k + j];
      if (r < 0) continue;
      const Pack<S, V> y = pack_at<S, V>(rows, r, C, p);
      if constexpr (kWeighted) {
        const T w = weights[n * k + j];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = fma_of(w, load(y.v[v]), acc[v]);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += load(y.v[v]);
      }
    }
    Pack<S, V> o;
#pragma unroll
    for (int v = 0; v < V; ++v) store(&o.v[v], acc[v]);
    pack_at<S, V>(out, n, C, p) = o;
  }
}

// One warp per assignment i: dy[row_of[i]] = w[i] * dout[i / k] and dweights[i] = <dout, y> over
// the row, lane partials (packs lane, lane + 32, ...) added by a butterfly.
template <typename S, int V>
__global__ void unpermute_backward_kernel(S* dy, compute_t<S>* dweights, const S* dout, const S* y,
                                          const compute_t<S>* weights, const int32_t* row_of, int64_t A, int64_t k,
                                          int64_t C) {
  using T = compute_t<S>;
  constexpr int kWarps = kThreads / 32;
  const int64_t packs = C / V;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; i < A;
       i += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int32_t r = row_of[i];
    if (r < 0) {  // the same for the whole warp
      if (lane == 0) dweights[i] = 0;
      continue;
    }
    const T w = weights[i];
    T dot = 0;
    for (int64_t p = lane; p < packs; p += 32) {
      const Pack<S, V> d = pack_at<S, V>(dout, i / k, C, p), yv = pack_at<S, V>(y, r, C, p);
      Pack<S, V> g;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const T dv = load(d.v[v]);
        store(&g.v[v], w * dv);
        dot = fma_of(dv, load(yv.v[v]), dot);
      }
      pack_at<S, V>(dy, r, C, p) = g;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
    if (lane == 0) dweights[i] = dot;
  }
}

// Runs launch.template operator()<S, V>() with V the pack width when C and every pointer allow.
template <typename S, typename Launch>
void with_pack_width(int64_t C, std::initializer_list<const void*> pointers, Launch&& launch) {
  if (can_pack<S>(C, pointers))
    launch.template operator()<kPackWidth<S>>();
  else
    launch.template operator()<1>();
  DT_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::vector<int64_t> moe_count_assignments(Tensor experts, int64_t num_experts) {
  const int64_t A = experts.numel(), E = num_experts;
  Buffer counts(static_cast<size_t>(E + 1) * sizeof(int32_t), MemTag::workspace, Device::cuda, /*zero=*/true);
  if (A > 0) {
    count_kernel<<<grid_for(A), kThreads, 0, compute_stream()>>>(static_cast<int32_t*>(counts.data()),
                                                                 static_cast<const int32_t*>(experts.data), A, E);
    DT_CUDA_CHECK_LAUNCH();
  }
  const std::vector<int32_t> host = host_values<int32_t>(counts.view(DType::i32, {E + 1}));
  return std::vector<int64_t>(host.begin(), host.end());
}

void moe_assign_rows(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity) {
  const int64_t A = experts.numel(), E = num_experts;
  if (A == 0) return;
  const cudaStream_t stream = compute_stream();
  const auto* ex = static_cast<const int32_t*>(experts.data);
  const size_t index_bytes = static_cast<size_t>(A) * sizeof(int32_t);
  Buffer sorted_index = device_scratch(index_bytes);
  auto* order = static_cast<int32_t*>(sorted_index.data());

  Buffer kept;
  if (capacity > 0) {
    Buffer keys = device_scratch(static_cast<size_t>(A) * sizeof(uint64_t));
    Buffer sorted_keys = device_scratch(static_cast<size_t>(A) * sizeof(uint64_t));
    auto* k64 = static_cast<uint64_t*>(keys.data());
    auto* s64 = static_cast<uint64_t*>(sorted_keys.data());
    capacity_keys_kernel<<<grid_for(A), kThreads, 0, stream>>>(k64, ex, static_cast<const float*>(weights.data), A);
    DT_CUDA_CHECK_LAUNCH();
    sort_indices(k64, s64, order, A, 32 + key_bits(E));
    kept = device_scratch(static_cast<size_t>(A));
    keep_kernel<<<grid_for(A), kThreads, 0, stream>>>(static_cast<uint8_t*>(kept.data()), s64, order, A, capacity);
    DT_CUDA_CHECK_LAUNCH();
  }

  Buffer keys = device_scratch(index_bytes), sorted_keys = device_scratch(index_bytes);
  auto* k32 = static_cast<uint32_t*>(keys.data());
  auto* s32 = static_cast<uint32_t*>(sorted_keys.data());
  row_keys_kernel<<<grid_for(A), kThreads, 0, stream>>>(k32, ex, static_cast<const uint8_t*>(kept.data()), A, E);
  DT_CUDA_CHECK_LAUNCH();
  sort_indices(k32, s32, order, A, key_bits(E + 1));
  rows_kernel<<<grid_for(A), kThreads, 0, stream>>>(static_cast<int32_t*>(row_of.data), s32, order, A, E);
  DT_CUDA_CHECK_LAUNCH();
  // The workspaces go back to the caching allocator in stream order: no later user of their
  // memory can overtake the kernels above.
}

void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of) {
  const int64_t A = row_of.numel(), k = row_of.dim(1), C = x.dim(1);
  if (A == 0 || C == 0) return;
  dispatch_storage(x.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(permuted);
    const S* in = storage_ptr<S>(x);
    const auto* rows = static_cast<const int32_t*>(row_of.data);
    with_pack_width<S>(C, {o, in}, [&]<int V>() {
      permute_kernel<S, V><<<grid_for(A * (C / V)), kThreads, 0, compute_stream()>>>(o, in, rows, A, k, C);
    });
  });
}

void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of) {
  const int64_t N = dx.dim(0), k = row_of.dim(1), C = dx.dim(1);
  if (N == 0 || C == 0) return;
  dispatch_storage(dx.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(dx);
    const S* in = storage_ptr<S>(dpermuted);
    const auto* rows = static_cast<const int32_t*>(row_of.data);
    with_pack_width<S>(C, {o, in}, [&]<int V>() {
      gather_sum_kernel<S, V, false>
          <<<grid_for(N * (C / V)), kThreads, 0, compute_stream()>>>(o, in, nullptr, rows, N, k, C);
    });
  });
}

void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of) {
  const int64_t N = out.dim(0), k = row_of.dim(1), C = out.dim(1);
  if (N == 0 || C == 0) return;
  dispatch_storage(out.dtype, [&]<typename S>() {
    S* o = storage_ptr<S>(out);
    const S* in = storage_ptr<S>(y);
    const auto* w = static_cast<const compute_t<S>*>(weights.data);
    const auto* rows = static_cast<const int32_t*>(row_of.data);
    with_pack_width<S>(C, {o, in}, [&]<int V>() {
      gather_sum_kernel<S, V, true><<<grid_for(N * (C / V)), kThreads, 0, compute_stream()>>>(o, in, w, rows, N, k, C);
    });
  });
}

void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of) {
  const int64_t A = row_of.numel(), k = row_of.dim(1), C = y.dim(1);
  if (A == 0) return;
  dispatch_storage(y.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* g = storage_ptr<S>(dy);
    const S *d = storage_ptr<S>(dout), *yp = storage_ptr<S>(y);
    auto* dw = static_cast<T*>(dweights.data);
    const auto* w = static_cast<const T*>(weights.data);
    const auto* rows = static_cast<const int32_t*>(row_of.data);
    const unsigned blocks = grid_for(A * 32);  // a warp per assignment
    with_pack_width<S>(C, {g, d, yp}, [&]<int V>() {
      unpermute_backward_kernel<S, V><<<blocks, kThreads, 0, compute_stream()>>>(g, dw, d, yp, w, rows, A, k, C);
    });
  });
}

}  // namespace dt::kernels::cuda
