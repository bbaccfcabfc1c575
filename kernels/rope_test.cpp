#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <vector>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

// Llama 3.2 1B: head size 64, theta 500000, rope_scaling {factor 32, low 1, high 4, original 8192}.
constexpr int kLlamaHeadSize = 64;
constexpr double kLlamaTheta = 500000;
constexpr RopeScaling kLlama32Scaling{.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                                      .original_max_seq_len = 8192};

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> values(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  return values;
}

TEST(Rope, InverseFrequenciesAreRoundedPowersOfTheta) {
  for (const auto& [head_size, theta] : {std::pair{64, 500000.0}, std::pair{10, 10000.0}, std::pair{128, 10000.0}}) {
    const std::vector<float> inv_freq = rope_inverse_frequencies(head_size, theta, {});
    ASSERT_EQ(inv_freq.size(), static_cast<size_t>(head_size / 2));
    // Long double carries 11 more bits than the double computation, so both round to the same
    // float unless a value lies within ~1e-16 of a rounding boundary (odds ~1e-9 per value).
    for (int i = 0; i < head_size / 2; ++i)
      EXPECT_EQ(inv_freq[i], static_cast<float>(std::pow(static_cast<long double>(theta), -2.0L * i / head_size)))
          << "HS = " << head_size << ", i = " << i;
  }
}

TEST(Rope, Llama3ScalingKeepsHighAndDividesLowFrequencies) {
  const std::vector<float> plain = rope_inverse_frequencies(kLlamaHeadSize, kLlamaTheta, {});
  const std::vector<float> scaled = rope_inverse_frequencies(kLlamaHeadSize, kLlamaTheta, kLlama32Scaling);
  int kept = 0, divided = 0, interpolated = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192 / 4.0) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++kept;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_EQ(scaled[i], plain[i] / 32) << i;  // division by a power of two: exact in float too
      ++divided;
    } else {
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 32) << i;
      ++interpolated;
    }
  }
  // theta^(i/32) * 2 pi crosses 2048 and 8192 between i = 14 and 15 and between 17 and 18.
  EXPECT_EQ(kept, 15);
  EXPECT_EQ(interpolated, 3);
  EXPECT_EQ(divided, 14);
}

TEST(Rope, FrequenciesAndTableMatchHuggingFace) {
  testing::TempDir dir;
  const std::vector<int64_t> positions = {0, 1, 2, 3, 100, 1000, 4095, 8191};
  ASSERT_EQ(testing::run_reference_script(
                "rope_reference.py", str(dir.path().string(), " ", kLlamaHeadSize, " ", kLlamaTheta, " ",
                                         kLlama32Scaling.factor, " ", kLlama32Scaling.low_freq_factor, " ",
                                         kLlama32Scaling.high_freq_factor, " ", kLlama32Scaling.original_max_seq_len,
                                         " 0,1,2,3,100,1000,4095,8191")),
            0);
  const std::vector<float> hf_plain = read_f32(dir.file("inv_freq.f32"));
  const std::vector<float> hf_scaled = read_f32(dir.file("inv_freq_llama3.f32"));
  const std::vector<float> hf_cos = read_f32(dir.file("cos.f32")), hf_sin = read_f32(dir.file("sin.f32"));
  constexpr int half = kLlamaHeadSize / 2;
  ASSERT_EQ(hf_plain.size(), size_t{half});
  ASSERT_EQ(hf_scaled.size(), size_t{half});
  ASSERT_EQ(hf_cos.size(), positions.size() * kLlamaHeadSize);
  ASSERT_EQ(hf_sin.size(), positions.size() * kLlamaHeadSize);

  const std::vector<float> plain = rope_inverse_frequencies(kLlamaHeadSize, kLlamaTheta, {});
  const std::vector<float> scaled = rope_inverse_frequencies(kLlamaHeadSize, kLlamaTheta, kLlama32Scaling);
  double worst_plain = 0, worst_scaled = 0;
  for (int i = 0; i < half; ++i) {
    worst_plain = std::max(worst_plain, std::fabs(static_cast<double>(plain[i]) - hf_plain[i]) / hf_plain[i]);
    worst_scaled = std::max(worst_scaled, std::fabs(static_cast<double>(scaled[i]) - hf_scaled[i]) / hf_scaled[i]);
  }
  // Hugging Face computes in f32: pow, reciprocal, and in the interpolated band the wavelength,
  // old_context_len / wavelen and the blend, each rounded to 6e-8; ours is rounded once from
  // double. The blend (1 + 31 s) / 32 amplifies an error in s by up to 31 / (1 + 31 s) (~9 at
  // s = 0.075, i = 17), so a few f32 roundings stay below 1e-6 relative.
  EXPECT_LE(worst_plain, 1e-6);
  EXPECT_LE(worst_scaled, 1e-6);
  std::printf("inv_freq vs Hugging Face, worst relative error: unscaled %.3g, llama3 %.3g\n", worst_plain,
              worst_scaled);

  // The table from Hugging Face's own frequencies, so only the table's arithmetic is compared:
  // the f32 angle is the same product, and the cosines differ by our rounding of a double cosine
  // (half an f32 ulp) against PyTorch's f32 cosine (within 1 ulp), i.e. below 2e-7 for |cos| <= 1.
  auto cos = zeros(DType::f32, {8192, half}), sin = zeros(DType::f32, {8192, half});
  rope_table(cos.t, sin.t, hf_scaled);
  double worst_table = 0;
  for (size_t p = 0; p < positions.size(); ++p)
    for (int i = 0; i < kLlamaHeadSize; ++i) {
      // emb = cat(freqs, freqs): columns i and i + HS/2 hold the same angle.
      const int64_t at = positions[p] * half + i % half;
      const size_t hf_at = p * kLlamaHeadSize + static_cast<size_t>(i);
      worst_table = std::max(worst_table, std::fabs(element(cos.t, at) - hf_cos[hf_at]));
      worst_table = std::max(worst_table, std::fabs(element(sin.t, at) - hf_sin[hf_at]));
    }
  EXPECT_LE(worst_table, 2.5e-7);
  std::printf("cos/sin table vs Hugging Face, worst absolute error: %.3g\n", worst_table);
}

TEST(Rope, TableRoundsTheAngleToFloat) {
  const std::vector<float> inv_freq = rope_inverse_frequencies(10, 10000, {});
  auto cos = zeros(DType::f64, {5000, 5}), sin = zeros(DType::f64, {5000, 5});
  rope_table(cos.t, sin.t, inv_freq);
  for (int64_t t : {0, 1, 7, 4999})
    for (int64_t i = 0; i < 5; ++i) {
      const double exact = static_cast<double>(t) * inv_freq[i];
      const double angle = static_cast<float>(exact);
      EXPECT_EQ(element(cos.t, t * 5 + i), std::cos(angle)) << t << ", " << i;
      EXPECT_EQ(element(sin.t, t * 5 + i), std::sin(angle)) << t << ", " << i;
    }
  // At t = 4999, i = 1 the angle is ~792 rad and its f32 rounding (up to 3e-5 rad) shows in an
  // f64 table: the table follows Hugging Face's f32 angle, not the exact one.
  EXPECT_NE(element(cos.t, 4999 * 5 + 1), std::cos(4999.0 * inv_freq[1]));
}

// The shapes of the GQA case: NH = 6 query heads, NKV = 2 key and value heads, HS = 10, and a
// table longer than the sequence.
constexpr int64_t B = 2, T = 7, T_max = 9, NH = 6, NKV = 2, HS = 10, W = (NH + 2 * NKV) * HS;

struct Table {
  testing::OwnedTensor cos, sin;
};
Table table(DType dtype) {
  Table tab{zeros(dtype, {T_max, HS / 2}), zeros(dtype, {T_max, HS / 2})};
  // theta 10 so that every pair turns by a sizable angle within 7 positions.
  rope_table(tab.cos.t, tab.sin.t, rope_inverse_frequencies(HS, 10, {}));
  return tab;
}

// Hugging Face's apply_rotary_pos_emb written out: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin),
// rotate_half(x) = cat(-x[HS/2:], x[:HS/2]).
std::vector<double> rope_naive(const Tensor& qkv, const Table& tab) {
  std::vector<double> out(static_cast<size_t>(qkv.numel()));
  for (int64_t i = 0; i < qkv.numel(); ++i) out[i] = element(qkv, i);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH + NKV; ++h) {
        const int64_t base = (b * T + t) * W + h * HS;
        for (int64_t d = 0; d < HS; ++d) {
          const int64_t i = d % (HS / 2);
          const double c = element(tab.cos.t, t * (HS / 2) + i), s = element(tab.sin.t, t * (HS / 2) + i);
          const double rotated_half = d < HS / 2 ? -element(qkv, base + d + HS / 2) : element(qkv, base + d - HS / 2);
          out[base + d] = element(qkv, base + d) * c + rotated_half * s;
        }
      }
  return out;
}

TEST(Rope, ForwardMatchesNaiveRotateHalfWithGroupedHeads) {
  const Table tab = table(DType::f32);
  auto qkv = random_normal(DType::f32, {B, T, W}, 1);
  const auto original = testing::converted(qkv.t, DType::f32);
  const std::vector<double> expected = rope_naive(original.t, tab);
  rope_forward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < qkv.t.numel(); ++i) {
    worst = std::max(worst, std::fabs(element(qkv.t, i) - expected[i]));
    scale = std::max(scale, std::fabs(expected[i]));
    if (i % W >= (NH + NKV) * HS) {
      ASSERT_EQ(qkv.ptr<float>()[i], original.ptr<float>()[i]) << "value head element " << i << " changed";
    }
  }
  // Two f32 products and a sum per element: about 2 ulp of the largest value.
  EXPECT_LE(worst / scale, 3e-7);
  std::printf("rope_forward f32 vs naive f64, worst normalized error: %.3g\n", worst / scale);
  // Position 0 turns by angle 0: the first row of every sequence comes back unchanged.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < W; ++i)
      EXPECT_EQ(qkv.ptr<float>()[b * T * W + i], original.ptr<float>()[b * T * W + i]);
}

TEST(Rope, BackwardUndoesForward) {
  const Table tab = table(DType::f32);
  auto qkv = random_normal(DType::f32, {B, T, W}, 2);
  const auto original = testing::converted(qkv.t, DType::f32);
  rope_forward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV);
  rope_backward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV);
  // R^T R x = (c^2 + s^2) x with c, s rounded to f32: a few ulp of the largest value.
  const double err = testing::normalized_max_error(qkv.t, original.t);
  EXPECT_LE(err, 1e-6);
  std::printf("rope_backward(rope_forward(x)) vs x, f32, worst normalized error: %.3g\n", err);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const Table tab = table(DType::f64);
  auto x = random_normal(DType::f64, {B, T, W}, 3), w = random_normal(DType::f64, {B, T, W}, 4);
  auto work = zeros(DType::f64, {B, T, W});
  auto dx = testing::converted(w.t, DType::f64);
  rope_backward(dx.t, tab.cos.t, tab.sin.t, NH, NKV);
  auto loss = [&] {
    std::copy_n(x.ptr<double>(), x.t.numel(), work.ptr<double>());
    rope_forward(work.t, tab.cos.t, tab.sin.t, NH, NKV);
    return testing::weighted_sum(work.t, w.t);
  };
  const auto r = testing::check_gradients(loss, {{"qkv", x.t, dx.t}});
  // The loss is linear in x, so central differences are exact but for roundoff: ~1e-16 * |L| / h.
  EXPECT_LE(r.worst_error, 1e-8) << r.where;
  std::printf("rope_backward vs finite differences, worst relative error: %.3g at %s\n", r.worst_error,
              r.where.c_str());
}

TEST(Rope, RejectsOddHeadSizeAndBadShapes) {
  auto tab = table(DType::f32);
  // HS = 5: the last dim 50 is (6 + 2*2) * 5.
  auto odd = zeros(DType::f32, {B, T, (NH + 2 * NKV) * 5});
  auto odd_table = zeros(DType::f32, {T_max, 2});
  EXPECT_THROW(rope_forward(odd.t, odd_table.t, odd_table.t, NH, NKV), Error);
  EXPECT_THROW(rope_backward(odd.t, odd_table.t, odd_table.t, NH, NKV), Error);
  EXPECT_THROW(rope_inverse_frequencies(5, 10000, {}), Error);

  auto qkv = zeros(DType::f32, {B, T, W});
  EXPECT_NO_THROW(rope_forward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV));
  EXPECT_THROW(rope_forward(qkv.t, tab.cos.t, tab.sin.t, NH, 3), Error);            // 120 is not (6 + 6) * HS
  EXPECT_THROW(rope_forward(qkv.t, tab.cos.t, tab.sin.t, 0, NKV), Error);
  EXPECT_THROW(rope_forward(qkv.t.reshape({B * T, W}), tab.cos.t, tab.sin.t, NH, NKV), Error);  // not 3-D
  auto short_table = zeros(DType::f32, {T - 1, HS / 2});                                      // T_max < T
  EXPECT_THROW(rope_forward(qkv.t, short_table.t, short_table.t, NH, NKV), Error);
  auto wide_table = zeros(DType::f32, {T_max, HS});
  EXPECT_THROW(rope_forward(qkv.t, wide_table.t, wide_table.t, NH, NKV), Error);
  EXPECT_THROW(rope_forward(qkv.t, tab.cos.t, wide_table.t, NH, NKV), Error);  // sin unlike cos
  auto f64_table = table(DType::f64);
  EXPECT_THROW(rope_forward(qkv.t, f64_table.cos.t, f64_table.sin.t, NH, NKV), Error);

  EXPECT_THROW(rope_table(tab.cos.t, tab.sin.t, std::vector<float>(4, 1.0f)), Error);  // 4 != HS/2
  EXPECT_THROW(rope_table(tab.cos.t, wide_table.t, std::vector<float>(5, 1.0f)), Error);
  EXPECT_THROW(rope_inverse_frequencies(64, -1, {}), Error);
  EXPECT_THROW(rope_inverse_frequencies(64, 500000, {.factor = 32, .low_freq_factor = 4, .high_freq_factor = 4}),
               Error);
  EXPECT_THROW(rope_inverse_frequencies(64, 500000, {.factor = -1}), Error);
}

// 16-bit storage with the f32 table: each pair's rotation is the f32 rotation of the widened
// pair, so the bits of the f32 kernel on the widened qkv, rounded once; the value heads keep
// their bits.
TEST(Rope, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  const auto tab = table(DType::f32);
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto qkv = testing::random_storage(S, {B, T, W}, 91);
    const auto before = testing::widened(qkv.t);
    const auto qkv32 = testing::widened(qkv.t);
    rope_forward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV);
    rope_forward(qkv32.t, tab.cos.t, tab.sin.t, NH, NKV);
    EXPECT_EQ(testing::max_ulp_distance(qkv.t, testing::rounded(qkv32.t, S).t), 0);
    const auto after = testing::widened(qkv.t);
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t i = (NH + NKV) * HS; i < W; ++i)
        ASSERT_EQ(after.ptr<float>()[n * W + i], before.ptr<float>()[n * W + i]);
    rope_backward(qkv.t, tab.cos.t, tab.sin.t, NH, NKV);
    rope_backward(after.t, tab.cos.t, tab.sin.t, NH, NKV);  // the reference starts from the stored values
    EXPECT_EQ(testing::max_ulp_distance(qkv.t, testing::rounded(after.t, S).t), 0);
  }
}

TEST(Rope, SixteenBitQkvNeedsAnF32Table) {
  const auto tab16 = zeros(DType::bf16, {T_max, HS / 2});
  const auto tab64 = table(DType::f64);
  const auto qkv = zeros(DType::bf16, {B, T, W});
  std::string m = testing::error_message([&] { rope_forward(qkv.t, tab16.t, tab16.t, NH, NKV); });
  EXPECT_NE(m.find("rope_forward: cos is bf16"), std::string::npos) << m;
  m = testing::error_message([&] { rope_backward(qkv.t, tab64.cos.t, tab64.sin.t, NH, NKV); });
  EXPECT_NE(m.find("rope_backward: cos is f64"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
