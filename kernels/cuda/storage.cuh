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
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
