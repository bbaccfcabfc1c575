// Storage types of the CUDA kernels, as kernels/cpu/storage.h is for the CPU ones:
//
//   f32, f64    stored and computed as themselves
//   bf16, f16   16-bit storage: loaded exactly into f32, computed in f32, rounded to nearest
//               even when stored (__float2bfloat16_rn, __float2half_rn), the same rounding as
//               the CPU kernels, so a CPU run predicts a GPU run's numerics
//
//   dispatch_storage(x.dtype, [&]<typename S>() { launch<S>(...); });     (host)
//   inside a kernel:  using T = compute_t<S>;  T v = load(p[i]);  store(q + i, v);
//
// storage_ptr<S>(t) gives the typed device pointer of a tensor stored as S.
//
// Memory-bound kernels move 16-byte packs, the widest load a thread can issue (one instruction
// per operand instead of 8 for 16-bit storage):
//
//   if (can_pack<S>(C, {out, inp})) launch<S, kPackWidth<S>>(...); else launch<S, 1>(...);
//   inside:  const Pack<S, V> x = load_pack<S, V>(row, p);  ...  x.v[k] ...
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dt::kernels::cuda {

// Every kernel launches on the compute stream (core/cuda/runtime.h).
using ::dt::cuda::compute_stream;

using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename S>
struct ComputeType {
  using type = S;
};
template <>
struct ComputeType<bf16> {
  using type = float;
};
template <>
struct ComputeType<f16> {
  using type = float;
};
template <typename S>
using compute_t = typename ComputeType<S>::type;

template <typename S>
constexpr bool is_16bit = std::is_same_v<S, bf16> || std::is_same_v<S, f16>;

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(f16 v) { return __half2float(v); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(double* p, double v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(f16* p, float v) { *p = __float2half_rn(v); }

// The value v has after a round trip through storage S (rounding an intermediate as a store
// would, e.g. attention's probabilities before their product with V).
template <typename S>
__device__ __forceinline__ compute_t<S> round_to(compute_t<S> v) {
  S s;
  store(&s, v);
  return load(s);
}

// Elements of S in 16 bytes: 4 f32, 2 f64, 8 bf16/f16.
template <typename S>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(S));

// V elements of S loaded or stored as one vector; Pack<S, kPackWidth<S>> is 16 bytes, and
// V = 1 is the element-by-element path of the same kernel.
template <typename S, int V>
struct alignas(sizeof(S) * V) Pack {
  static constexpr int width = V;
  S v[V];
};

// Pack p of a row of packs.
template <typename S, int V>
__device__ __forceinline__ Pack<S, V> load_pack(const S* row, int64_t p) {
  return reinterpret_cast<const Pack<S, V>*>(row)[p];
}

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
inline bool aligned_16(const void* p) { return aligned_to(p, 16); }

// Whether rows of `width` elements of S, starting at each pointer, can all be read as 16-byte
// packs: width a multiple of kPackWidth<S> (so every row start stays aligned) and every
// pointer 16-byte aligned.
template <typename S>
bool can_pack(int64_t width, std::initializer_list<const void*> pointers) {
  return width % kPackWidth<S> == 0 && std::all_of(pointers.begin(), pointers.end(), aligned_16);
}

template <typename S>
S* storage_ptr(const Tensor& t) {
  return static_cast<S*>(t.data);
}

// Calls fn.template operator()<S>() with S the storage type of `dtype`; throws for others.
template <typename Fn>
void dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    case DType::bf16:
      return fn.template operator()<bf16>();
    case DType::f16:
      return fn.template operator()<f16>();
    default:
      throw Error(str("CUDA kernels store f32, f64, bf16 or f16, not ", dtype_name(dtype)));
  }
}

// Blocks of `threads` covering n elements, for one-element-per-thread kernels.
inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace dt::kernels::cuda
