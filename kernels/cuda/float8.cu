// FP8 quantization (kernels/float8.h) on the GPU. The cast is CUDA's __nv_cvt_float_to_fp8 with
// __NV_SATFINITE (one cvt.rn.satfinite instruction from sm_89), whose bytes
// kernels/float8_math.h's cast equals (kernels/cuda/float8_cvt_test.cpp); scales come from the
// same scale_from_amax, so a GPU run quantizes to the CPU's bytes.
//
// An amax is a max over the bits of |x|: non-negative floats order as their bits do, and a NaN's
// bits lie above infinity's, so the max of bits is the max of values with NaN kept, and an
// atomicMax on them is exact whatever the order (and accumulates into the amax there). Memory-bound kernels, one element per thread;
// a tile is one block's.
#include <cuda_fp8.h>

#include "kernels/cuda/storage.cuh"
#include "kernels/float8.h"

namespace dt::kernels::cuda {

namespace {

using float8_math::Format;

constexpr int kThreads = 256;

__device__ __forceinline__ uint8_t cast(float x, Format format) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, format == Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
}

__device__ __forceinline__ unsigned magnitude_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// The max over the block's threads, in every thread. warp_max: 32 shared slots.
__device__ unsigned block_max(unsigned v, unsigned* warp_max) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned total = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) total = max(total, warp_max[w]);
  __syncthreads();
  return total;
}

template <typename S>
__global__ void amax_kernel(unsigned* amax_bits, const S* x, int64_t n) {
  __shared__ unsigned warp_max[32];
  unsigned local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    local = max(local, magnitude_bits(static_cast<float>(load(x[i]))));
  const unsigned block = block_max(local, warp_max);
  if (threadIdx.x == 0) atomicMax(amax_bits, block);
}

__global__ void scale_kernel(float* scale, const float* amax, int64_t n, Format format, int margin, bool pow2,
                             bool fallback_one) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) scale[i] = float8_math::scale_from_amax(amax[i], format, margin, pow2, fallback_one ? 1.0f : scale[i]);
}

// With amax_bits, the block's max of |x| too, atomically maxed into it.
template <typename S>
__global__ void quantize_kernel(uint8_t* q, float* scale_inv, const S* x, const float* scale, int64_t n,
                                Format format, unsigned* amax_bits) {
  __shared__ unsigned warp_max[32];
  const float s = *scale;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i == 0) *scale_inv = 1.0f / s;
  unsigned local = 0;
  for (int64_t j = i; j < n; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = static_cast<float>(load(x[j]));
    local = max(local, magnitude_bits(v));
    q[j] = cast(v * s, format);
  }
  if (amax_bits == nullptr) return;
  const unsigned block = block_max(local, warp_max);
  if (threadIdx.x == 0) atomicMax(amax_bits, block);
}

// Block t quantizes tile t of the (R, C) view: tiles (th, tw), tile_cols of them a row.
template <typename S>
__global__ void quantize_tiles_kernel(uint8_t* q, float* scale_inv, const S* x, int64_t C, int64_t th, int64_t tw,
                                      int64_t tile_cols, Format format) {
  __shared__ unsigned warp_max[32];
  const int64_t t = blockIdx.x, r0 = t / tile_cols * th, c0 = t % tile_cols * tw, count = th * tw;
  unsigned local = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x)
    local = max(local, magnitude_bits(static_cast<float>(load(x[(r0 + k / tw) * C + c0 + k % tw]))));
  const float amax = __uint_as_float(block_max(local, warp_max));
  const float s = float8_math::scale_from_amax(amax, format, 0, /*pow2=*/true, 1.0f);
  if (threadIdx.x == 0) scale_inv[t] = 1.0f / s;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t i = (r0 + k / tw) * C + c0 + k % tw;
    q[i] = cast(static_cast<float>(load(x[i])) * s, format);
  }
}

template <typename S>
__global__ void dequantize_kernel(S* out, const uint8_t* q, const float* scale_inv, int64_t n, int64_t C, int64_t th,
                                  int64_t tw, int64_t tile_cols, Format format) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    store(out + i, float8_math::decode(q[i], format) * scale_inv[r / th * tile_cols + c / tw]);
  }
}

unsigned grid_for(int64_t n) { return std::min<unsigned>(blocks_for(n, kThreads), 65535u * 8); }

// The (R, C) view and its tiles, as kernels/cpu/float8.cpp counts them.
struct TileGrid {
  int64_t R, C, th, tw;
  TileGrid(const Tensor& t, Float8Tiles tiles) {
    C = t.ndim() == 0 ? 1 : t.dim(-1);
    R = C == 0 ? 0 : t.numel() / C;
    th = tiles.is_whole() ? std::max<int64_t>(R, 1) : tiles.rows;
    tw = tiles.is_whole() ? std::max<int64_t>(C, 1) : tiles.cols;
  }
  int64_t tile_cols() const { return C / tw; }
  int64_t tiles() const { return R / th * tile_cols(); }
};

}  // namespace

void float8_amax(Tensor amax, Tensor x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_storage(x.dtype, [&]<typename S>() {
    amax_kernel<S><<<std::min(grid_for(n), 1024u), kThreads, 0, compute_stream()>>>(
        static_cast<unsigned*>(amax.data), storage_ptr<S>(x), n);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void float8_scale(Tensor scale, Tensor amax, Format format, int margin, bool pow2, Float8Fallback fallback) {
  const int64_t n = amax.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
      scale.ptr<float>(), amax.ptr<float>(), n, format, margin, pow2, fallback == Float8Fallback::one);
  DT_CUDA_CHECK_LAUNCH();
}

void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax) {
  const Format format = float8_format(q.data.dtype);
  const int64_t n = x.numel();
  unsigned* amax_bits = amax.defined() ? static_cast<unsigned*>(amax.data) : nullptr;
  dispatch_storage(x.dtype, [&]<typename S>() {
    quantize_kernel<S><<<std::max(grid_for(n), 1u), kThreads, 0, compute_stream()>>>(
        q.data.ptr<uint8_t>(), q.scale_inv.ptr<float>(), storage_ptr<S>(x), scale.ptr<float>(), n, format, amax_bits);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void float8_quantize_tiles(Float8Tensor q, Tensor x) {
  const Format format = float8_format(q.data.dtype);
  const TileGrid grid(x, q.tiles);
  if (grid.tiles() == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (grid.th * grid.tw + 31) / 32 * 32));
  dispatch_storage(x.dtype, [&]<typename S>() {
    quantize_tiles_kernel<S><<<static_cast<unsigned>(grid.tiles()), threads, 0, compute_stream()>>>(
        q.data.ptr<uint8_t>(), q.scale_inv.ptr<float>(), storage_ptr<S>(x), grid.C, grid.th, grid.tw, grid.tile_cols(),
        format);
    DT_CUDA_CHECK_LAUNCH();
  });
}

void float8_dequantize(Tensor out, Float8Tensor q) {
  const Format format = float8_format(q.data.dtype);
  const TileGrid grid(out, q.tiles);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_storage(out.dtype, [&]<typename S>() {
    dequantize_kernel<S><<<grid_for(n), kThreads, 0, compute_stream()>>>(storage_ptr<S>(out), q.data.ptr<uint8_t>(),
                                                                         q.scale_inv.ptr<float>(), n, grid.C, grid.th,
                                                                         grid.tw, grid.tile_cols(), format);
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dt::kernels::cuda
