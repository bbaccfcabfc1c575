#include "kernels/cpu/float_type.h"
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

}  // namespace

void swiglu_forward(Tensor out, Tensor inp) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
    const T* x = inp.ptr<T>();
    T* o = out.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T *gate = x + n * 2 * F, *up = gate + F;
      T* orow = o + n * F;
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) orow[f] = gate[f] * sigmoid(gate[f]) * up[f];
    }
  });
}

void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const int64_t F = inp.dim(-1) / 2, N = inp.numel() / (2 * F);
    const T *x = inp.ptr<T>(), *dy = dout.ptr<T>();
    T* dx = dinp.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T *gate = x + n * 2 * F, *up = gate + F, *dyr = dy + n * F;
      T *dgate = dx + n * 2 * F, *dup = dgate + F;
      // silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) {
        const T g = gate[f], s = sigmoid(g);
        dgate[f] = dyr[f] * up[f] * s * (T{1} + g * (T{1} - s));
        dup[f] = dyr[f] * g * s;
      }
    }
  });
}

}  // namespace dt::kernels::cpu
