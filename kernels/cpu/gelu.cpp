#include "kernels/cpu/float_type.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/gelu.h"

namespace dt::kernels::cpu {

namespace {

// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) exactly, and the sigmoid needs only exp, which
// vec_exp vectorizes (std::tanh is a scalar libm call per element).
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

template <typename T>
inline T sigmoid_2u(T x) {
  const T u = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kCubic) * x * x * x);
  return T{1} / (T{1} + vec_exp(T{-2} * u));
}

}  // namespace

void gelu_forward(Tensor out, Tensor inp) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const T* x = inp.ptr<T>();
    T* o = out.ptr<T>();
    const int64_t n = inp.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * sigmoid_2u(x[i]);
  });
}

void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_float(inp.dtype, [&]<typename T>() {
    const T *x = inp.ptr<T>(), *dy = dout.ptr<T>();
    T* dx = dinp.ptr<T>();
    const int64_t n = inp.numel();
    // d/dx [x s(2u)] = s + x * s (1 - s) * 2 du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const T xi = x[i], s = sigmoid_2u(xi);
      const T du = static_cast<T>(kSqrt2OverPi) * (T{1} + static_cast<T>(3 * kCubic) * xi * xi);
      dx[i] = dy[i] * (s + xi * s * (T{1} - s) * T{2} * du);
    }
  });
}

}  // namespace dt::kernels::cpu
