// add_forward, accumulate and scale (kernels/add.h) on the GPU.
//
// Pure bandwidth: each element is read once and written once. Threads move 16-byte packs (4 f32,
// 2 f64, 8 bf16/f16) when every pointer is 16-byte aligned — one load instruction per operand
// instead of 8 for 16-bit storage — and a grid-stride loop over one wave of blocks covers any
// size; the numel % width elements left over go element by element. Each element is read and
// then written by the same thread, which is what lets out alias a or b, and dst be updated in
// place.
//
// Numerics equal the CPU's bit for bit: one f32 (f64) add or multiply per element, 16-bit
// values widened exactly and rounded to nearest even once when stored.
#include <algorithm>
#include <cstdint>

#include "kernels/add.h"
#include "kernels/cuda/storage.cuh"

namespace dt::kernels::cuda {

namespace {

// 16 bytes of S, the widest load a thread can issue.
template <typename S>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(S));
template <typename S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

void add_forward(Tensor out, Tensor a, Tensor b) {
  dispatch_storage(a.dtype, [&]<typename S>() {
    map(storage_ptr<S>(out), storage_ptr<S>(a), storage_ptr<S>(b), a.numel(), Add{});
  });
}

void accumulate(Tensor dst, Tensor src) {
  dispatch_storage(dst.dtype, [&]<typename S>() {
    map(storage_ptr<S>(dst), storage_ptr<S>(dst), storage_ptr<S>(src), dst.numel(), Add{});
  });
}

void scale(Tensor x, double factor) {
  dispatch_storage(x.dtype, [&]<typename S>() {
    using T = compute_t<S>;  // factor rounded to f32 for 16-bit storage, as on the CPU
    map(storage_ptr<S>(x), storage_ptr<S>(x), static_cast<const S*>(nullptr), x.numel(),
        Scale<T>{static_cast<T>(factor)});
  });
}

}  // namespace dt::kernels::cuda
