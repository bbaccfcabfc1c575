// The FP8 quantizer (kernels/float8_math.h, kernels/float8.h) against a table of every e4m3 and
// e5m2 value built here from the formats' definitions: each byte's value, each rounding
// boundary between neighbours, saturation, NaN and infinity, subnormals; then the kernels.
// kernels/cuda/float8_cvt_test.cpp checks the same cast against CUDA's own.
#include "kernels/float8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/convert.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using float8_math::Format;
using float8_math::decode;
using float8_math::encode_satfinite;

struct FormatDefinition {
  Format format;
  int exponent_bits, mantissa_bits, bias;
  bool ieee_top;  // the all-ones exponent is infinity and NaN (e5m2); else only 0x7f is NaN (e4m3)
};
constexpr FormatDefinition kE4M3{Format::e4m3, 4, 3, 7, false};
constexpr FormatDefinition kE5M2{Format::e5m2, 5, 2, 15, true};

// A byte's value from the definition, in double: (-1)^s · 2^(e - bias) · (1 + m / 2^M), or
// 2^(1 - bias) · m / 2^M where e = 0. NaN for NaN bytes, infinity for e5m2's.
double value_by_definition(const FormatDefinition& d, int byte) {
  const int sign = byte >> 7, e = (byte >> d.mantissa_bits) & ((1 << d.exponent_bits) - 1);
  const int m = byte & ((1 << d.mantissa_bits) - 1);
  const int top = (1 << d.exponent_bits) - 1;
  double v;
  if (d.ieee_top && e == top) {
    v = m == 0 ? INFINITY : NAN;
  } else if (!d.ieee_top && e == top && m == (1 << d.mantissa_bits) - 1) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(m, 1 - d.bias - d.mantissa_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(m, -d.mantissa_bits), e - d.bias);
  }
  return sign ? -v : v;
}

// The finite non-negative values in increasing order with their bytes (0x00 up to the largest).
std::vector<std::pair<double, uint8_t>> finite_ladder(const FormatDefinition& d) {
  std::vector<std::pair<double, uint8_t>> ladder;
  for (int b = 0; b < 128; ++b) {
    const double v = value_by_definition(d, b);
    if (std::isfinite(v)) ladder.emplace_back(v, static_cast<uint8_t>(b));
  }
  return ladder;
}

class Float8Format : public ::testing::TestWithParam<FormatDefinition> {};

TEST_P(Float8Format, DecodesEveryByteAsItsDefinitionSays) {
  const FormatDefinition d = GetParam();
  for (int b = 0; b < 256; ++b) {
    const double expected = value_by_definition(d, b);
    const float got = decode(static_cast<uint8_t>(b), d.format);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;
    }
  }
  // The ends every FP8 user knows.
  EXPECT_EQ(finite_ladder(d).back().first, d.format == Format::e4m3 ? 448.0 : 57344.0);
  EXPECT_EQ(float8_math::max_finite(d.format), static_cast<float>(finite_ladder(d).back().first));
  EXPECT_EQ(finite_ladder(d)[1].first, d.format == Format::e4m3 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -16));
}

TEST_P(Float8Format, EncodesEveryFiniteValueAsItsOwnByte) {
  const FormatDefinition d = GetParam();
  for (int b = 0; b < 256; ++b) {
    const double v = value_by_definition(d, b);
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(encode_satfinite(static_cast<float>(v), d.format), b) << v;
  }
}

// Between each pair of neighbours: the midpoint goes to the one with the even byte, and the
// floats just below and above it to the nearer one; both signs.
TEST_P(Float8Format, RoundsToNearestEvenAtEveryBoundary) {
  const FormatDefinition d = GetParam();
  const auto ladder = finite_ladder(d);
  int boundaries = 0;
  for (size_t i = 0; i + 1 < ladder.size(); ++i) {
    const auto [low, low_byte] = ladder[i];
    const auto [high, high_byte] = ladder[i + 1];
    const float mid = static_cast<float>((low + high) / 2);  // exact: both have few bits
    ASSERT_EQ(static_cast<double>(mid), (low + high) / 2);
    const uint8_t even = (low_byte & 1) == 0 ? low_byte : high_byte;
    for (const float sign : {1.0f, -1.0f}) {
      const uint8_t sign_bit = sign < 0 ? 0x80 : 0;
      EXPECT_EQ(encode_satfinite(sign * mid, d.format), even | sign_bit) << sign * mid;
      EXPECT_EQ(encode_satfinite(sign * std::nextafter(mid, 0.0f), d.format), low_byte | sign_bit) << mid;
      EXPECT_EQ(encode_satfinite(sign * std::nextafter(mid, INFINITY), d.format), high_byte | sign_bit) << mid;
    }
    ++boundaries;
  }
  EXPECT_EQ(boundaries, d.format == Format::e4m3 ? 126 : 123);
}

TEST_P(Float8Format, SaturatesBeyondTheLargestValueAndKeepsNaN) {
  const FormatDefinition d = GetParam();
  const auto ladder = finite_ladder(d);
  const double max = ladder.back().first, spacing = max - ladder[ladder.size() - 2].first;
  const uint8_t max_byte = ladder.back().second;
  // Up to half a spacing above the largest value rounds to it; beyond, it saturates to it; the
  // tie itself goes to even, which e4m3's 0x7e is and e5m2's 0x7b is not (its even neighbour
  // would be infinity, so it saturates).
  const float half_above = static_cast<float>(max + spacing / 2);
  for (const float x : {static_cast<float>(max), std::nextafter(half_above, 0.0f), half_above,
                        std::nextafter(half_above, INFINITY), 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(encode_satfinite(x, d.format), max_byte) << x;
    EXPECT_EQ(encode_satfinite(-x, d.format), max_byte | 0x80) << -x;
  }
  for (const uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0xffffffffu})
    EXPECT_EQ(encode_satfinite(float8_math::float_of(nan_bits), d.format), 0x7f) << std::hex << nan_bits;
  EXPECT_TRUE(std::isnan(decode(0x7f, d.format)));
}

TEST_P(Float8Format, RoundsSubnormalsAndUnderflowsToSignedZero) {
  const FormatDefinition d = GetParam();
  const float smallest = static_cast<float>(finite_ladder(d)[1].first);
  EXPECT_EQ(encode_satfinite(smallest / 2, d.format), 0x00);  // tie: even is 0
  EXPECT_EQ(encode_satfinite(-smallest / 2, d.format), 0x80);
  EXPECT_EQ(encode_satfinite(std::nextafter(smallest / 2, 1.0f), d.format), 0x01);
  EXPECT_EQ(encode_satfinite(smallest * 1.5f, d.format), 0x02);  // tie between 1 and 2 counts: even
  EXPECT_EQ(encode_satfinite(smallest * 2.5f, d.format), 0x02);
  for (const float tiny : {1e-30f, std::numeric_limits<float>::denorm_min(), 1e-40f, 0.0f}) {
    EXPECT_EQ(encode_satfinite(tiny, d.format), 0x00) << tiny;
    EXPECT_EQ(encode_satfinite(-tiny, d.format), 0x80) << tiny;
  }
}

// Where the value is in range the saturating cast and PyTorch's (core/dtype.h, overflowing to
// NaN or infinity) must agree: two implementations of one rounding.
TEST_P(Float8Format, AgreesWithTheStorageCastInRange) {
  const FormatDefinition d = GetParam();
  const float max = float8_math::max_finite(d.format);
  uint32_t state = 12345;
  for (int i = 0; i < 1000000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float x = float8_math::float_of(state);
    if (!std::isfinite(x) || std::fabs(x) > max) continue;
    const uint8_t storage = d.format == Format::e4m3 ? float_to_f8e4m3(x) : float_to_f8e5m2(x);
    ASSERT_EQ(encode_satfinite(x, d.format), storage) << x;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Float8Format, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) { return info.param.format == Format::e4m3 ? "e4m3" : "e5m2"; });

TEST(Float8Scale, MapsTheAmaxOntoTheLargestValue) {
  using float8_math::scale_from_amax;
  EXPECT_EQ(scale_from_amax(2.0f, Format::e4m3, 0, false, 1.0f), 224.0f);
  EXPECT_EQ(scale_from_amax(3.0f, Format::e4m3, 0, false, 1.0f), 448.0f / 3.0f);
  EXPECT_EQ(scale_from_amax(3.0f, Format::e4m3, 0, true, 1.0f), 128.0f);  // 149.3, down to a power of two
  EXPECT_EQ(scale_from_amax(3.0f, Format::e5m2, 2, false, 1.0f), 57344.0f / 3.0f / 4.0f);
  EXPECT_EQ(scale_from_amax(448.0f, Format::e4m3, 0, true, 1.0f), 1.0f);
  // No amax to scale by: the fallback stays.
  for (const float none : {0.0f, -0.0f, INFINITY, NAN}) EXPECT_EQ(scale_from_amax(none, Format::e4m3, 0, false, 5.0f), 5.0f);
  // A scale beyond f32: the largest f32.
  EXPECT_EQ(scale_from_amax(1e-40f, Format::e4m3, 0, false, 1.0f), std::numeric_limits<float>::max());
  EXPECT_EQ(scale_from_amax(1e-40f, Format::e4m3, 0, true, 1.0f), 0x1p127f);
}

testing::OwnedTensor bytes_like(const Tensor& x, DType format) { return testing::zeros(format, x.shape); }

TEST(Float8Kernels, AmaxIsTheLargestMagnitudeAndKeepsNaN) {
  const testing::OwnedTensor x = testing::random_normal(DType::f32, {33, 17}, 3);
  x.ptr<float>()[100] = -7.5f;
  const testing::OwnedTensor amax = testing::zeros(DType::f32, {1});
  float8_amax(amax.t, x.t);
  EXPECT_EQ(*amax.ptr<float>(), 7.5f);
  const testing::OwnedTensor x16 = testing::zeros(DType::bf16, x.t.shape);
  convert(x16.t, x.t);
  *amax.ptr<float>() = 0;
  float8_amax(amax.t, x16.t);
  EXPECT_EQ(*amax.ptr<float>(), 7.5f);
  *amax.ptr<float>() = 9.0f;  // accumulates
  float8_amax(amax.t, x.t);
  EXPECT_EQ(*amax.ptr<float>(), 9.0f);
  x.ptr<float>()[200] = NAN;
  float8_amax(amax.t, x.t);
  EXPECT_TRUE(std::isnan(*amax.ptr<float>()));
}

// Where no scale can be made from an amax (0, inf, NaN), delayed scaling keeps the scale it had
// and current scaling takes 1, whatever the scale held before.
TEST(Float8Kernels, AnAmaxWithoutAScaleFallsBackToThePreviousScaleOrOne) {
  const testing::OwnedTensor amax = testing::zeros(DType::f32, {4}), scale = testing::zeros(DType::f32, {4});
  const float amaxes[4] = {0.0f, INFINITY, NAN, 448.0f / 8};
  for (const Float8Fallback fallback : {Float8Fallback::previous_scale, Float8Fallback::one}) {
    for (int i = 0; i < 4; ++i) amax.ptr<float>()[i] = amaxes[i], scale.ptr<float>()[i] = 3.0f;
    float8_scale(scale.t, amax.t, Format::e4m3, 0, false, fallback);
    const float kept = fallback == Float8Fallback::one ? 1.0f : 3.0f;
    EXPECT_EQ(std::vector<float>(scale.ptr<float>(), scale.ptr<float>() + 4), (std::vector<float>{kept, kept, kept, 8}));
  }
}

TEST(Float8Kernels, QuantizesAWholeTensorByItsScale) {
  const testing::OwnedTensor x = testing::random_normal(DType::f32, {8, 24}, 4, 100.0);
  const testing::OwnedTensor amax = testing::zeros(DType::f32, {1}), scale = testing::zeros(DType::f32, {1});
  *scale.ptr<float>() = 1.0f;
  float8_amax(amax.t, x.t);
  float8_scale(scale.t, amax.t, Format::e4m3, 0, false);
  const float s = *scale.ptr<float>();
  EXPECT_EQ(s, 448.0f / *amax.ptr<float>());
  const testing::OwnedTensor q = bytes_like(x.t, DType::f8e4m3), scale_inv = testing::zeros(DType::f32, {1});
  float8_quantize({q.t, scale_inv.t, Float8Tiles::whole()}, x.t, scale.t);
  EXPECT_EQ(*scale_inv.ptr<float>(), 1.0f / s);
  bool reaches_max = false;
  for (int64_t i = 0; i < x.t.numel(); ++i) {
    const uint8_t b = q.ptr<uint8_t>()[i];
    ASSERT_EQ(b, encode_satfinite(x.ptr<float>()[i] * s, Format::e4m3)) << i;
    reaches_max |= (b & 0x7f) == 0x7e;
  }
  EXPECT_TRUE(reaches_max);  // the amax element maps onto 448
  // Quantizing may record the amax in the same pass: the same bytes, and float8_amax's max,
  // accumulated into what the amax held.
  const testing::OwnedTensor recorded = testing::zeros(DType::f32, {1}), again = bytes_like(x.t, DType::f8e4m3);
  *recorded.ptr<float>() = 1.0f;
  float8_quantize({again.t, scale_inv.t, Float8Tiles::whole()}, x.t, scale.t, recorded.t);
  EXPECT_EQ(std::memcmp(again.t.data, q.t.data, q.t.bytes()), 0);
  EXPECT_EQ(*recorded.ptr<float>(), *amax.ptr<float>());
  *recorded.ptr<float>() = 1e9f;
  float8_quantize({again.t, scale_inv.t, Float8Tiles::whole()}, x.t, scale.t, recorded.t);
  EXPECT_EQ(*recorded.ptr<float>(), 1e9f);
  const testing::OwnedTensor back = testing::zeros(DType::f32, x.t.shape);
  float8_dequantize(back.t, {q.t, scale_inv.t, Float8Tiles::whole()});
  for (int64_t i = 0; i < x.t.numel(); ++i)
    ASSERT_EQ(back.ptr<float>()[i], decode(q.ptr<uint8_t>()[i], Format::e4m3) * (1.0f / s)) << i;
  // e4m3 keeps 3 bits: a normal value comes back within 2^-4 of itself.
  EXPECT_LT(testing::normalized_max_error(back.t, x.t), 0.0625);
}

// Each tile of rows, of columns and of squares gets its own power-of-two scale, from which the
// bytes follow and into which they dequantize exactly.
TEST(Float8Kernels, QuantizesEachTileByItsOwnPowerOfTwoScale) {
  constexpr int64_t R = 8, C = 12;
  testing::OwnedTensor x = testing::random_normal(DType::f32, {2, 4, C}, 5);
  for (int64_t i = 0; i < x.t.numel(); ++i) x.ptr<float>()[i] *= std::ldexp(1.0f, static_cast<int>(i % 29) - 14);
  for (const Float8Tiles tiles : {Float8Tiles{1, 4}, Float8Tiles{4, 1}, Float8Tiles{4, 4}, Float8Tiles{2, 6}}) {
    SCOPED_TRACE(str(tiles.rows, "x", tiles.cols));
    const Shape scales = float8_scale_shape(x.t.shape, tiles);
    ASSERT_EQ(scales, Shape({R / tiles.rows, C / tiles.cols}));
    const testing::OwnedTensor q = bytes_like(x.t, DType::f8e5m2), scale_inv = testing::zeros(DType::f32, scales);
    float8_quantize_tiles({q.t, scale_inv.t, tiles}, x.t);
    const testing::OwnedTensor back = testing::zeros(DType::f32, x.t.shape);
    float8_dequantize(back.t, {q.t, scale_inv.t, tiles});
    for (int64_t tr = 0; tr < scales[0]; ++tr)
      for (int64_t tc = 0; tc < scales[1]; ++tc) {
        float amax = 0;
        for (int64_t r = tr * tiles.rows; r < (tr + 1) * tiles.rows; ++r)
          for (int64_t c = tc * tiles.cols; c < (tc + 1) * tiles.cols; ++c) amax = std::max(amax, std::fabs(x.ptr<float>()[r * C + c]));
        const float s = float8_math::scale_from_amax(amax, Format::e5m2, 0, true, 1.0f);
        ASSERT_EQ(scale_inv.ptr<float>()[tr * scales[1] + tc], 1.0f / s);
        int exponent;
        ASSERT_EQ(std::frexp(s, &exponent), 0.5f);  // a power of two
        for (int64_t r = tr * tiles.rows; r < (tr + 1) * tiles.rows; ++r)
          for (int64_t c = tc * tiles.cols; c < (tc + 1) * tiles.cols; ++c) {
            const int64_t i = r * C + c;
            ASSERT_EQ(q.ptr<uint8_t>()[i], encode_satfinite(x.ptr<float>()[i] * s, Format::e5m2));
            ASSERT_EQ(back.ptr<float>()[i], std::ldexp(decode(q.ptr<uint8_t>()[i], Format::e5m2), -std::ilogb(s)));
          }
      }
  }
}

TEST(Float8Kernels, RefusesTilesThatDoNotDivideTheTensor) {
  const testing::OwnedTensor x = testing::random_normal(DType::f32, {6, 10}, 6);
  EXPECT_NE(testing::error_of([&] { float8_scale_shape(x.t.shape, {4, 1}); }).find("tiles of 4 rows do not divide the 6 rows"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { float8_scale_shape(x.t.shape, {1, 4}); }).find("tiles of 4 columns do not divide the 10 columns"),
            std::string::npos);
  const testing::OwnedTensor q = bytes_like(x.t, DType::bf16), s = testing::zeros(DType::f32, {1});
  EXPECT_NE(testing::error_of([&] { float8_quantize({q.t, s.t, {}}, x.t, s.t); }).find("f8e4m3 or f8e5m2"), std::string::npos);
}

}  // namespace
}  // namespace dt::kernels
