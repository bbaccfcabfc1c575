// GPT-2's GELU (the tanh approximation) and its derivative, written once for the CPU kernel
// (kernels/cpu/gelu.cpp) and the CUDA kernel (kernels/cuda/gelu.cu), which both compile this
// header: the same constants and the same order of operations, so the two differ only in the
// exponential each passes in (the CPU's vectorized Cephes expf, CUDA's expf).
//
//   gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   d/dx    = s + x * s (1 - s) * 2 du/dx,  s = sigmoid(2u),  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
// The sigmoid form needs only exp, which vectorizes (tanh is a scalar libm call per element).
#pragma once

#if defined(__CUDACC__)
#define DT_GELU_INLINE __host__ __device__ __forceinline__
#else
#define DT_GELU_INLINE inline
#endif

namespace dt::kernels::gelu_math {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// exp: a callable T -> T.
template <typename T, typename Exp>
DT_GELU_INLINE T sigmoid_2u(T x, Exp exp) {
  const T u = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kCubic) * x * x * x);
  return T{1} / (T{1} + exp(T{-2} * u));
}

template <typename T, typename Exp>
DT_GELU_INLINE T gelu(T x, Exp exp) {
  return x * sigmoid_2u(x, exp);
}

template <typename T, typename Exp>
DT_GELU_INLINE T gelu_grad(T x, T dy, Exp exp) {
  const T s = sigmoid_2u(x, exp);
  const T du = static_cast<T>(kSqrt2OverPi) * (T{1} + static_cast<T>(3 * kCubic) * x * x);
  return dy * (s + x * s * (T{1} - s) * T{2} * du);
}

}  // namespace dt::kernels::gelu_math

#undef DT_GELU_INLINE
