#include "kernels/sigmoid_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

// 37 rows of 45: rows not a multiple of the GPU's warps per block, columns not of 32.
constexpr int64_t N = 37, C = 45;

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

// The forward in f64 against the plain formula, and in place (out aliasing a).
TEST(SigmoidGate, ForwardAddsTheGatedBranch) {
  const OwnedTensor a = random_normal(DType::f64, {N, C}, 1), h = random_normal(DType::f64, {N, C}, 2);
  const OwnedTensor z = random_normal(DType::f64, {N}, 3, 3.0);
  const OwnedTensor out = zeros(DType::f64, {N, C});
  sigmoid_gate_forward(out.t, a.t, h.t, z.t);
  double worst = 0;
  for (int64_t i = 0; i < N * C; ++i)
    worst = std::max(worst, std::fabs(element(out.t, i) - (element(a.t, i) + sigmoid(element(z.t, i / C)) * element(h.t, i))));
  EXPECT_LE(worst, 1e-15);
  const OwnedTensor in_place = testing::converted(a.t, DType::f64);
  sigmoid_gate_forward(in_place.t, in_place.t, h.t, z.t);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(element(in_place.t, i), element(out.t, i)) << i;
}

// L = sum(out · w): dh and dz against central differences; the gradient of a is w itself.
TEST(SigmoidGate, BackwardMatchesFiniteDifferences) {
  const OwnedTensor a = random_normal(DType::f64, {N, C}, 4), h = random_normal(DType::f64, {N, C}, 5);
  const OwnedTensor z = random_normal(DType::f64, {N}, 6, 3.0), w = random_normal(DType::f64, {N, C}, 7);
  const OwnedTensor dh = zeros(DType::f64, {N, C}), dz = zeros(DType::f64, {N});
  sigmoid_gate_backward(dh.t, dz.t, w.t, h.t, z.t);
  const auto loss = [&] {
    const OwnedTensor out = zeros(DType::f64, {N, C});
    sigmoid_gate_forward(out.t, a.t, h.t, z.t);
    return testing::weighted_sum(out.t, w.t);
  };
  const auto result = testing::check_gradients(loss, {{"h", h.t, dh.t}, {"z", z.t, dz.t}});
  EXPECT_LE(result.worst_error, 1e-8) << result.where;
}

// 16-bit storage: each element one f32 fused multiply-add rounded once, dh rounded once, dz in f32.
TEST(SigmoidGate, SixteenBitStorageRoundsOnce) {
  for (const DType storage : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(storage)));
    const OwnedTensor a = testing::random_storage(storage, {N, C}, 8), h = testing::random_storage(storage, {N, C}, 9);
    const OwnedTensor d = testing::random_storage(storage, {N, C}, 10);
    const OwnedTensor z = random_normal(DType::f32, {N}, 11, 3.0);
    const OwnedTensor out = zeros(storage, {N, C}), dh = zeros(storage, {N, C}), dz = zeros(DType::f32, {N});
    sigmoid_gate_forward(out.t, a.t, h.t, z.t);
    sigmoid_gate_backward(dh.t, dz.t, d.t, h.t, z.t);
    const OwnedTensor aw = testing::widened(a.t), hw = testing::widened(h.t), dw = testing::widened(d.t);
    OwnedTensor want_out = zeros(DType::f32, {N, C}), want_dh = zeros(DType::f32, {N, C});
    for (int64_t n = 0; n < N; ++n) {
      const float s = 1.0f / (1.0f + std::exp(-z.ptr<float>()[n]));
      float dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = n * C + c;
        want_out.ptr<float>()[i] = std::fma(s, hw.ptr<float>()[i], aw.ptr<float>()[i]);
        want_dh.ptr<float>()[i] = s * dw.ptr<float>()[i];
        dot = std::fma(dw.ptr<float>()[i], hw.ptr<float>()[i], dot);
      }
      EXPECT_EQ(dz.ptr<float>()[n], s * (1 - s) * dot) << n;
    }
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(want_out.t, storage).t), 0);
    EXPECT_EQ(testing::max_ulp_distance(dh.t, testing::rounded(want_dh.t, storage).t), 0);
  }
}

TEST(SigmoidGate, GatesOfTheWrongTypeOrLengthAreRefusedByName) {
  const OwnedTensor x = zeros(DType::bf16, {N, C}), z64 = zeros(DType::f64, {N}), short_z = zeros(DType::f32, {N - 1});
  testing::expect_error_naming([&] { sigmoid_gate_forward(x.t, x.t, x.t, z64.t); }, "sigmoid_gate_forward", "z");
  testing::expect_error_naming([&] { sigmoid_gate_forward(x.t, x.t, x.t, short_z.t); }, "sigmoid_gate_forward", "z");
}

}  // namespace
}  // namespace dt::kernels
