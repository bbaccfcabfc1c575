// exp(x) that GCC vectorizes inside a loop, for softmax-like kernels.
//
// std::exp is not vectorized without -ffast-math (glibc declares its SIMD exp only under
// __FAST_MATH__), and a scalar expf per score costs more than the two tile GEMMs that produce and
// consume the score. This is Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6
// polynomial, 2^n written into the exponent bits. Relative error below 1.4 ulp (measured on a
// 0.001 grid of [-87, 88]). Below ln(FLT_MIN) ~ -87.3, where exp would be subnormal, it returns 0,
// so exp(-inf) = 0 and masked scores need no special case; above 88 it returns exp(88).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace dt::kernels::cpu {

inline float vec_exp(float x) {
  constexpr float kMin = -87.33654f, kMax = 88.0f;
  const bool underflow = x < kMin;
  x = std::min(std::max(x, kMin), kMax);
  // Round x / ln2 to the nearest integer: adding 1.5 * 2^23 leaves no fraction bits.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // ln2 in two parts (Cody-Waite), so r keeps its low bits.
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : p * two_n;
}

// f64 serves the finite-difference tests, where exactness matters and speed does not.
inline double vec_exp(double x) { return std::exp(x); }

}  // namespace dt::kernels::cpu
