// What the CPU and CUDA FP8 kernels must compute the same way (kernels/float8.h), written once
// for kernels/cpu/float8.cpp and kernels/cuda/float8.cu, which both compile this header: the
// saturating cast to e4m3 and e5m2, and a scale from an amax.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DT_F8_INLINE __host__ __device__ __forceinline__
#else
#define DT_F8_INLINE inline
#endif

namespace dt::kernels::float8_math {

// The two formats (OCP FP8): e4m3 ("fn": no infinity, 0x7f and 0xff NaN) and e5m2 (IEEE-like).
enum class Format : uint8_t { e4m3, e5m2 };

// Largest finite values: 0x7e and 0x7b.
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;
DT_F8_INLINE float max_finite(Format f) { return f == Format::e4m3 ? kE4M3Max : kE5M2Max; }

DT_F8_INLINE uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
DT_F8_INLINE float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to nearest, ties to even, with saturation: a magnitude beyond the largest finite
// value's rounding range (e4m3: above 464 = 448 + half its spacing; e5m2: 61440 or more) and
// ±infinity become the largest finite value with x's sign, and NaN becomes 0x7f. These are the
// bytes of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, format) (cuda_fp8.hpp), which
// kernels/float8_test.cpp checks; a scaled tensor that overflows is clamped, never turned
// into NaN.
DT_F8_INLINE uint8_t encode_satfinite(float x, Format f) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  const bool e4m3 = f == Format::e4m3;
  if (e4m3 ? a > 0x43e80000u : a >= 0x47700000u) return static_cast<uint8_t>(sign | (e4m3 ? 0x7eu : 0x7bu));
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t min_normal = static_cast<uint32_t>(127 + 1 - bias) << 23;
  if (a >= min_normal) {
    // Round the f32 significand to `man` bits (a carry moves into the exponent, as it should),
    // then move the exponent from f32's bias to the format's.
    const int drop = 23 - man;
    const uint32_t rounded = a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u);
    return static_cast<uint8_t>(sign | ((rounded >> drop) - (static_cast<uint32_t>(127 - bias) << man)));
  }
  // Subnormal: a count of the smallest subnormal, 2^(1 - bias - man), rounded to nearest even.
  // The scaling by a power of two is exact, and adding and removing 2^23 rounds a value below
  // 2^22 to an integer by the default rounding mode's ties-to-even; 2^man counts is the
  // smallest normal, whose encoding it also is.
  const float counts = float_of(a) * float_of(static_cast<uint32_t>(127 + bias + man - 1) << 23);
  const float rounded = (counts + 8388608.0f) - 8388608.0f;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(rounded));
}

// The value of an e4m3 or e5m2 byte, exactly (every one is an f32).
DT_F8_INLINE float decode(uint8_t b, Format f) {
  const bool e4m3 = f == Format::e4m3;
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t magnitude = b & 0x7fu;
  const uint32_t exponent = magnitude >> man, mantissa = magnitude & ((1u << man) - 1u);
  if (e4m3 && magnitude == 0x7fu) return float_of(0x7fc00000u | sign);
  if (!e4m3 && exponent == 0x1fu) return float_of((mantissa != 0 ? 0x7fc00000u : 0x7f800000u) | sign);
  if (exponent == 0) {  // subnormal: mantissa · 2^(1 - bias - man)
    const float spacing = float_of(static_cast<uint32_t>(127 + 1 - bias - man) << 23);
    return float_of(bits_of(static_cast<float>(mantissa) * spacing) | sign);
  }
  return float_of(sign | (exponent + 127u - static_cast<uint32_t>(bias)) << 23 | mantissa << (23 - man));
}

// The larger of two magnitudes, NaN if either is: an amax that a NaN reaches stays NaN, on the
// CPU and in a GPU's reduction alike.
DT_F8_INLINE float amax_of(float a, float b) { return (a != a || a > b) ? a : b; }

// The scale that maps amax onto the format's largest finite value, less `margin` binades:
// max_finite / amax / 2^margin, rounded to a power of two (down) where `pow2`. An amax of 0,
// infinity or NaN has no such scale: `fallback` is kept (1 for a scale computed now; the
// previous scale for a delayed one, as Transformer Engine keeps it). A scale beyond f32's range
// (an amax below max_finite / 3.4e38) is the largest f32. In f32 with one division, so the CPU
// and the GPU give the same bits.
DT_F8_INLINE float scale_from_amax(float amax, Format f, int margin, bool pow2, float fallback) {
  const uint32_t a = bits_of(amax) & 0x7fffffffu;
  if (a == 0 || a >= 0x7f800000u) return fallback;
  float scale = max_finite(f) / amax;
  // 2^-margin, margin in [0, 126): a normal f32, so the product rounds at most where scale is
  // subnormal, which needs an amax beyond f32's range.
  scale *= float_of(static_cast<uint32_t>(127 - margin) << 23);
  if (bits_of(scale) >= 0x7f800000u) scale = float_of(0x7f7fffffu);
  if (pow2) scale = float_of(bits_of(scale) & 0xff800000u);
  return scale;
}

}  // namespace dt::kernels::float8_math
