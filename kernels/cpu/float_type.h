// Runs a generic CPU kernel body for the tensor's float type: fp32 for training, fp64 for the
// finite-difference tests.
//
//   dispatch_float(x.dtype, [&]<typename T>() { impl<T>(...); });
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace dt::kernels::cpu {

template <typename Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn.template operator()<double>();
  DT_CHECK(dtype == DType::f32, "CPU kernels take f32 or f64, not ", dtype_name(dtype));
  return fn.template operator()<float>();
}

// Splits [0, n) into `parts` contiguous ranges of near-equal size; returns range `i`. Used
// where per-thread partial results must be combined in a fixed order.
struct Range {
  int64_t begin, end;
};
inline Range split_range(int64_t n, int parts, int i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + (i < extra ? i : extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

}  // namespace dt::kernels::cpu
