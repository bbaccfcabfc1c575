#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
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

template <typename T>
inline T gelu(T x) {
  return x * sigmoid_2u(x);
}

// d/dx [x s(2u)] = s + x * s (1 - s) * 2 du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <typename T>
inline T gelu_grad(T x, T dy) {
  const T s = sigmoid_2u(x);
  const T du = static_cast<T>(kSqrt2OverPi) * (T{1} + static_cast<T>(3 * kCubic) * x * x);
  return dy * (s + x * s * (T{1} - s) * T{2} * du);
}

}  // namespace

void gelu_forward(Tensor out, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(out), storage_ptr<S>(inp), inp.numel(), [](compute_t<S> x) { return gelu(x); });
  });
}

// dinp may alias dout.
void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(dinp), storage_ptr<S>(inp), storage_ptr<S>(dout), inp.numel(),
                 [](compute_t<S> x, compute_t<S> dy) { return gelu_grad(x, dy); });
  });
}

}  // namespace dt::kernels::cpu
