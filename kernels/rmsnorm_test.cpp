#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/add.h"
#include "kernels/dispatch.h"
#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

// 37 rows: not a multiple of any thread count above 1; 53 columns: not a multiple of a vector.
constexpr int64_t N = 37, C = 53;
constexpr float kEps = 1e-5f;

TEST(RmsNorm, ForwardMatchesNaive) {
  // A mean of 0.5 so the RMS is not the standard deviation (RMSNorm does not centre).
  auto x = random_normal(DType::f32, {N, C}, 1, 2.0, 0.5), w = random_normal(DType::f32, {C}, 2, 1.0, 1.0);
  auto out = zeros(DType::f32, {N, C}), rstd = zeros(DType::f32, {N}), expected = zeros(DType::f32, {N, C});
  rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
  double worst_rstd = 0;
  for (int64_t n = 0; n < N; ++n) {
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += std::pow(element(x.t, n * C + c), 2) / C;
    const double s = 1 / std::sqrt(sq + kEps);
    worst_rstd = std::max(worst_rstd, std::fabs(element(rstd.t, n) - s) / s);
    for (int64_t c = 0; c < C; ++c)
      expected.ptr<float>()[n * C + c] = static_cast<float>(element(x.t, n * C + c) * s * element(w.t, c));
  }
  // fp32 sum of 53 squares, a sqrt and two products: a few roundings of O(1) values.
  const double err = testing::normalized_max_error(out.t, expected.t);
  EXPECT_LE(worst_rstd, 1e-6);
  EXPECT_LE(err, 1e-6);
  std::printf("rmsnorm_forward f32 vs naive f64: out %.3g (normalized), rstd %.3g (relative)\n", err, worst_rstd);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto x = random_normal(DType::f64, {N, C}, 4, 1.5, 0.3), w = random_normal(DType::f64, {C}, 5, 1.0, 1.0),
       dout = random_normal(DType::f64, {N, C}, 7);
  auto out = zeros(DType::f64, {N, C}), rstd = zeros(DType::f64, {N});
  rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
  auto dx = zeros(DType::f64, {N, C}), dw = zeros(DType::f64, {C});
  rmsnorm_backward(dx.t, dw.t, dout.t, x.t, w.t, rstd.t);
  auto loss = [&] {
    rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}, {"weight", w.t, dw.t}});
  // Smooth function, h = 1e-6: truncation ~1e-12, roundoff ~1e-10 (see layernorm_test).
  EXPECT_LE(r.worst_error, 1e-7) << r.where;
  std::printf("rmsnorm_backward vs finite differences, worst relative error: %.3g at %s\n", r.worst_error,
              r.where.c_str());

  // Both gradients accumulate: starting from nonzero values, the call adds its gradient to them.
  rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
  const auto dx0 = random_normal(DType::f64, {N, C}, 8), dw0 = random_normal(DType::f64, {C}, 9);
  auto dx2 = testing::converted(dx0.t, DType::f64), dw2 = testing::converted(dw0.t, DType::f64);
  rmsnorm_backward(dx2.t, dw2.t, dout.t, x.t, w.t, rstd.t);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(element(dx2.t, i), element(dx0.t, i) + element(dx.t, i), 1e-12);
  for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(element(dw2.t, i), element(dw0.t, i) + element(dw.t, i), 1e-12);
}

TEST(RmsNorm, Float32BackwardMatchesFloat64) {
  auto x = random_normal(DType::f64, {N, C}, 10, 1.5, 0.3), w = random_normal(DType::f64, {C}, 11, 1.0, 1.0),
       dout = random_normal(DType::f64, {N, C}, 12);
  auto out = zeros(DType::f64, {N, C}), rstd = zeros(DType::f64, {N});
  auto dx = zeros(DType::f64, {N, C}), dw = zeros(DType::f64, {C});
  rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
  rmsnorm_backward(dx.t, dw.t, dout.t, x.t, w.t, rstd.t);
  const auto x32 = testing::converted(x.t, DType::f32), w32 = testing::converted(w.t, DType::f32),
             dout32 = testing::converted(dout.t, DType::f32);
  auto out32 = zeros(DType::f32, {N, C}), rstd32 = zeros(DType::f32, {N});
  auto dx32 = zeros(DType::f32, {N, C}), dw32 = zeros(DType::f32, {C});
  rmsnorm_forward(out32.t, rstd32.t, x32.t, w32.t, kEps);
  rmsnorm_backward(dx32.t, dw32.t, dout32.t, x32.t, w32.t, rstd32.t);
  // dinp sums 53 products per row; dweight sums 37 rows of products: each a few f32 roundings
  // relative to the largest term (inputs rounded to f32 add one more).
  const double err_dx = testing::normalized_max_error(dx32.t, testing::converted(dx.t, DType::f32).t);
  const double err_dw = testing::normalized_max_error(dw32.t, testing::converted(dw.t, DType::f32).t);
  EXPECT_LE(err_dx, 2e-6);
  EXPECT_LE(err_dw, 2e-6);
  std::printf("rmsnorm_backward f32 vs f64, worst normalized error: dinp %.3g, dweight %.3g\n", err_dx, err_dw);
}

// Runs forward and backward with `threads` OpenMP threads; returns dinp and dweight.
struct Grads {
  testing::OwnedTensor out, dx, dw;
};
Grads run_with_threads(int threads, const Tensor& x, const Tensor& w, const Tensor& dout) {
  const int64_t rows = x.dim(0);
  Grads g{zeros(DType::f32, {rows, C}), zeros(DType::f32, {rows, C}), zeros(DType::f32, {C})};
  auto rstd = zeros(DType::f32, {rows});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  rmsnorm_forward(g.out.t, rstd.t, x, w, kEps);
  rmsnorm_backward(g.dx.t, g.dw.t, dout, x, w, rstd.t);
  omp_set_num_threads(saved);
  return g;
}

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.data, b.data, a.bytes()) == 0; }

TEST(RmsNorm, SameBitsForAnyThreadCount) {
  // 37 rows: one row per block; 600 rows: more rows than blocks, so blocks of 2 and 3 rows.
  for (const int64_t rows : {N, int64_t{600}}) {
    const auto x = random_normal(DType::f32, {rows, C}, 13, 1.0, 0.2), w = random_normal(DType::f32, {C}, 14),
               dout = random_normal(DType::f32, {rows, C}, 15);
    const Grads one = run_with_threads(1, x.t, w.t, dout.t), three = run_with_threads(3, x.t, w.t, dout.t),
                four = run_with_threads(4, x.t, w.t, dout.t);
    for (const Grads* g : {&three, &four}) {
      EXPECT_TRUE(same_bits(one.out.t, g->out.t)) << rows << " rows";
      EXPECT_TRUE(same_bits(one.dx.t, g->dx.t)) << rows << " rows";
      EXPECT_TRUE(same_bits(one.dw.t, g->dw.t)) << rows << " rows";
    }
  }
}

TEST(RmsNorm, RejectsBadShapesAndAliasing) {
  auto x = zeros(DType::f32, {N, C}), w = zeros(DType::f32, {C}), out = zeros(DType::f32, {N, C}),
       rstd = zeros(DType::f32, {N}), dout = zeros(DType::f32, {N, C}), dx = zeros(DType::f32, {N, C}),
       dw = zeros(DType::f32, {C});
  EXPECT_NO_THROW(rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps));
  EXPECT_NO_THROW(rmsnorm_backward(dx.t, dw.t, dout.t, x.t, w.t, rstd.t));
  auto short_w = zeros(DType::f32, {C - 1}), short_rstd = zeros(DType::f32, {N - 1});
  EXPECT_THROW(rmsnorm_forward(out.t, rstd.t, x.t, short_w.t, kEps), Error);
  EXPECT_THROW(rmsnorm_forward(out.t, short_rstd.t, x.t, w.t, kEps), Error);
  EXPECT_THROW(rmsnorm_forward(out.t.reshape({C, N}), rstd.t, x.t, w.t, kEps), Error);
  EXPECT_THROW(rmsnorm_forward(x.t, rstd.t, x.t, w.t, kEps), Error);  // out aliases inp
  auto w64 = zeros(DType::f64, {C});
  EXPECT_THROW(rmsnorm_forward(out.t, rstd.t, x.t, w64.t, kEps), Error);
  EXPECT_THROW(rmsnorm_backward(dx.t, short_w.t, dout.t, x.t, w.t, rstd.t), Error);
  EXPECT_THROW(rmsnorm_backward(dx.t.reshape({C, N}), dw.t, dout.t, x.t, w.t, rstd.t), Error);
  EXPECT_THROW(rmsnorm_backward(dx.t, dw.t, dout.t.reshape({C, N}), x.t, w.t, rstd.t), Error);
  EXPECT_THROW(rmsnorm_backward(dx.t, dw.t, dout.t, x.t, w.t, short_rstd.t), Error);
}

// 16-bit storage: the same f32 loops run on the widened rows, so out and dinp have the bits of
// the f32 kernel on the widened inputs, rounded once, and rstd and dweight (f32) equal its f32
// results exactly: the reductions are the same loops over the same f32 values.
TEST(RmsNorm, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  using testing::max_abs_difference;
  using testing::max_ulp_distance;
  using testing::rounded;
  using testing::widened;
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto x = testing::random_storage(S, {N, C}, 51, 2.0, 0.5), w = testing::random_storage(S, {C}, 52),
               dout = testing::random_storage(S, {N, C}, 53), dinp = testing::random_storage(S, {N, C}, 54);
    const auto x32 = widened(x.t), w32 = widened(w.t), dout32 = widened(dout.t), dinp32 = widened(dinp.t);

    auto out = zeros(S, {N, C}), rstd = zeros(DType::f32, {N});
    auto out32 = zeros(DType::f32, {N, C}), rstd32 = zeros(DType::f32, {N});
    rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
    rmsnorm_forward(out32.t, rstd32.t, x32.t, w32.t, kEps);
    EXPECT_EQ(max_ulp_distance(out.t, rounded(out32.t, S).t), 0);
    EXPECT_EQ(max_abs_difference(rstd.t, rstd32.t), 0);

    const auto dw = random_normal(DType::f32, {C}, 55);
    const auto dw32 = testing::converted(dw.t, DType::f32);
    rmsnorm_backward(dinp.t, dw.t, dout.t, x.t, w.t, rstd.t);
    rmsnorm_backward(dinp32.t, dw32.t, dout32.t, x32.t, w32.t, rstd32.t);
    EXPECT_EQ(max_ulp_distance(dinp.t, rounded(dinp32.t, S).t), 0);
    EXPECT_EQ(max_abs_difference(dw.t, dw32.t), 0);
  }
}

TEST(RmsNorm, WrongStorageCombinationsAreRejectedByName) {
  const auto x = zeros(DType::f16, {N, C}), w = zeros(DType::f16, {C}), out = zeros(DType::f16, {N, C});
  const auto rstd16 = zeros(DType::f16, {N}), rstd = zeros(DType::f32, {N}), w32 = zeros(DType::f32, {C});
  std::string m = testing::error_message([&] { rmsnorm_forward(out.t, rstd16.t, x.t, w.t, kEps); });
  EXPECT_NE(m.find("rmsnorm_forward: rstd is f16"), std::string::npos) << m;
  m = testing::error_message([&] { rmsnorm_backward(out.t, w.t, out.t, x.t, w.t, rstd.t); });
  EXPECT_NE(m.find("rmsnorm_backward: dweight is f16"), std::string::npos) << m;
  m = testing::error_message([&] { rmsnorm_backward(rstd.t, w32.t, out.t, x.t, w.t, rstd.t); });
  EXPECT_NE(m.find("rmsnorm_backward: dinp is f32"), std::string::npos) << m;
}

// Normal values stored as `dtype`: f32 and f64 drawn directly, bf16 and f16 rounded from f32.
testing::OwnedTensor random_stored(DType dtype, Shape shape, uint64_t seed, double std = 1.0, double mean = 0.0) {
  if (dtype == DType::f32 || dtype == DType::f64) return random_normal(dtype, shape, seed, std, mean);
  return testing::random_storage(dtype, shape, seed, std, mean);
}

// The fused op's contract: the bits of add_forward followed by rmsnorm_forward, whether res is a
// buffer of its own or a or b itself (the residual stream updated in place). With 16-bit storage
// this holds only if the norm reads the sum rounded to storage, as the unfused op does.
TEST(RmsNorm, AddRmsNormForwardIsAddThenRmsNormBitForBit) {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType stats = accumulation_dtype(dtype);
    const Shape shape{N, C};
    // The residual stream (mean 2) plus a branch of smaller values: sums that 16-bit storage rounds.
    const auto a = random_stored(dtype, shape, 71, 2.0, 2.0), b = random_stored(dtype, shape, 72, 0.3),
               w = random_stored(dtype, {C}, 73, 1.0, 1.0);
    auto res_ref = zeros(dtype, shape), out_ref = zeros(dtype, shape), rstd_ref = zeros(stats, {N});
    add_forward(res_ref.t, a.t, b.t);
    rmsnorm_forward(out_ref.t, rstd_ref.t, res_ref.t, w.t, kEps);

    auto check = [&](const char* what, const Tensor& res, const Tensor& out, const Tensor& rstd) {
      SCOPED_TRACE(what);
      EXPECT_TRUE(same_bits(res, res_ref.t));
      EXPECT_TRUE(same_bits(out, out_ref.t));
      EXPECT_TRUE(same_bits(rstd, rstd_ref.t));
    };
    {
      auto res = zeros(dtype, shape), out = zeros(dtype, shape), rstd = zeros(stats, {N});
      add_rmsnorm_forward(res.t, out.t, rstd.t, a.t, b.t, w.t, kEps);
      check("res of its own", res.t, out.t, rstd.t);
    }
    {
      // random_stored is a pure function of the seed: the same values as a, in a buffer to overwrite.
      auto a_res = random_stored(dtype, shape, 71, 2.0, 2.0), out = zeros(dtype, shape), rstd = zeros(stats, {N});
      add_rmsnorm_forward(a_res.t, out.t, rstd.t, a_res.t, b.t, w.t, kEps);
      check("res is a", a_res.t, out.t, rstd.t);
    }
    {
      auto b_res = random_stored(dtype, shape, 72, 0.3), out = zeros(dtype, shape), rstd = zeros(stats, {N});
      add_rmsnorm_forward(b_res.t, out.t, rstd.t, a.t, b_res.t, w.t, kEps);
      check("res is b", b_res.t, out.t, rstd.t);
    }
  }
}

TEST(RmsNorm, AddRmsNormForwardRejectsOverlapsAndWrongShapesByName) {
  constexpr std::string_view op = "add_rmsnorm_forward";
  const auto a = zeros(DType::f32, {N, C}), b = zeros(DType::f32, {N, C}), res = zeros(DType::f32, {N, C}),
             out = zeros(DType::f32, {N, C}), rstd = zeros(DType::f32, {N}), w = zeros(DType::f32, {C});
  EXPECT_NO_THROW(add_rmsnorm_forward(res.t, out.t, rstd.t, a.t, b.t, w.t, kEps));
  EXPECT_NO_THROW(add_rmsnorm_forward(a.t, out.t, rstd.t, a.t, b.t, w.t, kEps));  // res is a
  EXPECT_NO_THROW(add_rmsnorm_forward(b.t, out.t, rstd.t, a.t, b.t, w.t, kEps));  // res is b

  auto expect_overlap = [&](const std::function<void()>& fn, const std::string& first, const std::string& second) {
    const std::string m = testing::error_message(fn);
    EXPECT_NE(m.find(std::string(op) + ": " + first), std::string::npos) << m;
    EXPECT_NE(m.find("overlaps " + second), std::string::npos) << m;
  };
  expect_overlap([&] { add_rmsnorm_forward(res.t, res.t, rstd.t, a.t, b.t, w.t, kEps); }, "out", "res");
  expect_overlap([&] { add_rmsnorm_forward(res.t, a.t, rstd.t, a.t, b.t, w.t, kEps); }, "out", "a");
  expect_overlap([&] { add_rmsnorm_forward(res.t, b.t, rstd.t, a.t, b.t, w.t, kEps); }, "out", "b");
  // res one row into b: rows would be read by one thread after another has overwritten them.
  const auto rows = zeros(DType::f32, {N + 1, C});
  const Tensor b_view{rows.t.data, DType::f32, {N, C}, Device::cpu},
      res_view{rows.ptr<float>() + C, DType::f32, {N, C}, Device::cpu};
  expect_overlap([&] { add_rmsnorm_forward(res_view, out.t, rstd.t, a.t, b_view, w.t, kEps); }, "res", "b");

  const auto narrow = zeros(DType::f32, {N, C - 1}), b16 = zeros(DType::bf16, {N, C});
  testing::expect_error_naming([&] { add_rmsnorm_forward(res.t, out.t, rstd.t, narrow.t, b.t, w.t, kEps); },
                               std::string(op), "a");
  testing::expect_error_naming([&] { add_rmsnorm_forward(res.t, narrow.t, rstd.t, a.t, b.t, w.t, kEps); },
                               std::string(op), "out");
  testing::expect_error_naming([&] { add_rmsnorm_forward(res.t, out.t, rstd.t, a.t, b16.t, w.t, kEps); },
                               std::string(op), "b");
}

}  // namespace
}  // namespace dt::kernels
