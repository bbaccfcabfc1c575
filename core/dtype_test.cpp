#include "core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T>
void write_raw(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  ASSERT_TRUE(out.good()) << path;
}

template <typename T>
std::vector<T> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<T> values(static_cast<size_t>(in.tellg()) / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  return values;
}

bool is_bf16_nan(uint16_t bits) { return (bits & 0x7fffu) > 0x7f80u; }
bool is_f16_nan(uint16_t bits) { return (bits & 0x7fffu) > 0x7c00u; }
bool is_f32_nan(uint32_t bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

std::string describe_float(float f) {
  char text[64];
  std::snprintf(text, sizeof text, "%a (bits 0x%08x)", static_cast<double>(f), float_bits(f));
  return text;
}

// Compares bit patterns; NaN matches any NaN, since the payload is not part of the contract.
// Reports the first few mismatches and their count rather than one failure per element.
template <typename Bits>
void expect_same_bits(std::string_view what, const std::vector<Bits>& actual, const std::vector<Bits>& expected,
                      bool (*is_nan)(Bits), const std::function<std::string(size_t)>& input) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool same = is_nan(expected[i]) ? is_nan(actual[i]) : actual[i] == expected[i];
    if (!same && ++mismatches <= 10)
      ADD_FAILURE() << what << " of " << input(i) << ": dtrain 0x" << std::hex << +actual[i] << ", PyTorch 0x"
                    << +expected[i];
  }
  EXPECT_EQ(mismatches, 0u) << what << ": mismatches out of " << actual.size();
}

// Floats on every rounding edge of bf16 and fp16.
std::vector<float> rounding_edge_inputs() {
  std::vector<float> values;
  std::mt19937 gen(20240607);
  // Every bf16 pattern (every exponent of both signs: zeros, fp32 denormals, inf, NaN payloads)
  // with a low half that is exact, just below the tie, the tie, just above it, or random.
  for (uint32_t high = 0; high < 65536; ++high)
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, static_cast<uint32_t>(gen() & 0xffffu),
                         static_cast<uint32_t>(gen() & 0xffffu)})
      values.push_back(float_from_bits(high << 16 | low));
  // Every finite fp16 magnitude and the midpoint to the next one (a tie) with the floats either
  // side of it. The last midpoint, 65520, lies between the largest finite fp16 (65504) and
  // 2^16; the first ones, around 2^-25, decide between 0 and the smallest subnormal.
  for (uint16_t h = 0; h <= 0x7bff; ++h) {
    const float lower = f16_to_float(h);
    const float upper = h == 0x7bff ? 65536.0f : f16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = (lower + upper) / 2;  // exact: 12 significant bits at most
    for (float v : {lower, std::nextafter(mid, 0.0f), mid, std::nextafter(mid, kInf)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  return values;
}

// PyTorch's `.to(dtype)` is the reference for bf16 and fp16, in both directions.
TEST(DType, Bf16AndF16MatchPyTorchBitForBit) {
  testing::TempDir dir;
  const std::vector<float> inputs = rounding_edge_inputs();
  write_raw(dir.file("in.f32"), inputs);
  ASSERT_EQ(testing::run_reference_script("dtype_reference.py", dir.file("in.f32") + " " + dir.path().string()), 0);

  std::vector<uint16_t> bf16(inputs.size()), f16(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    bf16[i] = float_to_bf16(inputs[i]);
    f16[i] = float_to_f16(inputs[i]);
  }
  const auto input = [&](size_t i) { return describe_float(inputs[i]); };
  expect_same_bits<uint16_t>("float_to_bf16", bf16, read_raw<uint16_t>(dir.file("bf16.u16")), is_bf16_nan, input);
  expect_same_bits<uint16_t>("float_to_f16", f16, read_raw<uint16_t>(dir.file("f16.u16")), is_f16_nan, input);

  std::vector<uint32_t> bf16_decoded(65536), f16_decoded(65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    bf16_decoded[h] = float_bits(bf16_to_float(static_cast<uint16_t>(h)));
    f16_decoded[h] = float_bits(f16_to_float(static_cast<uint16_t>(h)));
  }
  const auto pattern = [](size_t h) { return str("pattern ", h); };
  expect_same_bits<uint32_t>("bf16_to_float", bf16_decoded, read_raw<uint32_t>(dir.file("bf16_decoded.u32")),
                             is_f32_nan, pattern);
  expect_same_bits<uint32_t>("f16_to_float", f16_decoded, read_raw<uint32_t>(dir.file("f16_decoded.u32")),
                             is_f32_nan, pattern);
}

// The edges that matter most, pinned by hand so they are checked without Python too.
TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(float_from_bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(float_to_bf16(float_from_bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(float_to_bf16(float_from_bits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(float_to_bf16(float_from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(kNaN)));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(float_from_bits(0x7f800001))));  // payload only in the dropped half
}

TEST(DType, F16RoundsToNearestEvenAndOverflowsToInf) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // tie between 65504 and 2^16: even is 2^16, so inf
  EXPECT_EQ(float_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie, even is 0
  EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -24)), 0x0002);  // tie, even is 2
  EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);  // rounds up to the smallest normal
  EXPECT_EQ(float_to_f16(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(is_f16_nan(float_to_f16(kNaN)));
}

// e4m3fn: bias 7, no infinity, 0x7f/0xff are NaN, largest finite 0x7e = 448.
TEST(DType, F8E4M3RoundsToNearestEvenAndOverflowsToNaN) {
  EXPECT_EQ(float_to_f8e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_f8e4m3(-2.0f), 0xc0);
  EXPECT_EQ(float_to_f8e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even is 1
  EXPECT_EQ(float_to_f8e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even is 1.25
  EXPECT_EQ(float_to_f8e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_f8e4m3(464.0f), 0x7e);  // tie between 448 and 480 (not representable): even is 448
  EXPECT_EQ(float_to_f8e4m3(465.0f), 0x7f);  // nearer 480, which is beyond the range: NaN
  EXPECT_EQ(float_to_f8e4m3(1e6f), 0x7f);
  EXPECT_EQ(float_to_f8e4m3(kInf), 0x7f);
  EXPECT_EQ(float_to_f8e4m3(-kInf), 0xff);
  EXPECT_EQ(float_to_f8e4m3(kNaN) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_f8e4m3(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(float_to_f8e4m3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie, even is 0
  EXPECT_EQ(float_to_f8e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_f8e4m3(std::ldexp(1.5f, -9)), 0x02);  // tie, even is 2
  EXPECT_EQ(float_to_f8e4m3(-0.0f), 0x80);
}

// e5m2: bias 15, IEEE-like, largest finite 0x7b = 57344, inf 0x7c.
TEST(DType, F8E5M2RoundsToNearestEvenAndOverflowsToInf) {
  EXPECT_EQ(float_to_f8e5m2(1.0f), 0x3c);
  EXPECT_EQ(float_to_f8e5m2(1.125f), 0x3c);  // tie between 1 and 1.25: even is 1
  EXPECT_EQ(float_to_f8e5m2(1.375f), 0x3e);  // tie between 1.25 and 1.5: even is 1.5
  EXPECT_EQ(float_to_f8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(float_to_f8e5m2(61439.0f), 0x7b);
  EXPECT_EQ(float_to_f8e5m2(61440.0f), 0x7c);  // tie between 57344 and 2^16: even is 2^16, so inf
  EXPECT_EQ(float_to_f8e5m2(-kInf), 0xfc);
  EXPECT_TRUE(std::isnan(f8e5m2_to_float(float_to_f8e5m2(kNaN))));
  EXPECT_EQ(float_to_f8e5m2(std::ldexp(1.0f, -14)), 0x04);  // smallest normal
  EXPECT_EQ(float_to_f8e5m2(std::ldexp(1.0f, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_f8e5m2(std::ldexp(1.0f, -17)), 0x00);  // tie, even is 0
  EXPECT_EQ(float_to_f8e5m2(std::ldexp(1.5f, -16)), 0x02);  // tie, even is 2
  EXPECT_EQ(float_to_f8e5m2(-0.0f), 0x80);
}

// Every code decodes to a value that encodes back to the same code; NaN codes stay NaN.
// Positive codes decode in increasing order, which pins the layout of exponent and mantissa.
void expect_round_trip_of_every_code(float (*decode)(uint8_t), uint8_t (*encode)(float),
                                     const std::vector<int>& nan_codes, float max_finite) {
  float previous = -1.0f;
  float largest = 0.0f;
  for (int code = 0; code < 256; ++code) {
    const float value = decode(static_cast<uint8_t>(code));
    const bool nan_code = std::find(nan_codes.begin(), nan_codes.end(), code) != nan_codes.end();
    EXPECT_EQ(std::isnan(value), nan_code) << "code 0x" << std::hex << code;
    if (nan_code) {
      EXPECT_TRUE(std::isnan(decode(encode(value)))) << "code 0x" << std::hex << code;
      continue;
    }
    EXPECT_EQ(encode(value), code) << "code 0x" << std::hex << code << " decodes to " << value;
    if (code < 0x80) {
      EXPECT_GT(value, previous) << "code 0x" << std::hex << code;
      previous = value;
      if (std::isfinite(value)) largest = value;
    } else {
      EXPECT_EQ(float_bits(value), float_bits(-decode(static_cast<uint8_t>(code - 0x80))));
    }
  }
  EXPECT_EQ(largest, max_finite);
}

TEST(DType, F8E4M3EveryCodeRoundTrips) {
  expect_round_trip_of_every_code(f8e4m3_to_float, float_to_f8e4m3, {0x7f, 0xff}, 448.0f);
  EXPECT_EQ(f8e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, F8E5M2EveryCodeRoundTrips) {
  expect_round_trip_of_every_code(f8e5m2_to_float, float_to_f8e5m2, {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}, 57344.0f);
  EXPECT_EQ(f8e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(f8e5m2_to_float(0x7c), kInf);
  EXPECT_EQ(f8e5m2_to_float(0xfc), -kInf);
}

TEST(DType, NamesSizesAndKinds) {
  struct Expected {
    DType dtype;
    std::string_view name;
    size_t size;
    bool is_float;
  };
  const Expected all[] = {
      {DType::f32, "f32", 4, true},       {DType::f64, "f64", 8, true},
      {DType::bf16, "bf16", 2, true},     {DType::f16, "f16", 2, true},
      {DType::f8e4m3, "f8e4m3", 1, true}, {DType::f8e5m2, "f8e5m2", 1, true},
      {DType::i8, "i8", 1, false},        {DType::i32, "i32", 4, false},
      {DType::i64, "i64", 8, false},      {DType::u16, "u16", 2, false},
      {DType::u32, "u32", 4, false},
  };
  for (const auto& e : all) {
    EXPECT_EQ(dtype_name(e.dtype), e.name);
    EXPECT_EQ(dtype_size(e.dtype), e.size) << e.name;
    EXPECT_EQ(dtype_is_float(e.dtype), e.is_float) << e.name;
    EXPECT_EQ(dtype_from_name(e.name), e.dtype) << e.name;
  }
  static_assert(dtype_of<float>() == DType::f32 && dtype_of<double>() == DType::f64 &&
                dtype_of<int8_t>() == DType::i8 && dtype_of<int32_t>() == DType::i32 &&
                dtype_of<int64_t>() == DType::i64 && dtype_of<uint16_t>() == DType::u16 &&
                dtype_of<uint32_t>() == DType::u32);
}

TEST(DType, UnknownNameListsTheValidOnes) {
  try {
    dtype_from_name("float32");
    FAIL() << "expected dt::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'float32'"), std::string::npos) << what;
    for (std::string_view name : {"f32", "bf16", "f8e5m2", "u32"})
      EXPECT_NE(what.find(name), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dt
