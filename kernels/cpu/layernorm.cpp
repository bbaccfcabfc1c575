#include <cmath>

#include "core/buffer.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/row_blocks.h"
#include "kernels/layernorm.h"

namespace dt::kernels::cpu {

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t C = inp.dim(-1), N = inp.numel() / C;
    const T *x = inp.ptr<T>(), *w = weight.ptr<T>(), *b = bias.ptr<T>();
    T *o = out.ptr<T>(), *mean_out = mean.ptr<T>(), *rstd_out = rstd.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      // Two passes (mean, then squared deviations): no cancellation, unlike E[x^2] - E[x]^2.
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < C; ++c) sum += xr[c];
      const T m = sum / static_cast<T>(C);
      T sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t c = 0; c < C; ++c) sq += (xr[c] - m) * (xr[c] - m);
      const T s = T{1} / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
      T* orow = o + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) orow[c] = (xr[c] - m) * s * w[c] + b[c];
      mean_out[n] = m;
      rstd_out[n] = s;
    }
  });
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t C = inp.dim(-1), N = inp.numel() / C;
    const T *x = inp.ptr<T>(), *w = weight.ptr<T>(), *dy = dout.ptr<T>(), *mu = mean.ptr<T>(), *rs = rstd.ptr<T>();
    T *dx = dinp.ptr<T>(), *dw = dweight.ptr<T>(), *db = dbias.ptr<T>();
    // dweight and dbias are sums over rows, taken through fixed row blocks so that they have
    // the same bits for any thread count (row_blocks.h).
    const int64_t blocks = row_blocks(N);
    Buffer partial_buffer(static_cast<size_t>(blocks * 2 * C) * sizeof(T), MemTag::workspace);
    T* partials = static_cast<T*>(partial_buffer.data());
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < blocks; ++k) {
      const Range rows = split_range(N, static_cast<int>(blocks), static_cast<int>(k));
      T* pw = partials + 2 * C * k;
      T* pb = pw + C;
      for (int64_t n = rows.begin; n < rows.end; ++n) {
        const T *xr = x + n * C, *dyr = dy + n * C;
        const T m = mu[n], s = rs[n];
        // dxhat = dy * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        T sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
        for (int64_t c = 0; c < C; ++c) {
          const T xhat = (xr[c] - m) * s, dxhat = dyr[c] * w[c];
          sum_dxhat += dxhat;
          sum_dxhat_xhat += dxhat * xhat;
          pw[c] += dyr[c] * xhat;
          pb[c] += dyr[c];
        }
        const T mean_dxhat = sum_dxhat / static_cast<T>(C), mean_dxhat_xhat = sum_dxhat_xhat / static_cast<T>(C);
        T* dxr = dx + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const T xhat = (xr[c] - m) * s;
          dxr[c] += s * (dyr[c] * w[c] - mean_dxhat - xhat * mean_dxhat_xhat);
        }
      }
    }
    add_block_partials(dw, partials, blocks, C, 2 * C);
    add_block_partials(db, partials + C, blocks, C, 2 * C);
  });
}

}  // namespace dt::kernels::cpu
