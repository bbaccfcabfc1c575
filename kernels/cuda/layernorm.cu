// layernorm_forward, add_layernorm_forward and layernorm_backward (kernels/layernorm.h) on the
// GPU.
//
// Forward: one block per row, read once into registers (kernels/cuda/row_packs.cuh: each thread
// owns the same 16-byte packs of columns in every pass, 4 f32, 2 f64, 8 bf16/f16, or single
// elements when C or a pointer does not allow packs), then three passes over them: the sum, the
// squared deviations (the two-pass variance avoids the cancellation of E[x^2] - E[x]^2, as on
// the CPU) and the output. Row sums go through warp shuffles and then the warps' sums in warp
// order, so the bits depend only on C.
//
// The fused add_layernorm_forward is the same kernel with a second input: its first pass reads
// a and b instead of the row, stores res = a + b, and keeps and sums the stored values. res may
// be a or b: each pack is read before it is overwritten, by the one thread that owns it. The
// pack width is the one the plain forward would pick for res, so the sums run in its order and
// the bits are those of add_forward followed by layernorm_forward; a and b, which may be off
// 16-byte alignment where res is not, are then read element by element.
//
// Backward: dinp += is per row, but dweight and dbias are sums over all N rows. No atomics (the
// result must repeat bit for bit): the rows are cut into G = min(N, 1024) contiguous ranges, a
// number fixed by N alone, and block k walks its range in row order, adding each row's terms
// into per-column partials in registers (each thread owns its columns). The partials go to a
// workspace; a second kernel adds them into dweight and dbias in a fixed order
// (kernels/cuda/column_partials.cuh, shared with rmsnorm.cu). 1024 ranges keep every SM busy on
// the first kernel while the partials (8 KiB per column) stay small next to the rows themselves.
#include <cstdint>

#include "core/buffer.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/residual_rows.cuh"
#include "kernels/cuda/row_packs.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/layernorm.h"

namespace dt::kernels::cuda {

namespace {

__device__ __forceinline__ float rsqrt_of(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double rsqrt_of(double x) { return 1.0 / sqrt(x); }

// One block per row n: sets out[n, :], mean[n], rstd[n] of inp[n, :], or with inp2 sets
// res[n, :] = inp[n, :] + inp2[n, :] and normalizes that. Each thread holds P packs.
template <typename S, int V, int P>
__global__ void __launch_bounds__(kMaxRowThreads)
    forward_kernel(S* out, compute_t<S>* mean, compute_t<S>* rstd, S* res, const S* inp, const S* inp2,
                   bool inputs_aligned, const S* weight, const S* bias, int64_t C, float eps) {
  using T = compute_t<S>;
  __shared__ T warp_sums[32];
  const int64_t n = blockIdx.x, packs = C / V;
  const bool fused = inp2 != nullptr;
  S* r = fused ? res + n * C : nullptr;
  const S* y = fused ? inp2 + n * C : nullptr;
  Pack<S, V> xp[P];
  T sum = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (owned_pack(i) >= packs) break;
    xp[i] = input_pack<S, V>(r, inp + n * C, y, owned_pack(i), inputs_aligned);
#pragma unroll
    for (int k = 0; k < V; ++k) sum += load(xp[i].v[k]);
  }
  const T m = block_sum(sum, warp_sums) / static_cast<T>(C);
  T sq = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (owned_pack(i) >= packs) break;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const T d = load(xp[i].v[k]) - m;
      sq += d * d;
    }
  }
  const T s = rsqrt_of(block_sum(sq, warp_sums) / static_cast<T>(C) + static_cast<T>(eps));
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t p = owned_pack(i);
    if (p >= packs) break;
    const Pack<S, V> wp = load_pack<S, V>(weight, p), bp = load_pack<S, V>(bias, p);
    Pack<S, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) store(&o.v[k], (load(xp[i].v[k]) - m) * s * load(wp.v[k]) + load(bp.v[k]));
    reinterpret_cast<Pack<S, V>*>(out + n * C)[p] = o;
  }
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// Block k of G walks rows [begin, end) of its range: dinp += per row, and the rows' dweight
// and dbias terms summed in row order into partials[k] = (dweight (C), dbias (C)). Each thread
// holds P packs of the weight, of the row and of its partials.
//   dxhat = dout * w;  dinp += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
template <typename S, int V, int P>
__global__ void __launch_bounds__(kMaxRowThreads)
    backward_kernel(compute_t<S>* partials, S* dinp, const S* dout, const S* inp, const S* weight,
                    const compute_t<S>* mean, const compute_t<S>* rstd, int64_t N, int64_t C) {
  using T = compute_t<S>;
  __shared__ T warp_sums[32];
  const int64_t packs = C / V;
  Pack<S, V> wp[P], xp[P], dyp[P];
  T part[2][P][V] = {};  // this thread's columns of the block's dweight and dbias partials
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (owned_pack(i) < packs) wp[i] = load_pack<S, V>(weight, owned_pack(i));
  const RowRange rows = block_row_range(N);
  for (int64_t n = rows.begin; n < rows.end; ++n) {
    const S *x = inp + n * C, *dy = dout + n * C;
    const T m = mean[n], s = rstd[n];
    T sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t p = owned_pack(i);
      if (p >= packs) break;
      xp[i] = load_pack<S, V>(x, p);
      dyp[i] = load_pack<S, V>(dy, p);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const T xhat = (load(xp[i].v[j]) - m) * s, g = load(dyp[i].v[j]), dxhat = g * load(wp[i].v[j]);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        part[0][i][j] += g * xhat;
        part[1][i][j] += g;
      }
    }
    const T mean_dxhat = block_sum(sum_dxhat, warp_sums) / static_cast<T>(C);
    const T mean_dxhat_xhat = block_sum(sum_dxhat_xhat, warp_sums) / static_cast<T>(C);
    S* dx = dinp + n * C;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t p = owned_pack(i);
      if (p >= packs) break;
      Pack<S, V> dxp = load_pack<S, V>(dx, p);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const T xhat = (load(xp[i].v[j]) - m) * s;
        const T d = s * (load(dyp[i].v[j]) * load(wp[i].v[j]) - mean_dxhat - xhat * mean_dxhat_xhat);
        store(&dxp.v[j], load(dxp.v[j]) + d);
      }
      reinterpret_cast<Pack<S, V>*>(dx)[p] = dxp;
    }
  }
  store_column_partials(partials, part, C);
}

// Both forwards: layernorm of x's rows, or with y defined, of res = x + y.
void forward(Tensor out, Tensor mean, Tensor rstd, Tensor res, Tensor x, Tensor y, Tensor weight, Tensor bias,
             float eps) {
  const int64_t C = x.dim(-1), N = C == 0 ? 0 : x.numel() / C;
  if (N == 0 || C == 0) return;
  dispatch_storage(x.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S *o = storage_ptr<S>(out), *r = storage_ptr<S>(res);
    const S *a = storage_ptr<S>(x), *b = storage_ptr<S>(y), *w = storage_ptr<S>(weight),
            *bi = storage_ptr<S>(bias);
    T *m = static_cast<T*>(mean.data), *s = static_cast<T*>(rstd.data);
    const auto grid = static_cast<unsigned>(N);
    // Packs as layernorm_forward would choose them for the row it normalizes (res when fused).
    const bool packed = can_pack<S>(C, {o, b != nullptr ? r : a, w, bi});
    with_row_layout<S>(C, packed, "layernorm_forward", [&]<int V, int P>() {
      const bool inputs_aligned = V == 1 || b == nullptr || (aligned_16(a) && aligned_16(b));
      forward_kernel<S, V, P><<<grid, row_threads(C / V), 0, compute_stream()>>>(o, m, s, r, a, b, inputs_aligned,
                                                                                  w, bi, C, eps);
    });
    DT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps) {
  forward(out, mean, rstd, Tensor{}, inp, Tensor{}, weight, bias, eps);
}

void add_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                           Tensor bias, float eps) {
  forward(out, mean, rstd, res, a, b, weight, bias, eps);
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd) {
  const int64_t C = inp.dim(-1), N = C == 0 ? 0 : inp.numel() / C;
  if (N == 0 || C == 0) return;
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* dx = storage_ptr<S>(dinp);
    const S *dy = storage_ptr<S>(dout), *x = storage_ptr<S>(inp), *w = storage_ptr<S>(weight);
    const T *m = static_cast<const T*>(mean.data), *s = static_cast<const T*>(rstd.data);
    const int64_t blocks = row_blocks(N);
    Buffer partial_buffer(static_cast<size_t>(blocks * 2 * C) * sizeof(T), MemTag::workspace, Device::cuda,
                          /*zero=*/false);
    T* partials = static_cast<T*>(partial_buffer.data());
    const auto grid = static_cast<unsigned>(blocks);
    with_row_layout<S>(C, can_pack<S>(C, {dx, dy, x, w}), "layernorm_backward", [&]<int V, int P>() {
      backward_kernel<S, V, P><<<grid, row_threads(C / V), 0, compute_stream()>>>(partials, dx, dy, x, w, m, s, N,
                                                                                   C);
    });
    DT_CUDA_CHECK_LAUNCH();
    add_column_partials(static_cast<T*>(dweight.data), partials, blocks, C, 2 * C);
    add_column_partials(static_cast<T*>(dbias.data), partials + C, blocks, C, 2 * C);
    // partial_buffer goes back to the caching allocator here, while the kernels may still run:
    // the allocator is stream-ordered on the compute stream, so the memory is not handed to
    // another user before they finish.
  });
}

}  // namespace dt::kernels::cuda
