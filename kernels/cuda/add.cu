// add_forward, accumulate and scale (kernels/add.h) on the GPU.
//
// Pure bandwidth: each element is read once and written once, by elementwise_map
// (kernels/cuda/elementwise.cuh): 16-byte packs when every pointer is 16-byte aligned, the
// numel % width elements left over one by one. Each element is read and then written by the same
// thread, which is what lets out alias a or b, and dst be updated in place.
//
// Numerics equal the CPU's bit for bit: one f32 (f64) add or multiply per element, 16-bit
// values widened exactly and rounded to nearest even once when stored.
#include <cstdint>

#include "kernels/add.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

struct Add {
  static constexpr int kInputs = 2;
  template <typename T>
  __device__ T operator()(T x, T y) const { return x + y; }
};

template <typename T>
struct Scale {
  static constexpr int kInputs = 1;
  T factor;
  __device__ T operator()(T x, T /*unused*/) const { return x * factor; }
};

}  // namespace

void add_forward(Tensor out, Tensor a, Tensor b) {
  dispatch_storage(a.dtype, [&]<typename S>() {
    elementwise_map(storage_ptr<S>(out), storage_ptr<S>(a), storage_ptr<S>(b), a.numel(), Add{});
  });
}

void accumulate(Tensor dst, Tensor src) {
  dispatch_storage(dst.dtype, [&]<typename S>() {
    elementwise_map(storage_ptr<S>(dst), storage_ptr<S>(dst), storage_ptr<S>(src), dst.numel(), Add{});
  });
}

void scale(Tensor x, double factor) {
  dispatch_storage(x.dtype, [&]<typename S>() {
    using T = compute_t<S>;  // factor rounded to f32 for 16-bit storage, as on the CPU
    elementwise_map(storage_ptr<S>(x), storage_ptr<S>(x), static_cast<const S*>(nullptr), x.numel(),
                    Scale<T>{static_cast<T>(factor)});
  });
}

}  // namespace dt::kernels::cuda
