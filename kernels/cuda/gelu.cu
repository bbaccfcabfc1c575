// gelu_forward and gelu_backward (kernels/gelu.h) on the GPU.
//
// Elementwise and memory bound, through elementwise_map (kernels/cuda/elementwise.cuh) as
// kernels/cuda/add.cu: 16-byte packs per thread when the pointers allow, a scalar tail. Each
// element is read and then written by the same thread, so out may alias inp and dinp may alias
// dout.
//
// The math is the CPU's: 0.5 x (1 + tanh(u)) written as x * sigmoid(2u), in f32 (f64 for f64),
// with 16-bit values widened exactly and rounded once when stored. The exponential differs (the
// CPU's vectorized Cephes expf against CUDA's expf, each within 2 ulp), so results agree to a
// few f32 ulps, not bit for bit.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/gelu.h"

namespace dt::kernels::cuda {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

template <typename T>
__device__ __forceinline__ T sigmoid_2u(T x) {
  const T u = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kCubic) * x * x * x);
  return T{1} / (T{1} + exp_of(T{-2} * u));
}

struct GeluForward {
  static constexpr int kInputs = 1;
  template <typename T>
  __device__ T operator()(T x, T /*unused*/) const { return x * sigmoid_2u(x); }
};

// d/dx [x s(2u)] = s + x * s (1 - s) * 2 du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
struct GeluBackward {
  static constexpr int kInputs = 2;
  template <typename T>
  __device__ T operator()(T x, T dy) const {
    const T s = sigmoid_2u(x);
    const T du = static_cast<T>(kSqrt2OverPi) * (T{1} + static_cast<T>(3 * kCubic) * x * x);
    return dy * (s + x * s * (T{1} - s) * T{2} * du);
  }
};

}  // namespace

void gelu_forward(Tensor out, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    elementwise_map(storage_ptr<S>(out), storage_ptr<S>(inp), static_cast<const S*>(nullptr), inp.numel(),
                    GeluForward{});
  });
}

void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    elementwise_map(storage_ptr<S>(dinp), storage_ptr<S>(inp), storage_ptr<S>(dout), inp.numel(), GeluBackward{});
  });
}

}  // namespace dt::kernels::cuda
