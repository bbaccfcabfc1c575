#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/swiglu.h"

namespace dt::kernels::cpu {

namespace {

// vec_exp vectorizes where std::exp would make a scalar libm call per element. Its clamps keep
// the tails finite: exp(-x) is 0 above x ~ 87 (sigmoid exactly 1) and at most exp(88) below
// x = -88 (sigmoid ~ 6e-39, not a NaN).
template <typename T>
inline T sigmoid(T x) {
  return T{1} / (T{1} + vec_exp(-x));
}

// One row: orow (F) from gate and up (F each).
template <typename T>
inline void forward_row(T* orow, const T* gate, const T* up, int64_t F) {
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) orow[f] = gate[f] * sigmoid(gate[f]) * up[f];
}

// One row: dgate and dup (F each) from dout (F) and the saved gate and up.
template <typename T>
inline void backward_row(T* dgate, T* dup, const T* dyr, const T* gate, const T* up, int64_t F) {
  // silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) {
    const T g = gate[f], s = sigmoid(g);
    dgate[f] = dyr[f] * up[f] * s * (T{1} + g * (T{1} - s));
    dup[f] = dyr[f] * g * s;
  }
}

}  // namespace

void swiglu_forward(Tensor out, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
    const S* x = storage_ptr<S>(inp);
    S* o = storage_ptr<S>(out);
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) forward_row<T>(o + n * F, x + n * 2 * F, x + n * 2 * F + F, F);
    } else {
      // Each row widened into f32, computed by the f32 loop, rounded once into out.
#pragma omp parallel
      {
        std::vector<float> xbuf(static_cast<size_t>(2 * F)), obuf(static_cast<size_t>(F));
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
          load_row(x + n * 2 * F, xbuf.data(), 2 * F);
          forward_row<T>(obuf.data(), xbuf.data(), xbuf.data() + F, F);
          store_row(o + n * F, obuf.data(), F);
        }
      }
    }
  });
}

void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
    const S *x = storage_ptr<S>(inp), *dy = storage_ptr<S>(dout);
    S* dx = storage_ptr<S>(dinp);
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        T* dgate = dx + n * 2 * F;
        backward_row<T>(dgate, dgate + F, dy + n * F, x + n * 2 * F, x + n * 2 * F + F, F);
      }
    } else {
#pragma omp parallel
      {
        std::vector<float> xbuf(static_cast<size_t>(2 * F)), dybuf(static_cast<size_t>(F)),
            dxbuf(static_cast<size_t>(2 * F));
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
          load_row(x + n * 2 * F, xbuf.data(), 2 * F);
          load_row(dy + n * F, dybuf.data(), F);
          backward_row<T>(dxbuf.data(), dxbuf.data() + F, dybuf.data(), xbuf.data(), xbuf.data() + F, F);
          store_row(dx + n * 2 * F, dxbuf.data(), 2 * F);
        }
      }
    }
  });
}

}  // namespace dt::kernels::cpu
