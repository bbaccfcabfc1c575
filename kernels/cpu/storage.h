// Storage types of the CPU kernels: what a tensor's elements are stored as, and the type a
// kernel computes in.
//
//   f32, f64    stored and computed as themselves (fp64 is for the finite-difference tests)
//   bf16, f16   16-bit storage (mixed precision); loaded exactly into f32, computed in f32, and
//               rounded to nearest even when stored, where a GPU kernel would round them
//
//   dispatch_storage(x.dtype, [&]<typename S>() { impl<S>(...); });
//   inside:  using T = compute_t<S>;  T v = load(p[i]);  store(q + i, v);
//
// The 16-bit types are distinct structs so that a kernel cannot do arithmetic on stored bits by
// mistake; they are layout-compatible with the uint16_t that Tensor::ptr hands out
// (storage_ptr<S>(t) gives the typed pointer).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dt::kernels::cpu {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2);

template <typename S>
struct ComputeType {
  using type = S;
};
template <>
struct ComputeType<bf16_t> {
  using type = float;
};
template <>
struct ComputeType<f16_t> {
  using type = float;
};
template <typename S>
using compute_t = typename ComputeType<S>::type;

template <typename S>
constexpr bool is_16bit = std::is_same_v<S, bf16_t> || std::is_same_v<S, f16_t>;

inline float load(float v) { return v; }
inline double load(double v) { return v; }
inline float load(bf16_t v) { return bf16_to_float(v.bits); }
inline float load(f16_t v) {
#ifdef __F16C__
  return _cvtsh_ss(v.bits);
#else
  return f16_to_float(v.bits);
#endif
}

inline void store(float* p, float v) { *p = v; }
inline void store(double* p, double v) { *p = v; }
inline void store(bf16_t* p, float v) { p->bits = float_to_bf16(v); }
inline void store(f16_t* p, float v) {
#ifdef __F16C__
  p->bits = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
#else
  p->bits = float_to_f16(v);
#endif
}

// The value v would have after a round trip through storage S (for emulating a store).
template <typename S>
compute_t<S> round_to(compute_t<S> v) {
  S s;
  store(&s, v);
  return load(s);
}

template <typename S>
constexpr DType dtype_of_storage() {
  if constexpr (std::is_same_v<S, bf16_t>) return DType::bf16;
  else if constexpr (std::is_same_v<S, f16_t>) return DType::f16;
  else return dtype_of<S>();
}

// The tensor's elements as S*; checks the dtype.
template <typename S>
S* storage_ptr(const Tensor& t) {
  DT_CHECK(t.dtype == dtype_of_storage<S>(), "tensor ", t.describe(), " read as ", dtype_name(dtype_of_storage<S>()));
  return static_cast<S*>(t.data);
}

template <typename Fn>
decltype(auto) dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    case DType::bf16:
      return fn.template operator()<bf16_t>();
    case DType::f16:
      return fn.template operator()<f16_t>();
    default:
      DT_CHECK(false, "CPU kernels store f32, f64, bf16 or f16, not ", dtype_name(dtype));
  }
  __builtin_unreachable();
}

}  // namespace dt::kernels::cpu
