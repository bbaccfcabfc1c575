// gelu_forward and gelu_backward (kernels/gelu.h) on the GPU.
//
// Elementwise and memory bound, laid out as kernels/cuda/add.cu: 16-byte packs per thread when
// the pointers allow, a scalar tail, a grid-stride loop over one wave of blocks. Each element is
// read and then written by the same thread, so out may alias inp and dinp may alias dout.
//
// The math is the CPU's: 0.5 x (1 + tanh(u)) written as x * sigmoid(2u), in f32 (f64 for f64),
// with 16-bit values widened exactly and rounded once when stored. The exponential differs (the
// CPU's vectorized Cephes expf against CUDA's expf, each within 2 ulp), so results agree to a
// few f32 ulps, not bit for bit.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/storage.cuh"
#include "kernels/gelu.h"

namespace dt::kernels::cuda {

namespace {

template <typename S>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(S));
template <typename S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

// out[i] = op(a[i], b[i]) (b unread for one-input ops), V elements per pack.
template <typename S, int V, typename Op>
__global__ void map_kernel(S* out, const S* a, const S* b, int64_t n, Op op) {
  using P = Pack<S, V>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / V;
  for (int64_t i = first; i < packs; i += stride) {
    const P pa = reinterpret_cast<const P*>(a)[i];
    P pb{};
    if constexpr (Op::kInputs == 2) pb = reinterpret_cast<const P*>(b)[i];
    P po;
#pragma unroll
    for (int k = 0; k < V; ++k) store(&po.v[k], op(load(pa.v[k]), load(pb.v[k])));
    reinterpret_cast<P*>(out)[i] = po;
  }
  for (int64_t i = packs * V + first; i < n; i += stride) {
    compute_t<S> y{0};
    if constexpr (Op::kInputs == 2) y = load(b[i]);
    store(out + i, op(load(a[i]), y));
  }
}

template <typename S, typename Op>
void map(S* out, const S* a, const S* b, int64_t n, Op op) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  // One full wave (2048 resident threads per SM on sm_80 and sm_90); the loop covers the rest.
  const unsigned wave = static_cast<unsigned>(::dt::cuda::device_info().sm_count) * (2048 / kThreads);
  const bool packed = aligned_16(out) && aligned_16(a) && (Op::kInputs == 1 || aligned_16(b));
  if (packed) {
    constexpr int V = kPackWidth<S>;
    const unsigned blocks = std::max(1u, std::min(blocks_for(n / V, kThreads), wave));
    map_kernel<S, V><<<blocks, kThreads, 0, compute_stream()>>>(out, a, b, n, op);
  } else {
    const unsigned blocks = std::min(blocks_for(n, kThreads), wave);
    map_kernel<S, 1><<<blocks, kThreads, 0, compute_stream()>>>(out, a, b, n, op);
  }
  DT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gelu_forward(Tensor out, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map(storage_ptr<S>(out), storage_ptr<S>(inp), static_cast<const S*>(nullptr), inp.numel(), GeluForward{});
  });
}

void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map(storage_ptr<S>(dinp), storage_ptr<S>(inp), storage_ptr<S>(dout), inp.numel(), GeluBackward{});
  });
}

}  // namespace dt::kernels::cuda
