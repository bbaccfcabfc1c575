#include <cmath>
#include <vector>

#include "core/buffer.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/row_blocks.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/layernorm.h"

namespace dt::kernels::cpu {

namespace {

// One row: sets orow, mean and rstd.
template <typename T>
inline void forward_row(T* orow, T* mean, T* rstd, const T* xr, const T* w, const T* b, int64_t C, float eps) {
  // Two passes (mean, then squared deviations): no cancellation, unlike E[x^2] - E[x]^2.
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; ++c) sum += xr[c];
  const T m = sum / static_cast<T>(C);
  T sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < C; ++c) sq += (xr[c] - m) * (xr[c] - m);
  const T s = T{1} / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) orow[c] = (xr[c] - m) * s * w[c] + b[c];
  *mean = m;
  *rstd = s;
}

// One row: dxr +=, and the row's terms added into the block partials pw, pb.
template <typename T>
inline void backward_row(T* dxr, T* pw, T* pb, const T* xr, const T* dyr, const T* w, T m, T s, int64_t C) {
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
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const T xhat = (xr[c] - m) * s;
    dxr[c] += s * (dyr[c] * w[c] - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

// Both forwards: layernorm of x's rows, or with y, of res = x + y (the fused residual add).
void forward(Tensor out, Tensor mean, Tensor rstd, Tensor res, Tensor x, Tensor y, Tensor weight, Tensor bias,
             float eps) {
  dispatch_storage(x.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t C = x.dim(-1), N = x.numel() / C;
    const ResidualRows<S> rows{res.defined() ? storage_ptr<S>(res) : nullptr, storage_ptr<S>(x),
                               y.defined() ? storage_ptr<S>(y) : nullptr, C};
    S* o = storage_ptr<S>(out);
    const Widened<S> w(weight), b(bias);
    T *mean_out = mean.ptr<T>(), *rstd_out = rstd.ptr<T>();
#pragma omp parallel
    {
      // 16-bit: each row widened into f32, normalized by the f32 loops, rounded once into out.
      RowBuffers<S, 2> rows_f32(C);
      T *xbuf = rows_f32[0], *obuf = rows_f32[1];
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        // One call site for both forwards, so they run the same reduction code.
        const T* xr = rows.input(n, xbuf, obuf);
        if constexpr (!is_16bit<S>) {
          forward_row<T>(o + n * C, mean_out + n, rstd_out + n, xr, w.p, b.p, C, eps);
        } else {
          forward_row<T>(obuf, mean_out + n, rstd_out + n, xr, w.p, b.p, C, eps);
          store_row(o + n * C, obuf, C);
        }
      }
    }
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
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t C = inp.dim(-1), N = inp.numel() / C;
    const S *x = storage_ptr<S>(inp), *dy = storage_ptr<S>(dout);
    S* dx = storage_ptr<S>(dinp);
    const Widened<S> w(weight);
    const T *mu = mean.ptr<T>(), *rs = rstd.ptr<T>();
    T *dw = dweight.ptr<T>(), *db = dbias.ptr<T>();
    // dweight and dbias are sums over rows, taken through fixed row blocks so that they have
    // the same bits for any thread count (row_blocks.h). The partials are f32 (f64 with f64)
    // whatever the storage.
    const int64_t blocks = row_blocks(N);
    Buffer partial_buffer(static_cast<size_t>(block_partial_elements(N, C, 2)) * sizeof(T), MemTag::workspace);
    T* partials = static_cast<T*>(partial_buffer.data());
#pragma omp parallel
    {
      // 16-bit rows of inp, dout and dinp widened into f32 (unused for f32 and f64).
      RowBuffers<S, 3> rows_f32(C);
      T *xbuf = rows_f32[0], *dybuf = rows_f32[1], *dxbuf = rows_f32[2];
#pragma omp for schedule(static)
      for (int64_t k = 0; k < blocks; ++k) {
        const Range rows = split_range(N, static_cast<int>(blocks), static_cast<int>(k));
        T* pw = partials + 2 * C * k;
        T* pb = pw + C;
        for (int64_t n = rows.begin; n < rows.end; ++n) {
          if constexpr (!is_16bit<S>) {
            backward_row<T>(dx + n * C, pw, pb, x + n * C, dy + n * C, w.p, mu[n], rs[n], C);
          } else {
            load_row(x + n * C, xbuf, C);
            load_row(dy + n * C, dybuf, C);
            load_row(dx + n * C, dxbuf, C);
            backward_row<T>(dxbuf, pw, pb, xbuf, dybuf, w.p, mu[n], rs[n], C);
            store_row(dx + n * C, dxbuf, C);
          }
        }
      }
    }
    add_block_partials(dw, partials, blocks, C, 2 * C);
    add_block_partials(db, partials + C, blocks, C, 2 * C);
  });
}

}  // namespace dt::kernels::cpu
