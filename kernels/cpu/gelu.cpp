#include <algorithm>

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
    const S* x = storage_ptr<S>(inp);
    S* o = storage_ptr<S>(out);
    const int64_t n = inp.numel();
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) o[i] = gelu(x[i]);
    } else {
      // Chunks widened into f32, computed by the f32 loop, rounded once (out may alias inp:
      // a chunk is read whole before it is written).
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
        const int64_t m = std::min(kStorageChunk, n - i0);
        float buf[kStorageChunk];
        load_row(x + i0, buf, m);
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) buf[j] = gelu(buf[j]);
        store_row(o + i0, buf, m);
      }
    }
  });
}

void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    const S *x = storage_ptr<S>(inp), *dy = storage_ptr<S>(dout);
    S* dx = storage_ptr<S>(dinp);
    const int64_t n = inp.numel();
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) dx[i] = gelu_grad(x[i], dy[i]);
    } else {
      // As the forward; dinp may alias dout.
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
        const int64_t m = std::min(kStorageChunk, n - i0);
        float xbuf[kStorageChunk], dybuf[kStorageChunk];
        load_row(x + i0, xbuf, m);
        load_row(dy + i0, dybuf, m);
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) dybuf[j] = gelu_grad(xbuf[j], dybuf[j]);
        store_row(dx + i0, dybuf, m);
      }
    }
  });
}

}  // namespace dt::kernels::cpu
