// rmsnorm_forward and rmsnorm_backward (kernels/rmsnorm.h) on the GPU, laid out as
// kernels/cuda/layernorm.cu.
//
// Forward: one block per row, read twice (sum of squares, then the output; the second read hits
// L1/L2). Each thread owns the same 16-byte packs of columns in both passes (4 f32, 2 f64, 8
// bf16/f16; single elements when C or a pointer does not allow packs), and the row sum goes
// through warp shuffles and then the warps' sums in warp order, so the bits depend only on C.
//
// Backward: dinp += is per row, but dweight is a sum over all N rows. No atomics (the result
// must repeat bit for bit): the rows are cut into G = min(N, 1024) contiguous ranges, a number
// fixed by N alone, and block k walks its range in row order, adding each row's terms into
// per-column partials in shared memory (each thread owns its columns, so no two threads touch
// one partial). The partials go to a workspace; a second kernel adds them into dweight in block
// order. 1024 ranges keep every SM busy on the first kernel while the partials (4 KiB per
// column) stay small next to the rows themselves.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "core/buffer.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/rmsnorm.h"

namespace dt::kernels::cuda {

namespace {

template <typename S>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(S));
template <typename S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float rsqrt_of(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double rsqrt_of(double x) { return 1.0 / sqrt(x); }

// The sum of v over the block (a multiple of 32 threads), the same value in every thread:
// a butterfly within each warp, then the warps' sums in warp order. warp_sums: 32 shared slots.
template <typename T>
__device__ T block_sum(T v, T* warp_sums) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warp_sums[w];
  __syncthreads();  // the slots are reused by the next call
  return total;
}

template <typename S, int V>
__device__ __forceinline__ Pack<S, V> load_pack(const S* row, int64_t p) {
  return reinterpret_cast<const Pack<S, V>*>(row)[p];
}

// One block per row n: sets out[n, :] and rstd[n].
template <typename S, int V>
__global__ void forward_kernel(S* out, compute_t<S>* rstd, const S* inp, const S* weight, int64_t C, float eps) {
  using T = compute_t<S>;
  __shared__ T warp_sums[32];
  const int64_t n = blockIdx.x, packs = C / V;
  const S* x = inp + n * C;
  T sq = 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<S, V> xp = load_pack<S, V>(x, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const T v = load(xp.v[k]);
      sq += v * v;
    }
  }
  const T s = rsqrt_of(block_sum(sq, warp_sums) / static_cast<T>(C) + static_cast<T>(eps));
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<S, V> xp = load_pack<S, V>(x, p), wp = load_pack<S, V>(weight, p);
    Pack<S, V> o;
    // (x * rstd) * weight, in Hugging Face's LlamaRMSNorm order (and the CPU's).
#pragma unroll
    for (int k = 0; k < V; ++k) store(&o.v[k], load(xp.v[k]) * s * load(wp.v[k]));
    reinterpret_cast<Pack<S, V>*>(out + n * C)[p] = o;
  }
  if (threadIdx.x == 0) rstd[n] = s;
}

// Block k of G walks rows [begin, end) of its range: dinp += per row, and the rows' dweight
// terms summed in row order into partials[k] (C).
//   xhat = x * rstd, dxhat = dout * w;  dinp += rstd * (dxhat - xhat * mean(dxhat * xhat))
template <typename S, int V>
__global__ void backward_kernel(compute_t<S>* partials, S* dinp, const S* dout, const S* inp, const S* weight,
                                const compute_t<S>* rstd, int64_t N, int64_t C) {
  using T = compute_t<S>;
  __shared__ T warp_sums[32];
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* pw = reinterpret_cast<T*>(shared_bytes);  // (C) this block's dweight partial
  const int64_t packs = C / V;
  for (int64_t c = threadIdx.x * int64_t{V}; c < C; c += blockDim.x * int64_t{V})
    for (int k = 0; k < V; ++k) pw[c + k] = 0;
  // The same split as kernels/cpu/float_type.h's split_range: N / G rows each, one more for the
  // first N % G blocks.
  const int64_t G = gridDim.x, base = N / G, extra = N % G, k = blockIdx.x;
  const int64_t begin = k * base + std::min(k, extra), end = begin + base + (k < extra ? 1 : 0);
  for (int64_t n = begin; n < end; ++n) {
    const S *x = inp + n * C, *dy = dout + n * C;
    const T s = rstd[n];
    T sum_dxhat_xhat = 0;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<S, V> xp = load_pack<S, V>(x, p), dyp = load_pack<S, V>(dy, p), wp = load_pack<S, V>(weight, p);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const T xhat = load(xp.v[j]) * s, g = load(dyp.v[j]);
        sum_dxhat_xhat += g * load(wp.v[j]) * xhat;
        pw[p * V + j] += g * xhat;
      }
    }
    const T mean_dxhat_xhat = block_sum(sum_dxhat_xhat, warp_sums) / static_cast<T>(C);
    S* dx = dinp + n * C;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<S, V> xp = load_pack<S, V>(x, p), dyp = load_pack<S, V>(dy, p), wp = load_pack<S, V>(weight, p);
      Pack<S, V> dxp = load_pack<S, V>(dx, p);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const T d = s * (load(dyp.v[j]) * load(wp.v[j]) - load(xp.v[j]) * s * mean_dxhat_xhat);
        store(&dxp.v[j], load(dxp.v[j]) + d);
      }
      reinterpret_cast<Pack<S, V>*>(dx)[p] = dxp;
    }
  }
  // Each thread wrote only its own columns of pw, so no barrier is needed before this.
  T* out = partials + k * C;
  for (int64_t c = threadIdx.x * int64_t{V}; c < C; c += blockDim.x * int64_t{V})
    for (int j = 0; j < V; ++j) out[c + j] = pw[c + j];
}

// out[c] += sum over k < blocks, in a fixed order, of partials[k * stride + c]. A block covers
// 32 columns with kSlices warps; slice y sums k = y, y + kSlices, ... (each load a coalesced
// 32-column row), and the slices' sums are added in slice order.
constexpr int kSlices = 8;
template <typename T>
__global__ void add_block_partials_kernel(T* out, const T* partials, int64_t blocks, int64_t width, int64_t stride) {
  __shared__ T slice_sums[kSlices][32];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  T sum = 0;
  if (c < width)
    for (int64_t k = threadIdx.y; k < blocks; k += kSlices) sum += partials[k * stride + c];
  slice_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
    T total = 0;
    for (int y = 0; y < kSlices; ++y) total += slice_sums[y][threadIdx.x];
    out[c] += total;
  }
}

// Row ranges of the backward: a function of N alone, so the bits do not depend on the device.
constexpr int64_t kMaxRowBlocks = 1024;

// Threads for rows of `packs` packs: a multiple of 32, at most 512 (each thread then loops).
unsigned row_threads(int64_t packs) {
  return static_cast<unsigned>(std::clamp<int64_t>((packs + 31) / 32 * 32, 32, 512));
}

// Packs when C is a multiple of the pack width and every row pointer is 16-byte aligned.
template <typename S>
bool can_pack(int64_t C, std::initializer_list<const void*> pointers) {
  return C % kPackWidth<S> == 0 && std::all_of(pointers.begin(), pointers.end(), aligned_16);
}

// Lets `kernel` use `bytes` of dynamic shared memory, past the default 48 KiB where the device
// allows it; a clear error where it does not.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes, int64_t C) {
  if (bytes <= 48 * 1024) return;
  int device = 0, limit = 0;
  DT_CUDA_CHECK(cudaGetDevice(&device));
  DT_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit))
    throw Error(str("rmsnorm_backward: C = ", C, " needs ", bytes, " bytes of shared memory per block for the ",
                    "weight-gradient partials; this GPU allows ", limit, ". Use a smaller model width."));
  DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  const int64_t C = inp.dim(-1), N = C == 0 ? 0 : inp.numel() / C;
  if (N == 0) return;
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* o = storage_ptr<S>(out);
    const S *x = storage_ptr<S>(inp), *w = storage_ptr<S>(weight);
    T* s = static_cast<T*>(rstd.data);
    const auto grid = static_cast<unsigned>(N);
    if (can_pack<S>(C, {o, x, w})) {
      constexpr int V = kPackWidth<S>;
      forward_kernel<S, V><<<grid, row_threads(C / V), 0, compute_stream()>>>(o, s, x, w, C, eps);
    } else {
      forward_kernel<S, 1><<<grid, row_threads(C), 0, compute_stream()>>>(o, s, x, w, C, eps);
    }
    DT_CUDA_CHECK_LAUNCH();
  });
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd) {
  const int64_t C = inp.dim(-1), N = C == 0 ? 0 : inp.numel() / C;
  if (N == 0) return;
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* dx = storage_ptr<S>(dinp);
    const S *dy = storage_ptr<S>(dout), *x = storage_ptr<S>(inp), *w = storage_ptr<S>(weight);
    const T* s = static_cast<const T*>(rstd.data);
    const int64_t blocks = std::min(N, kMaxRowBlocks);
    Buffer partial_buffer(static_cast<size_t>(blocks * C) * sizeof(T), MemTag::workspace, Device::cuda,
                          /*zero=*/false);
    T* partials = static_cast<T*>(partial_buffer.data());
    const size_t shared_bytes = static_cast<size_t>(C) * sizeof(T);
    const auto grid = static_cast<unsigned>(blocks);
    if (can_pack<S>(C, {dx, dy, x, w})) {
      constexpr int V = kPackWidth<S>;
      allow_shared_bytes(backward_kernel<S, V>, shared_bytes, C);
      backward_kernel<S, V><<<grid, row_threads(C / V), shared_bytes, compute_stream()>>>(partials, dx, dy, x, w, s,
                                                                                          N, C);
    } else {
      allow_shared_bytes(backward_kernel<S, 1>, shared_bytes, C);
      backward_kernel<S, 1><<<grid, row_threads(C), shared_bytes, compute_stream()>>>(partials, dx, dy, x, w, s, N,
                                                                                      C);
    }
    DT_CUDA_CHECK_LAUNCH();
    const dim3 reduce_threads(32, kSlices);
    const auto reduce_grid = static_cast<unsigned>((C + 31) / 32);
    add_block_partials_kernel<T><<<reduce_grid, reduce_threads, 0, compute_stream()>>>(
        static_cast<T*>(dweight.data), partials, blocks, C, C);
    DT_CUDA_CHECK_LAUNCH();
    // partial_buffer goes back to the caching allocator here, while the kernels may still run:
    // the allocator is stream-ordered on the compute stream, so the memory is not handed to
    // another user before they finish.
  });
}

}  // namespace dt::kernels::cuda
