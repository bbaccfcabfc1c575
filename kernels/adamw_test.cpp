#include "kernels/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/cuda_testing.h"
#include "tests/gradcheck.h"

namespace dt::kernels {
namespace {

using testing::random_normal;
using testing::zeros;

// Several steps against the formula of kernels/adamw.h in double. The kernel rounds each
// intermediate to fp32 as PyTorch does; over 5 steps the difference stays within a few fp32
// roundings of the update (~lr) and of the parameter.
TEST(AdamW, FiveStepsMatchTheFormula) {
  constexpr int64_t n = 1000;
  const AdamWStep base{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  auto p = random_normal(DType::f32, {n}, 1), m = zeros(DType::f32, {n}), v = zeros(DType::f32, {n});
  std::vector<double> rp(n), rm(n, 0), rv(n, 0);
  for (int64_t i = 0; i < n; ++i) rp[i] = p.ptr<float>()[i];
  for (int step = 1; step <= 5; ++step) {
    auto g = random_normal(DType::f32, {n}, 10 + step, 1e-3);
    AdamWStep s = base;
    s.step = step;
    s.grad_scale = 0.5f;
    adamw_update(p.t, g.t, m.t, v.t, s);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g.ptr<float>()[i]) * 0.5;
      rp[i] *= 1 - static_cast<double>(s.lr) * s.weight_decay;
      rm[i] = s.beta1 * rm[i] + (1 - static_cast<double>(s.beta1)) * gi;
      rv[i] = s.beta2 * rv[i] + (1 - static_cast<double>(s.beta2)) * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(static_cast<double>(s.beta1), step));
      const double vhat = rv[i] / (1 - std::pow(static_cast<double>(s.beta2), step));
      rp[i] -= s.lr * mhat / (std::sqrt(vhat) + s.eps);
    }
  }
  // Parameters: each of the 5 steps stores p (|p| ~ 1) in fp32, a rounding of 2^-24 |p| ~ 6e-8
  // |p|, and moves it by ~lr = 1e-2 computed to fp32's ~1e-7 relative error; 5 steps stay below
  // 5e-7 (1 + |p|), and 1e-6 (1 + |p|) leaves 2x room.
  // m is a sum of gradients of both signs, so single elements cancel; its error is measured
  // against the largest |m| (the gradients' scale), like the other normalized bounds.
  double m_scale = 0, m_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p.ptr<float>()[i], rp[i], 1e-6 * (1 + std::fabs(rp[i])));
    m_scale = std::max(m_scale, std::fabs(rm[i]));
    m_err = std::max(m_err, std::fabs(m.ptr<float>()[i] - rm[i]));
  }
  EXPECT_LE(m_err / m_scale, 1e-6);
}

// The multi-tensor form updates exactly the elements of its ranges, each as the one-tensor
// form updates it, and leaves the elements between the ranges untouched.
TEST(AdamW, RangesUpdateTheirElementsAsOneTensorCallsAndNothingElse) {
  constexpr int64_t n = 300;
  const std::vector<FlatRange> ranges{{0, 37}, {48, 48 + 64}, {113, 299}};
  const AdamWStep s{.lr = 1e-2f, .weight_decay = 0.1f, .step = 3, .grad_scale = 0.5f};
  auto p = random_normal(DType::f32, {n}, 1), g = random_normal(DType::f32, {n}, 2),
       m = random_normal(DType::f32, {n}, 3, 0.1), v = random_normal(DType::f32, {n}, 4, 0.01);
  for (int64_t i = 0; i < n; ++i) v.ptr<float>()[i] = std::fabs(v.ptr<float>()[i]);
  // The expected result: one-tensor calls on each range of copies, whose gaps keep the start.
  const auto copy = [](const testing::OwnedTensor& t) { return testing::copy_to(t.t, Device::cpu); };
  const testing::OwnedTensor p0 = copy(p), p1 = copy(p), m1 = copy(m), v1 = copy(v);
  adamw_update(p.t, g.t, m.t, v.t, ranges, s);
  for (const FlatRange& r : ranges) {
    const auto part = [&](const testing::OwnedTensor& t) { return t.t.slice_rows(r.begin, r.size()); };
    adamw_update(part(p1), part(g), part(m1), part(v1), s);
  }
  for (const auto& [got, want] : {std::pair{&p, &p1}, std::pair{&m, &m1}, std::pair{&v, &v1}})
    EXPECT_TRUE(testing::same_bits(got->t, want->t));
  EXPECT_FALSE(testing::same_bits(p.t, p0.t));  // the update did move the parameters
}

}  // namespace
}  // namespace dt::kernels
