#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
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

constexpr int64_t N = 9, C = 37;

TEST(LayerNorm, ForwardMatchesNaive) {
  auto x = random_normal(DType::f32, {N, C}, 1, 2.0, 0.5), w = random_normal(DType::f32, {C}, 2),
       b = random_normal(DType::f32, {C}, 3);
  auto out = zeros(DType::f32, {N, C}), mean = zeros(DType::f32, {N}), rstd = zeros(DType::f32, {N});
  auto expected = zeros(DType::f32, {N, C});
  layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += element(x.t, n * C + c) / C;
    for (int64_t c = 0; c < C; ++c) v += std::pow(element(x.t, n * C + c) - m, 2) / C;
    const double s = 1 / std::sqrt(v + kLayerNormEps);
    EXPECT_NEAR(element(mean.t, n), m, 1e-6);
    EXPECT_NEAR(element(rstd.t, n), s, 1e-6 * s);
    for (int64_t c = 0; c < C; ++c)
      expected.ptr<float>()[n * C + c] =
          static_cast<float>((element(x.t, n * C + c) - m) * s * element(w.t, c) + element(b.t, c));
  }
  // fp32 sums of 37 terms and a normalisation: a few roundings of O(1) values.
  EXPECT_LE(testing::normalized_max_error(out.t, expected.t), 1e-6);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto x = random_normal(DType::f64, {N, C}, 4, 1.5, 0.3), w = random_normal(DType::f64, {C}, 5),
       b = random_normal(DType::f64, {C}, 6), dout = random_normal(DType::f64, {N, C}, 7);
  auto out = zeros(DType::f64, {N, C}), mean = zeros(DType::f64, {N}), rstd = zeros(DType::f64, {N});
  layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
  auto dx = zeros(DType::f64, {N, C}), dw = zeros(DType::f64, {C}), db = zeros(DType::f64, {C});
  layernorm_backward(dx.t, dw.t, db.t, dout.t, x.t, w.t, mean.t, rstd.t);
  auto loss = [&] {
    layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}, {"weight", w.t, dw.t}, {"bias", b.t, db.t}});
  // Central differences with h = 1e-6 on a smooth function: truncation h^2 ~ 1e-12, roundoff
  // 1e-16 / 1e-6 ~ 1e-10, relative to gradients of order 1.
  EXPECT_LE(r.worst_error, 1e-7) << r.where;

  // All three gradients accumulate: starting from the result, a second call doubles it.
  layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
  auto dx2 = testing::converted(dx.t, DType::f64), dw2 = testing::converted(dw.t, DType::f64),
       db2 = testing::converted(db.t, DType::f64);
  layernorm_backward(dx2.t, dw2.t, db2.t, dout.t, x.t, w.t, mean.t, rstd.t);
  for (int64_t i = 0; i < dx.t.numel(); ++i) EXPECT_NEAR(element(dx2.t, i), 2 * element(dx.t, i), 1e-12);
  for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(element(dw2.t, i), 2 * element(dw.t, i), 1e-12);
  for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(element(db2.t, i), 2 * element(db.t, i), 1e-12);
}

// The weight gradients are sums over rows; their bits must not depend on the thread count, so
// that a run on another machine, or resumed with other threads, repeats exactly.
TEST(LayerNorm, BackwardHasTheSameBitsForAnyThreadCount) {
  for (const int64_t rows : {N, int64_t{600}}) {  // fewer and more rows than row blocks
    const auto x = random_normal(DType::f32, {rows, C}, 21, 1.5, 0.3), w = random_normal(DType::f32, {C}, 22),
               b = random_normal(DType::f32, {C}, 23), dout = random_normal(DType::f32, {rows, C}, 24);
    std::vector<std::vector<float>> results;
    for (const int threads : {1, 3, 4}) {
      auto out = zeros(DType::f32, {rows, C}), mean = zeros(DType::f32, {rows}), rstd = zeros(DType::f32, {rows});
      auto dx = zeros(DType::f32, {rows, C}), dw = zeros(DType::f32, {C}), db = zeros(DType::f32, {C});
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
      layernorm_backward(dx.t, dw.t, db.t, dout.t, x.t, w.t, mean.t, rstd.t);
      omp_set_num_threads(saved);
      std::vector<float> all(dx.ptr<float>(), dx.ptr<float>() + rows * C);
      all.insert(all.end(), dw.ptr<float>(), dw.ptr<float>() + C);
      all.insert(all.end(), db.ptr<float>(), db.ptr<float>() + C);
      results.push_back(std::move(all));
    }
    for (size_t i = 1; i < results.size(); ++i)
      EXPECT_EQ(std::memcmp(results[0].data(), results[i].data(), results[0].size() * sizeof(float)), 0) << rows << " rows";
  }
}

// 16-bit storage: the same f32 loops run on the widened rows, so out and dinp have the bits of
// the f32 kernel on the widened inputs, rounded once, and mean, rstd, dweight and dbias (f32)
// equal its f32 results exactly: the reductions are the same loops over the same f32 values.
TEST(LayerNorm, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  using testing::max_abs_difference;
  using testing::max_ulp_distance;
  using testing::rounded;
  using testing::widened;
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const int64_t rows = 40;
    const auto x = testing::random_storage(S, {rows, C}, 41, 2.0, 0.5), w = testing::random_storage(S, {C}, 42),
               b = testing::random_storage(S, {C}, 43), dout = testing::random_storage(S, {rows, C}, 44),
               dinp = testing::random_storage(S, {rows, C}, 45);
    const auto x32 = widened(x.t), w32 = widened(w.t), b32 = widened(b.t), dout32 = widened(dout.t),
               dinp32 = widened(dinp.t);

    auto out = zeros(S, {rows, C}), mean = zeros(DType::f32, {rows}), rstd = zeros(DType::f32, {rows});
    auto out32 = zeros(DType::f32, {rows, C}), mean32 = zeros(DType::f32, {rows}), rstd32 = zeros(DType::f32, {rows});
    layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
    layernorm_forward(out32.t, mean32.t, rstd32.t, x32.t, w32.t, b32.t);
    EXPECT_EQ(max_ulp_distance(out.t, rounded(out32.t, S).t), 0);
    EXPECT_EQ(max_abs_difference(mean.t, mean32.t), 0);
    EXPECT_EQ(max_abs_difference(rstd.t, rstd32.t), 0);

    const auto dw = random_normal(DType::f32, {C}, 46), db = random_normal(DType::f32, {C}, 47);
    const auto dw32 = testing::converted(dw.t, DType::f32), db32 = testing::converted(db.t, DType::f32);
    layernorm_backward(dinp.t, dw.t, db.t, dout.t, x.t, w.t, mean.t, rstd.t);
    layernorm_backward(dinp32.t, dw32.t, db32.t, dout32.t, x32.t, w32.t, mean32.t, rstd32.t);
    EXPECT_EQ(max_ulp_distance(dinp.t, rounded(dinp32.t, S).t), 0);
    EXPECT_EQ(max_abs_difference(dw.t, dw32.t), 0);
    EXPECT_EQ(max_abs_difference(db.t, db32.t), 0);
  }
}

TEST(LayerNorm, WrongStorageCombinationsAreRejectedByName) {
  const auto x = zeros(DType::bf16, {N, C}), w = zeros(DType::bf16, {C}), b = zeros(DType::bf16, {C});
  const auto out = zeros(DType::bf16, {N, C}), stats16 = zeros(DType::bf16, {N}), stats = zeros(DType::f32, {N});
  const auto w32 = zeros(DType::f32, {C});
  std::string m = testing::error_message([&] { layernorm_forward(out.t, stats16.t, stats.t, x.t, w.t, b.t); });
  EXPECT_NE(m.find("layernorm_forward: mean is bf16"), std::string::npos) << m;
  m = testing::error_message([&] { layernorm_forward(out.t, stats.t, stats.t, x.t, w32.t, b.t); });
  EXPECT_NE(m.find("layernorm_forward: weight is f32"), std::string::npos) << m;
  m = testing::error_message([&] { layernorm_backward(out.t, w.t, w32.t, out.t, x.t, w.t, stats.t, stats.t); });
  EXPECT_NE(m.find("layernorm_backward: dweight is bf16"), std::string::npos) << m;
}

// Normal values stored as `dtype`: f32 and f64 drawn directly, bf16 and f16 rounded from f32.
testing::OwnedTensor random_stored(DType dtype, Shape shape, uint64_t seed, double std = 1.0, double mean = 0.0) {
  if (dtype == DType::f32 || dtype == DType::f64) return random_normal(dtype, shape, seed, std, mean);
  return testing::random_storage(dtype, shape, seed, std, mean);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

// The fused op's contract: the bits of add_forward followed by layernorm_forward, whether res is
// a buffer of its own or a or b itself (the residual stream updated in place). With 16-bit
// storage this holds only if the norm reads the sum rounded to storage, as the unfused op does.
TEST(LayerNorm, AddLayerNormForwardIsAddThenLayerNormBitForBit) {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType stats = accumulation_dtype(dtype);
    const int64_t rows = 40;
    const Shape shape{rows, C};
    // The residual stream (mean 2) plus a branch of smaller values: sums that 16-bit storage rounds.
    const auto a = random_stored(dtype, shape, 61, 2.0, 2.0), b = random_stored(dtype, shape, 62, 0.3),
               w = random_stored(dtype, {C}, 63), bias = random_stored(dtype, {C}, 64);
    auto res_ref = zeros(dtype, shape), out_ref = zeros(dtype, shape), mean_ref = zeros(stats, {rows}),
         rstd_ref = zeros(stats, {rows});
    add_forward(res_ref.t, a.t, b.t);
    layernorm_forward(out_ref.t, mean_ref.t, rstd_ref.t, res_ref.t, w.t, bias.t);

    auto check = [&](const char* what, const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
      SCOPED_TRACE(what);
      EXPECT_TRUE(same_bytes(res, res_ref.t));
      EXPECT_TRUE(same_bytes(out, out_ref.t));
      EXPECT_TRUE(same_bytes(mean, mean_ref.t));
      EXPECT_TRUE(same_bytes(rstd, rstd_ref.t));
    };
    {
      auto res = zeros(dtype, shape), out = zeros(dtype, shape), mean = zeros(stats, {rows}),
           rstd = zeros(stats, {rows});
      add_layernorm_forward(res.t, out.t, mean.t, rstd.t, a.t, b.t, w.t, bias.t);
      check("res of its own", res.t, out.t, mean.t, rstd.t);
    }
    {
      // random_stored is a pure function of the seed: the same values as a, in a buffer to overwrite.
      auto a_res = random_stored(dtype, shape, 61, 2.0, 2.0), out = zeros(dtype, shape), mean = zeros(stats, {rows}),
           rstd = zeros(stats, {rows});
      add_layernorm_forward(a_res.t, out.t, mean.t, rstd.t, a_res.t, b.t, w.t, bias.t);
      check("res is a", a_res.t, out.t, mean.t, rstd.t);
    }
    {
      auto b_res = random_stored(dtype, shape, 62, 0.3), out = zeros(dtype, shape), mean = zeros(stats, {rows}),
           rstd = zeros(stats, {rows});
      add_layernorm_forward(b_res.t, out.t, mean.t, rstd.t, a.t, b_res.t, w.t, bias.t);
      check("res is b", b_res.t, out.t, mean.t, rstd.t);
    }
  }
}

TEST(LayerNorm, AddLayerNormForwardRejectsOverlapsAndWrongShapesByName) {
  constexpr std::string_view op = "add_layernorm_forward";
  const auto a = zeros(DType::f32, {N, C}), b = zeros(DType::f32, {N, C}), res = zeros(DType::f32, {N, C}),
             out = zeros(DType::f32, {N, C}), stats = zeros(DType::f32, {N}), w = zeros(DType::f32, {C});
  EXPECT_NO_THROW(add_layernorm_forward(res.t, out.t, stats.t, stats.t, a.t, b.t, w.t, w.t));
  EXPECT_NO_THROW(add_layernorm_forward(a.t, out.t, stats.t, stats.t, a.t, b.t, w.t, w.t));  // res is a
  EXPECT_NO_THROW(add_layernorm_forward(b.t, out.t, stats.t, stats.t, a.t, b.t, w.t, w.t));  // res is b

  auto expect_overlap = [&](const std::function<void()>& fn, const std::string& first, const std::string& second) {
    const std::string m = testing::error_message(fn);
    EXPECT_NE(m.find(std::string(op) + ": " + first), std::string::npos) << m;
    EXPECT_NE(m.find("overlaps " + second), std::string::npos) << m;
  };
  expect_overlap([&] { add_layernorm_forward(res.t, res.t, stats.t, stats.t, a.t, b.t, w.t, w.t); }, "out", "res");
  expect_overlap([&] { add_layernorm_forward(res.t, a.t, stats.t, stats.t, a.t, b.t, w.t, w.t); }, "out", "a");
  expect_overlap([&] { add_layernorm_forward(res.t, b.t, stats.t, stats.t, a.t, b.t, w.t, w.t); }, "out", "b");
  // res one row into a: rows would be read by one thread after another has overwritten them.
  const auto rows = zeros(DType::f32, {N + 1, C});
  const Tensor a_view{rows.t.data, DType::f32, {N, C}, Device::cpu},
      res_view{rows.ptr<float>() + C, DType::f32, {N, C}, Device::cpu};
  expect_overlap([&] { add_layernorm_forward(res_view, out.t, stats.t, stats.t, a_view, b.t, w.t, w.t); }, "res",
                 "a");

  const auto narrow = zeros(DType::f32, {N, C - 1}), a64 = zeros(DType::f64, {N, C});
  testing::expect_error_naming([&] { add_layernorm_forward(res.t, out.t, stats.t, stats.t, a.t, narrow.t, w.t, w.t); },
                               std::string(op), "b");
  testing::expect_error_naming([&] { add_layernorm_forward(res.t, narrow.t, stats.t, stats.t, a.t, b.t, w.t, w.t); },
                               std::string(op), "out");
  testing::expect_error_naming([&] { add_layernorm_forward(res.t, out.t, stats.t, stats.t, a64.t, b.t, w.t, w.t); },
                               std::string(op), "a");
}

}  // namespace
}  // namespace dt::kernels
