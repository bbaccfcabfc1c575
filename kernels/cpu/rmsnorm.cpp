#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/row_blocks.h"
#include "kernels/rmsnorm.h"

namespace dt::kernels::cpu {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t C = inp.dim(-1), N = inp.numel() / C;
    const T *x = inp.ptr<T>(), *w = weight.ptr<T>();
    T *o = out.ptr<T>(), *rstd_out = rstd.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      T sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t c = 0; c < C; ++c) sq += xr[c] * xr[c];
      const T s = T{1} / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
      T* orow = o + n * C;
      // (x * rstd) * weight, in Hugging Face's LlamaRMSNorm order.
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * s * w[c];
      rstd_out[n] = s;
    }
  });
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t C = inp.dim(-1), N = inp.numel() / C;
    const T *x = inp.ptr<T>(), *w = weight.ptr<T>(), *dy = dout.ptr<T>(), *rs = rstd.ptr<T>();
    T *dx = dinp.ptr<T>(), *dw = dweight.ptr<T>();
    // dweight through fixed row blocks: the same bits for any thread count (row_blocks.h).
    const int64_t blocks = row_blocks(N);
    Buffer partial_buffer(static_cast<size_t>(blocks * C) * sizeof(T), MemTag::workspace);
    T* partials = static_cast<T*>(partial_buffer.data());
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < blocks; ++k) {
      const Range rows = split_range(N, static_cast<int>(blocks), static_cast<int>(k));
      T* pw = partials + k * C;
      for (int64_t n = rows.begin; n < rows.end; ++n) {
        const T *xr = x + n * C, *dyr = dy + n * C;
        const T s = rs[n];
        // xhat = x * s, dxhat = dy * w; d(rstd)/dx = -rstd^3 x / C gives
        // dx = s * (dxhat - xhat * mean(dxhat * xhat)).
        T sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat_xhat)
        for (int64_t c = 0; c < C; ++c) {
          const T xhat = xr[c] * s;
          sum_dxhat_xhat += dyr[c] * w[c] * xhat;
          pw[c] += dyr[c] * xhat;
        }
        const T mean_dxhat_xhat = sum_dxhat_xhat / static_cast<T>(C);
        T* dxr = dx + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dxr[c] += s * (dyr[c] * w[c] - xr[c] * s * mean_dxhat_xhat);
      }
    }
    add_block_partials(dw, partials, blocks, C, C);
  });
}

}  // namespace dt::kernels::cpu
