#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace dt {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", 4, true},       {DType::f64, "f64", 8, true},
    {DType::bf16, "bf16", 2, true},     {DType::f16, "f16", 2, true},
    {DType::f8e4m3, "f8e4m3", 1, true}, {DType::f8e5m2, "f8e5m2", 1, true},
    {DType::i8, "i8", 1, false},        {DType::i32, "i32", 4, false},
    {DType::i64, "i64", 8, false},      {DType::u16, "u16", 2, false},
    {DType::u32, "u32", 4, false},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kDTypes)
    if (i.dtype == dtype) return i;
  DT_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
  __builtin_unreachable();
}

// A binary floating-point format with 1 sign bit, `exp_bits` exponent bits and `man_bits`
// stored mantissa bits. `ieee_top` says whether the all-ones exponent is reserved for inf/NaN
// (fp16, e5m2); when false (e4m3fn) only the all-ones exponent with all-ones mantissa is NaN
// and there is no infinity.
struct SmallFloat {
  int exp_bits;
  int man_bits;
  bool ieee_top;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t nan_bits() const { return ieee_top ? ((1u << exp_bits) - 1) << man_bits | (1u << (man_bits - 1))
                                             : (1u << (exp_bits + man_bits)) - 1; }
  uint32_t inf_bits() const { return ((1u << exp_bits) - 1) << man_bits; }
  int max_biased_exp() const { return ieee_top ? (1 << exp_bits) - 2 : (1 << exp_bits) - 1; }
  double max_finite() const {
    uint32_t top_mantissa = ieee_top ? (1u << man_bits) - 1 : (1u << man_bits) - 2;
    return std::ldexp(1.0 + std::ldexp(static_cast<double>(top_mantissa), -man_bits), max_biased_exp() - bias());
  }

  uint32_t encode(float f) const {
    const uint32_t sign = (float_bits(f) >> 31) << (exp_bits + man_bits);
    if (std::isnan(f)) return sign | nan_bits();
    const double a = std::fabs(static_cast<double>(f));
    if (a == 0.0) return sign;
    const int emin = 1 - bias();
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    e = std::max(e - 1, emin);
    // Round a to a multiple of the format's spacing at exponent e; exact in double, and
    // nearbyint under the default rounding mode breaks ties to even.
    double n = std::nearbyint(std::ldexp(a, man_bits - e));
    const double value = std::ldexp(n, e - man_bits);
    if (std::isinf(a) || value > max_finite()) return sign | (ieee_top ? inf_bits() : nan_bits());
    if (n >= std::ldexp(1.0, man_bits + 1)) {  // rounding carried into the next binade
      n /= 2;
      e += 1;
    }
    const uint32_t mantissa_with_lead = static_cast<uint32_t>(n);
    if (mantissa_with_lead < (1u << man_bits)) return sign | mantissa_with_lead;  // subnormal
    const uint32_t biased = static_cast<uint32_t>(e + bias());
    return sign | biased << man_bits | (mantissa_with_lead - (1u << man_bits));
  }

  float decode(uint32_t bits) const {
    const bool negative = (bits >> (exp_bits + man_bits)) & 1u;
    const uint32_t biased = (bits >> man_bits) & ((1u << exp_bits) - 1);
    const uint32_t mantissa = bits & ((1u << man_bits) - 1);
    double value;
    if (ieee_top && biased == (1u << exp_bits) - 1) {
      value = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (!ieee_top && (bits & ((1u << (exp_bits + man_bits)) - 1)) == nan_bits()) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (biased == 0) {
      value = std::ldexp(static_cast<double>(mantissa), 1 - bias() - man_bits);
    } else {
      value = std::ldexp(static_cast<double>(mantissa | (1u << man_bits)), static_cast<int>(biased) - bias() - man_bits);
    }
    return static_cast<float>(negative ? -value : value);
  }
};

constexpr SmallFloat kF16{5, 10, true};
constexpr SmallFloat kF8E4M3{4, 3, false};
constexpr SmallFloat kF8E5M2{5, 2, true};

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }

DType dtype_from_name(std::string_view name) {
  for (const auto& i : kDTypes)
    if (i.name == name) return i.dtype;
  std::string valid;
  for (const auto& i : kDTypes) valid += str(valid.empty() ? "" : ", ", i.name);
  throw Error(str("unknown dtype '", name, "'; valid dtypes are ", valid));
}

bool is_training_precision(DType dtype) {
  for (const DType p : kTrainingPrecisions)
    if (p == dtype) return true;
  return false;
}

DType precision_from_name(std::string_view name) {
  for (const DType p : kTrainingPrecisions)
    if (dtype_name(p) == name) return p;
  throw Error(str("unknown precision '", name, "'; valid precisions are f32, bf16 (bf16 storage, f32 master weights and "
                  "gradients) and f16 (the same in fp16; use a loss scale)"));
}

uint16_t float_to_f16(float f) { return static_cast<uint16_t>(kF16.encode(f)); }
float f16_to_float(uint16_t h) { return kF16.decode(h); }
uint8_t float_to_f8e4m3(float f) { return static_cast<uint8_t>(kF8E4M3.encode(f)); }
float f8e4m3_to_float(uint8_t b) { return kF8E4M3.decode(b); }
uint8_t float_to_f8e5m2(float f) { return static_cast<uint8_t>(kF8E5M2.encode(f)); }
float f8e5m2_to_float(uint8_t b) { return kF8E5M2.decode(b); }

}  // namespace dt
