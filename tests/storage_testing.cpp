#include "tests/storage_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/cpu/storage.h"

namespace dt::testing {

using kernels::cpu::bf16_t;
using kernels::cpu::dispatch_storage;
using kernels::cpu::f16_t;
using kernels::cpu::is_16bit;
using kernels::cpu::storage_ptr;

OwnedTensor rounded(const Tensor& f32, DType storage) {
  DT_CHECK(f32.dtype == DType::f32, "rounded: ", f32.describe(), " is not f32");
  OwnedTensor o = zeros(storage, f32.shape);
  dispatch_storage(storage, [&]<typename S>() {
    DT_CHECK(is_16bit<S>, "rounded: ", dtype_name(storage), " is not a 16-bit storage type");
    if constexpr (is_16bit<S>)
      for (int64_t i = 0; i < f32.numel(); ++i) kernels::cpu::store(storage_ptr<S>(o.t) + i, f32.ptr<float>()[i]);
  });
  return o;
}

OwnedTensor widened(const Tensor& t16) {
  OwnedTensor o = zeros(DType::f32, t16.shape);
  dispatch_storage(t16.dtype, [&]<typename S>() {
    DT_CHECK(is_16bit<S>, "widened: ", t16.describe(), " is not 16-bit");
    if constexpr (is_16bit<S>)
      for (int64_t i = 0; i < t16.numel(); ++i) o.ptr<float>()[i] = kernels::cpu::load(storage_ptr<S>(t16)[i]);
  });
  return o;
}

OwnedTensor random_storage(DType storage, Shape shape, uint64_t seed, double std, double mean) {
  return rounded(random_normal(DType::f32, shape, seed, std, mean).t, storage);
}

namespace {
// Sign-magnitude bits mapped onto a line where neighbouring values differ by one.
int64_t ordinal(uint16_t bits) { return bits & 0x8000u ? -int64_t{bits & 0x7fffu} : int64_t{bits}; }
bool is_nan(uint16_t bits, DType dtype) {
  const uint16_t exponent = dtype == DType::bf16 ? 0x7f80u : 0x7c00u;
  return (bits & exponent) == exponent && (bits & ~(exponent | 0x8000u)) != 0;
}
}  // namespace

int64_t max_ulp_distance(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dtype == b.dtype && a.numel() == b.numel() && (a.dtype == DType::bf16 || a.dtype == DType::f16),
           "max_ulp_distance: ", a.describe(), " vs ", b.describe());
  const uint16_t *p = a.ptr<uint16_t>(), *q = b.ptr<uint16_t>();
  int64_t worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (is_nan(p[i], a.dtype) || is_nan(q[i], a.dtype)) {
      if (is_nan(p[i], a.dtype) != is_nan(q[i], a.dtype)) return int64_t{1} << 32;
      continue;
    }
    worst = std::max(worst, std::abs(ordinal(p[i]) - ordinal(q[i])));
  }
  return worst;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dtype == DType::f32 && b.dtype == DType::f32 && a.numel() == b.numel(), "max_abs_difference: ",
           a.describe(), " vs ", b.describe());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a.ptr<float>()[i]) - b.ptr<float>()[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error_naming(const std::function<void()>& fn, const std::string& op, const std::string& arg) {
  const std::string what = error_message(fn);
  EXPECT_FALSE(what.empty()) << op << " accepted a wrong " << arg;
  if (!what.empty()) {
    EXPECT_NE(what.find(op + ": " + arg + " is "), std::string::npos) << what;
  }
}

}  // namespace dt::testing
