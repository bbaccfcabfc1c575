#include "kernels/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace dt::kernels
