#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

constexpr int64_t N = 6, V = 37, Vp = 40;  // three padding columns

// Targets with two ignored rows.
testing::OwnedTensor targets() {
  auto t = zeros(DType::i32, {N});
  const int32_t values[N] = {3, kIgnoreIndex, 36, 0, kIgnoreIndex, 17};
  std::copy_n(values, N, t.ptr<int32_t>());
  return t;
}

// Padding columns hold garbage that must never be read.
testing::OwnedTensor logits(DType dtype, uint64_t seed) {
  auto x = random_normal(dtype, {N, Vp}, seed, 3.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) {
      if (dtype == DType::f64) x.ptr<double>()[n * Vp + v] = 1e30;
      else x.ptr<float>()[n * Vp + v] = 1e30f;
    }
  return x;
}

TEST(CrossEntropy, LossesMatchNaiveAndPaddingIsIgnored) {
  auto t = targets();
  auto x = logits(DType::f32, 1);
  auto losses = zeros(DType::f32, {N});
  cross_entropy_forward(losses.t, x.t, t.t, V);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = t.ptr<int32_t>()[n];
    if (target == kIgnoreIndex) {
      EXPECT_EQ(element(losses.t, n), 0.0);
      continue;
    }
    double max = -1e300, sum = 0;
    for (int64_t v = 0; v < V; ++v) max = std::max(max, element(x.t, n * Vp + v));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(element(x.t, n * Vp + v) - max);
    const double expected = std::log(sum) + max - element(x.t, n * Vp + target);
    // vec_exp (1.4 ulp) and an fp32 sum of 37 terms: ~1e-6 relative.
    EXPECT_NEAR(element(losses.t, n), expected, 1e-5 * expected);
  }
  EXPECT_EQ(x.ptr<float>()[V], 1e30f);  // forward leaves the logits alone
}

// GPT-2's and Llama 3's vocabularies in f32 against the exact loss. The sum of exponentials is a
// chain of at most 1024 / lanes + lanes + V / 1024 roundings (261 at V = 128,256 with AVX2's 8
// lanes, fewer with AVX-512's 16), each of
// at most half an ulp of the sum, so |error| <= 261 * 2^-24 relative in the sum, an absolute
// 1.6e-5 in its log; plus vec_exp's 1.4 ulps and the loss's own roundings. One SIMD sum over the
// row (16,032 roundings a lane) missed by 2.1e-4.
TEST(CrossEntropy, F32LossesAtLargeVocabulariesAreNearExact) {
  for (const int64_t vocab : {int64_t{50257}, int64_t{128256}}) {
    const int64_t rows = 3;
    auto x = random_normal(DType::f32, {rows, vocab}, 7, 3.0);
    auto t = zeros(DType::i32, {rows});
    auto losses = zeros(DType::f32, {rows});
    cross_entropy_forward(losses.t, x.t, t.t, vocab);
    for (int64_t n = 0; n < rows; ++n) {
      double max = -1e300, sum = 0;
      for (int64_t v = 0; v < vocab; ++v) max = std::max(max, element(x.t, n * vocab + v));
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(element(x.t, n * vocab + v) - max);
      const double exact = std::log(sum) + max - element(x.t, n * vocab);
      const double chain = 1024.0 / 8 + 8 + static_cast<double>(vocab) / 1024;
      EXPECT_NEAR(element(losses.t, n), exact, (chain + 2) * std::ldexp(1.0, -24) + 4 * FLT_EPSILON * exact)
          << "V = " << vocab << " row " << n;
    }
  }
}

TEST(CrossEntropy, FusedBackwardMatchesFiniteDifferencesInPlace) {
  const float scale = 0.25f;
  auto t = targets();
  auto x = logits(DType::f64, 2);
  auto grad = testing::converted(x.t, DType::f64);  // becomes dlogits in place
  auto losses = zeros(DType::f64, {N}), fused_losses = zeros(DType::f64, {N});
  cross_entropy_forward_backward(fused_losses.t, grad.t, t.t, V, scale);
  cross_entropy_forward(losses.t, x.t, t.t, V);
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(element(fused_losses.t, n), element(losses.t, n));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) EXPECT_EQ(element(grad.t, n * Vp + v), 0.0) << "padding gradient";
  for (int64_t v = 0; v < Vp; ++v) EXPECT_EQ(element(grad.t, 1 * Vp + v), 0.0) << "ignored row";

  // Check against L = scale * sum_n loss_n, over the real columns only (the padding's 1e30
  // would overflow a difference quotient, and is never read).
  auto loss = [&] {
    cross_entropy_forward(losses.t, x.t, t.t, V);
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += scale * element(losses.t, n);
    return s;
  };
  auto real_grad = zeros(DType::f64, {N, V});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) real_grad.ptr<double>()[n * V + v] = element(grad.t, n * Vp + v);
  // Finite differences through a view of the real columns: perturb x in place.
  std::vector<testing::GradInput> inputs;
  for (int64_t n = 0; n < N; ++n)
    inputs.push_back({str("row", n), x.t.slice_rows(n, 1).reshape({Vp}).slice_rows(0, V),
                      real_grad.t.slice_rows(n, 1).reshape({V})});
  const auto r = testing::check_gradients(loss, inputs);
  EXPECT_LE(r.worst_error, 1e-7) << r.where;  // smooth, h = 1e-6: see layernorm_test
}

// 16-bit logits: the row runs the f32 loops on the widened logits, so the losses (f32) equal
// the f32 kernel's exactly and the gradient has its bits rounded once. The padding holds 1e30
// (bf16) or its overflow to infinity (f16), never read.
TEST(CrossEntropy, SixteenBitLogitsAreTheF32KernelOnWidenedLogits) {
  const auto t = targets();
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto x = testing::rounded(logits(DType::f32, 111).t, S);
    const auto x32 = testing::widened(x.t);
    const auto stored = testing::widened(x.t);
    auto losses = zeros(DType::f32, {N}), losses32 = zeros(DType::f32, {N});
    cross_entropy_forward(losses.t, x.t, t.t, V);
    cross_entropy_forward(losses32.t, x32.t, t.t, V);
    EXPECT_EQ(testing::max_abs_difference(losses.t, losses32.t), 0);
    EXPECT_EQ(testing::max_ulp_distance(x.t, testing::rounded(stored.t, S).t), 0);  // forward leaves them
    cross_entropy_forward_backward(losses.t, x.t, t.t, V, 0.25f);
    cross_entropy_forward_backward(losses32.t, x32.t, t.t, V, 0.25f);
    EXPECT_EQ(testing::max_abs_difference(losses.t, losses32.t), 0);
    EXPECT_EQ(testing::max_ulp_distance(x.t, testing::rounded(x32.t, S).t), 0);
  }
}

TEST(CrossEntropy, SixteenBitLogitsNeedF32Losses) {
  const auto t = targets();
  const auto x = zeros(DType::f16, {N, Vp}), losses16 = zeros(DType::f16, {N});
  const std::string m = testing::error_message([&] { cross_entropy_forward_backward(losses16.t, x.t, t.t, V, 1.0f); });
  EXPECT_NE(m.find("cross_entropy_forward_backward: losses is f16"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
