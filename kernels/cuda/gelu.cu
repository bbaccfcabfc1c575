// gelu_forward and gelu_backward (kernels/gelu.h) on the GPU.
//
// Elementwise and memory bound, through elementwise_map (kernels/cuda/elementwise.cuh) as
// kernels/cuda/add.cu: 16-byte packs per thread when the pointers allow, a scalar tail. Each
// element is read and then written by the same thread, so out may alias inp and dinp may alias
// dout.
//
// The math is the CPU's, from one header (kernels/gelu_math.h), in f32 (f64 for f64),
// with 16-bit values widened exactly and rounded once when stored. The exponential differs (the
// CPU's vectorized Cephes expf against CUDA's expf, each within 2 ulp), so results agree to a
// few f32 ulps, not bit for bit.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/gelu.h"
#include "kernels/gelu_math.h"

namespace dt::kernels::cuda {

namespace {

struct DeviceExp {
  __device__ float operator()(float x) const { return expf(x); }
  __device__ double operator()(double x) const { return exp(x); }
};

struct GeluForward {
  static constexpr int kInputs = 1;
  template <typename T>
  __device__ T operator()(T x, T /*unused*/) const { return gelu_math::gelu(x, DeviceExp{}); }
};

struct GeluBackward {
  static constexpr int kInputs = 2;
  template <typename T>
  __device__ T operator()(T x, T dy) const { return gelu_math::gelu_grad(x, dy, DeviceExp{}); }
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
