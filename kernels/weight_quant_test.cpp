// The weight formats (kernels/weight_quant.h): by hand on values whose results are known, and
// bit for bit against the gguf package's quantizers and dequantizers (llama.cpp's Python port of
// its reference code, tests/reference/gguf_quants.py) on blocks of every scale, ties, zeros,
// scales past fp16's range or below its smallest value, and the Q4_0 values where one rounding
// and two give different nibbles.
#include "kernels/weight_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

template <typename T>
std::vector<T> read_file(const std::string& path) {
  const std::string bytes = testing::file_bytes(path);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

template <typename T>
void write_file(const std::string& path, const std::vector<T>& values) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(values.data()),
                                              static_cast<std::streamsize>(values.size() * sizeof(T)));
}

// trunc(w · id + 8.5) with the product rounded to f32 before the sum: volatile keeps the
// compiler (-march=native, GCC's -ffp-contract=fast) from fusing the two.
int two_roundings(float w, float id) {
  const volatile float product = w * id;
  return static_cast<int>(product + 8.5f);
}

// A Q4_0 block with a value whose nibble from w · (1 / d) + 8.5 rounded once differs from the
// one with the product and the sum rounded each (the compiler-dependent case the header
// describes): value 20 (the block's second half), with value 0 the largest in magnitude, m.
std::vector<float> fma_sensitive_block() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> scale(1.0f, 2.0f), near_half(0.49f, 0.51f);
  for (int tries = 0; tries < 10'000'000; ++tries) {
    const float m = -8 * scale(rng), d = m / -8, id = 1.0f / d;
    const float x = near_half(rng) * d;
    if (static_cast<int>(std::fma(x, id, 8.5f)) != two_roundings(x, id)) {
      std::vector<float> block(kGgufBlock, 0.0f);
      block[0] = m;
      block[20] = x;
      return block;
    }
  }
  ADD_FAILURE() << "no value found where one rounding and two differ";
  return std::vector<float>(kGgufBlock, 0.0f);
}

// Blocks of every kind the tests compare: normal values at scales from 1e-9 to 1e5, a block of
// zeros, ties at d = 1, equal largest magnitudes of both signs, a scale past fp16's largest, one
// below its smallest subnormal, and the FMA-sensitive block.
std::vector<float> test_values() {
  std::vector<float> x;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int b = 0; b < 64; ++b) {
    const float scale = std::pow(10.0f, -9.0f + 14.0f * static_cast<float>(b) / 63);
    for (int j = 0; j < kGgufBlock; ++j) x.push_back(normal(rng) * scale);
  }
  x.insert(x.end(), kGgufBlock, 0.0f);
  for (int j = 0; j < kGgufBlock; ++j) x.push_back(j == 0 ? 127.0f : static_cast<float>(j % 7) - 3.5f);
  for (int j = 0; j < kGgufBlock; ++j) x.push_back(j == 3 ? -5.0f : j == 9 ? 5.0f : static_cast<float>(j) / 10);
  for (int j = 0; j < kGgufBlock; ++j) x.push_back(normal(rng) * 1e7f);
  for (int j = 0; j < kGgufBlock; ++j) x.push_back(normal(rng) * 1e-9f);
  const std::vector<float> sensitive = fma_sensitive_block();
  x.insert(x.end(), sensitive.begin(), sensitive.end());
  return x;
}

TEST(WeightQuant, Q8_0ByHand) {
  std::vector<float> x(kGgufBlock, 0.0f);
  x[0] = 127, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.5f, x[4] = -126.4f;
  std::vector<BlockQ8_0> blocks(1);
  quantize_q8_0(x, blocks);
  EXPECT_EQ(blocks[0].d, 0x3c00);  // 1.0
  EXPECT_EQ(blocks[0].qs[0], 127);
  EXPECT_EQ(blocks[0].qs[1], 3);  // halves away from zero
  EXPECT_EQ(blocks[0].qs[2], -3);
  EXPECT_EQ(blocks[0].qs[3], 1);
  EXPECT_EQ(blocks[0].qs[4], -126);
  std::vector<float> back(kGgufBlock);
  dequantize_q8_0(blocks, back);
  EXPECT_EQ(back[1], 3.0f);
  EXPECT_EQ(back[4], -126.0f);
}

TEST(WeightQuant, Q4_0ByHand) {
  std::vector<float> x(kGgufBlock, 0.0f);
  x[0] = -8;  // the largest magnitude: d = -8 / -8 = 1
  x[1] = 7, x[2] = 7.9f, x[3] = -0.5f, x[17] = 0.5f, x[16] = -3;
  std::vector<BlockQ4_0> blocks(1);
  quantize_q4_0(x, blocks);
  EXPECT_EQ(blocks[0].d, 0x3c00);
  // Byte j: value j low, value j + 16 high; q = min(15, trunc(w + 8.5)).
  EXPECT_EQ(blocks[0].qs[0], 0 | (5 << 4));    // -8 -> 0, -3 -> 5
  EXPECT_EQ(blocks[0].qs[1], 15 | (9 << 4));   // 7 -> 15, 0.5 -> 9
  EXPECT_EQ(blocks[0].qs[2], 15 | (8 << 4));   // 7.9 -> 16, held at 15; 0 -> 8
  EXPECT_EQ(blocks[0].qs[3], 8 | (8 << 4));    // -0.5 -> 8
  std::vector<float> back(kGgufBlock);
  dequantize_q4_0(blocks, back);
  EXPECT_EQ(back[0], -8.0f);
  EXPECT_EQ(back[2], 7.0f);
  EXPECT_EQ(back[16], -3.0f);
  EXPECT_EQ(back[3], 0.0f);
}

TEST(WeightQuant, Int8PerOutputChannelByHand) {
  const std::vector<float> w = {1, -2, 0.5f, /* row 2 */ 0, 0, 0};
  std::vector<int8_t> q(6);
  std::vector<float> scales(2);
  quantize_int8_rows(w, 2, q, scales);
  EXPECT_EQ(scales[0], 2.0f / 127);
  EXPECT_EQ(scales[1], 0.0f);
  const float id = 1.0f / (2.0f / 127);
  EXPECT_EQ(q[0], static_cast<int8_t>(std::round(1 * id)));
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], static_cast<int8_t>(std::round(0.5f * id)));
  EXPECT_EQ(q[3], 0);
  std::vector<float> back(6);
  dequantize_int8_rows(q, scales, back);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[0], scales[0] * q[0]);
}

// The fake quantizer a quantization-aware forward runs is the file's values read back, in place
// or not.
TEST(WeightQuant, FakeQuantizingIsQuantizingThenDequantizing) {
  const std::vector<float> x = test_values();
  const int64_t rows = static_cast<int64_t>(x.size()) / 64;
  for (const WeightFormat f : {WeightFormat::int8, WeightFormat::q8_0, WeightFormat::q4_0}) {
    std::vector<float> expected(x.size());
    if (f == WeightFormat::q8_0) {
      std::vector<BlockQ8_0> blocks(x.size() / kGgufBlock);
      quantize_q8_0(x, blocks);
      dequantize_q8_0(blocks, expected);
    } else if (f == WeightFormat::q4_0) {
      std::vector<BlockQ4_0> blocks(x.size() / kGgufBlock);
      quantize_q4_0(x, blocks);
      dequantize_q4_0(blocks, expected);
    } else {
      std::vector<int8_t> q(x.size());
      std::vector<float> scales(static_cast<size_t>(rows));
      quantize_int8_rows(x, rows, q, scales);
      dequantize_int8_rows(q, scales, expected);
    }
    std::vector<float> fake(x.size()), in_place = x;
    fake_quantize(f, x, rows, fake);
    fake_quantize(f, in_place, rows, in_place);
    EXPECT_EQ(std::memcmp(fake.data(), expected.data(), x.size() * sizeof(float)), 0) << weight_format_name(f);
    EXPECT_EQ(std::memcmp(in_place.data(), expected.data(), x.size() * sizeof(float)), 0) << weight_format_name(f);
  }
}

// A row-parallel layer's rank holds a column slice of each row. Each slice, fake-quantized with its
// rows' largest magnitudes completed over the other slices (what the tensor-parallel group's max
// does), gives that slice of the whole weight's result, bit for bit; without the completion, int8
// scales a row by its slice's own largest value, and the values differ.
TEST(WeightQuant, SlicesOfRowsQuantizeAsTheWholeRowsWhenTheirLargestValuesAreCompleted) {
  const std::vector<float> x = test_values();
  constexpr int64_t cols = 64, slice = 32;
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  const auto slice_of = [&](const std::vector<float>& whole, int64_t part) {
    std::vector<float> out(static_cast<size_t>(rows * slice));
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(whole.begin() + r * cols + part * slice, slice, out.begin() + r * slice);
    return out;
  };
  // Each row's largest magnitude per slice, as each rank finds it.
  std::vector<std::vector<float>> slice_amax(2, std::vector<float>(static_cast<size_t>(rows)));
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < slice; ++c)
        slice_amax[part][r] = std::max(slice_amax[part][r], std::fabs(x[r * cols + part * slice + c]));
  for (const WeightFormat f : {WeightFormat::int8, WeightFormat::q8_0, WeightFormat::q4_0}) {
    std::vector<float> whole(x.size());
    fake_quantize(f, x, rows, whole);
    bool alone_differs = false;
    for (int64_t part = 0; part < 2; ++part) {
      const std::vector<float> in = slice_of(x, part), expected = slice_of(whole, part);
      std::vector<float> out(in.size()), alone(in.size());
      fake_quantize(f, in, rows, out, [&](std::span<float> amax) {
        ASSERT_EQ(static_cast<int64_t>(amax.size()), rows);
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_EQ(amax[r], slice_amax[part][r]);
          amax[r] = std::max(slice_amax[0][r], slice_amax[1][r]);
        }
      });
      fake_quantize(f, in, rows, alone);
      EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)), 0) << weight_format_name(f);
      alone_differs |= std::memcmp(alone.data(), expected.data(), out.size() * sizeof(float)) != 0;
    }
    // GGUF's blocks lie whole in a slice, so only int8 needs the completion.
    EXPECT_EQ(alone_differs, f == WeightFormat::int8) << weight_format_name(f);
  }
}

// A 16-bit weight is widened, fake-quantized, and rounded back to its own dtype; an f32 one is
// fake-quantized as it is.
TEST(WeightQuant, FakeQuantizingATensorKeepsItsDtype) {
  const std::vector<float> x = test_values();
  const int64_t rows = static_cast<int64_t>(x.size()) / 64;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<float> widened(x.size()), expected(x.size());
    std::vector<uint8_t> in(x.size() * dtype_size(dtype)), out(in.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (dtype == DType::f32) {
        std::memcpy(in.data() + 4 * i, &x[i], 4);
        widened[i] = x[i];
      } else {
        const uint16_t h = dtype == DType::bf16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
        std::memcpy(in.data() + 2 * i, &h, 2);
        widened[i] = dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
      }
    }
    fake_quantize(WeightFormat::q4_0, widened, rows, expected);
    const Shape shape{rows, 64};
    fake_quantize(WeightFormat::q4_0, Tensor{.data = in.data(), .dtype = dtype, .shape = shape, .device = Device::cpu},
                  Tensor{.data = out.data(), .dtype = dtype, .shape = shape, .device = Device::cpu});
    for (size_t i = 0; i < x.size(); ++i) {
      float got = 0;
      uint16_t h = 0;
      if (dtype == DType::f32) {
        std::memcpy(&got, out.data() + 4 * i, 4);
        if (!std::isnan(expected[i])) {
          EXPECT_EQ(got, expected[i]) << i;
        }
        continue;
      }
      std::memcpy(&h, out.data() + 2 * i, 2);
      const uint16_t want = dtype == DType::bf16 ? float_to_bf16(expected[i]) : float_to_f16(expected[i]);
      if (!std::isnan(expected[i])) {
        ASSERT_EQ(h, want) << dtype_name(dtype) << " value " << i;
      }
    }
  }
}

TEST(WeightQuant, TheGgufPackageQuantizesAndDequantizesAsWeDoBitForBit) {
  const testing::TempDir dir;
  const std::vector<float> x = test_values();
  write_file(dir.file("x.f32"), x);
  std::vector<BlockQ8_0> q8(x.size() / kGgufBlock);
  std::vector<BlockQ4_0> q4(x.size() / kGgufBlock);
  quantize_q8_0(x, q8);
  quantize_q4_0(x, q4);
  write_file(dir.file("ours.q8_0"), q8);
  write_file(dir.file("ours.q4_0"), q4);
  ASSERT_EQ(testing::run_reference_script("gguf_quants.py", dir.path().string()), 0);

  EXPECT_EQ(testing::file_bytes(dir.file("gguf.q8_0")), testing::file_bytes(dir.file("ours.q8_0")));
  const std::vector<BlockQ4_0> theirs = read_file<BlockQ4_0>(dir.file("gguf.q4_0"));
  ASSERT_EQ(theirs.size(), q4.size());
  for (size_t b = 0; b < q4.size(); ++b)
    EXPECT_EQ(std::memcmp(&theirs[b], &q4[b], sizeof(BlockQ4_0)), 0) << "Q4_0 block " << b;
  // The overflowing block's scale is inf on both sides; the FMA-sensitive value has the nibble of
  // two roundings, not of one.
  EXPECT_EQ(q8[67].d, 0x7c00);
  const float* sensitive = x.data() + x.size() - kGgufBlock;
  const float id = 1.0f / (sensitive[0] / -8);
  EXPECT_EQ(q4.back().qs[4] >> 4, two_roundings(sensitive[20], id));
  EXPECT_NE(q4.back().qs[4] >> 4, static_cast<int>(std::fma(sensitive[20], id, 8.5f)));

  for (const auto& [name, count] : {std::pair{"q8_0", x.size()}, std::pair{"q4_0", x.size()}}) {
    std::vector<float> ours(count);
    if (std::string(name) == "q8_0") {
      dequantize_q8_0(q8, ours);
    } else {
      dequantize_q4_0(q4, ours);
    }
    const std::vector<float> gguf = read_file<float>(dir.file(str("gguf_of_ours.", name, ".f32")));
    ASSERT_EQ(gguf.size(), ours.size());
    for (size_t i = 0; i < ours.size(); ++i)
      if (!(std::isnan(ours[i]) && std::isnan(gguf[i]))) {  // inf · 0 in the overflowing block
        ASSERT_EQ(float_bits(gguf[i]), float_bits(ours[i])) << name << " value " << i;
      }
  }
}

TEST(WeightQuant, AnUnknownFormatNamesTheKnownOnes) {
  EXPECT_EQ(testing::error_of([] { parse_weight_format("q4_k"); }),
            "unknown weight format 'q4_k': use int8 (per output channel), q8_0 or q4_0 (GGUF's)");
  EXPECT_EQ(parse_weight_format("q4_0"), WeightFormat::q4_0);
}

}  // namespace
}  // namespace dt::kernels
