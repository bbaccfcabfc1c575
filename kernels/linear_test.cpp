#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/storage.h"
#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

constexpr int64_t N = 7, C = 13, OC = 11;

// fp32 against a double-accumulating loop: sgemm's blocked sums differ from the sequential
// one by a few roundings of terms ~|x||w| ~ 1 each, over K = 13 terms: ~1e-6 of the scale.
constexpr double kFp32Bound = 1e-5;
// Central differences in fp64 on a bilinear function: exact up to roundoff ~1e-10.
constexpr double kGradBound = 1e-7;

TEST(Linear, ForwardMatchesNaive) {
  auto x = random_normal(DType::f32, {N, C}, 1), w = random_normal(DType::f32, {OC, C}, 2),
       b = random_normal(DType::f32, {OC}, 3);
  auto out = zeros(DType::f32, {N, OC}), expected = zeros(DType::f32, {N, OC});
  linear_forward(out.t, x.t, w.t, b.t);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = element(b.t, o);
      for (int64_t c = 0; c < C; ++c) s += element(x.t, n * C + c) * element(w.t, o * C + c);
      expected.ptr<float>()[n * OC + o] = static_cast<float>(s);
    }
  EXPECT_LE(testing::normalized_max_error(out.t, expected.t), kFp32Bound);
}

TEST(Linear, BackwardMatchesFiniteDifferencesAndAccumulatesWeights) {
  auto x = random_normal(DType::f64, {N, C}, 4), w = random_normal(DType::f64, {OC, C}, 5),
       b = random_normal(DType::f64, {OC}, 6), dout = random_normal(DType::f64, {N, OC}, 7);
  auto out = zeros(DType::f64, {N, OC}), dx = random_normal(DType::f64, {N, C}, 8);  // dinp is set, not added
  auto dw = zeros(DType::f64, {OC, C}), db = zeros(DType::f64, {OC});
  linear_backward_input(dx.t, dout.t, w.t);
  linear_backward_weight(dw.t, db.t, dout.t, x.t);
  auto loss = [&] {
    linear_forward(out.t, x.t, w.t, b.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}, {"weight", w.t, dw.t}, {"bias", b.t, db.t}});
  EXPECT_LE(r.worst_error, kGradBound) << r.where;

  // Weight gradients add into what is there: a second call doubles them (up to the rounding
  // of adding the same terms onto a non-zero start).
  auto dw2 = testing::converted(dw.t, DType::f64), db2 = testing::converted(db.t, DType::f64);
  linear_backward_weight(dw2.t, db2.t, dout.t, x.t);
  for (int64_t i = 0; i < dw.t.numel(); ++i) EXPECT_NEAR(element(dw2.t, i), 2 * element(dw.t, i), 1e-12);
  for (int64_t i = 0; i < db.t.numel(); ++i) EXPECT_NEAR(element(db2.t, i), 2 * element(db.t, i), 1e-12);
}

TEST(Linear, NoBiasAndShapeErrors) {
  auto x = random_normal(DType::f32, {N, C}, 1), w = random_normal(DType::f32, {OC, C}, 2);
  auto out = zeros(DType::f32, {N, OC});
  linear_forward(out.t, x.t, w.t, Tensor{});
  EXPECT_NEAR(out.ptr<float>()[0], [&] {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += element(x.t, c) * element(w.t, c);
    return s;
  }(), 1e-5);
  auto wrong = zeros(DType::f32, {N, OC + 1});
  EXPECT_THROW(linear_forward(wrong.t, x.t, w.t, Tensor{}), Error);
}

// 16-bit storage. Values held both as stored bits (the op's inputs) and exactly widened to f32
// (the reference's inputs).
template <typename S>
struct Stored {
  std::vector<S> bits;
  std::vector<float> wide;
  Shape shape;
  Stored(Shape shape, uint64_t seed) : shape(shape) {
    const testing::OwnedTensor r = random_normal(DType::f32, shape, seed);
    for (int64_t i = 0; i < r.t.numel(); ++i) {
      S s;
      cpu::store(&s, r.ptr<float>()[i]);
      bits.push_back(s);
      wide.push_back(cpu::load(s));
    }
  }
  Tensor t16() { return Tensor{.data = bits.data(), .dtype = cpu::dtype_of_storage<S>(), .shape = shape}; }
  Tensor t32() { return Tensor{.data = wide.data(), .dtype = DType::f32, .shape = shape}; }
};

// Distance in units in the last place of two 16-bit values (bf16 and f16 are both sign-magnitude).
int ulps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t x) { return x & 0x8000 ? -(x & 0x7fff) : int(x); };
  return std::abs(ordered(a) - ordered(b));
}

template <typename S>
class Linear16 : public ::testing::Test {};
using StorageTypes = ::testing::Types<cpu::bf16_t, cpu::f16_t>;
TYPED_TEST_SUITE(Linear16, StorageTypes);

// Sizes past oneDNN's small-matrix cases, with a 3-d activation (B, T, C).
constexpr int64_t kB = 3, kT = 29, kC = 96, kOC = 80, kRows = kB * kT;

// out and dinp against the f32 kernel on the widened inputs, rounded once to S: the rounding
// points the op documents, emulated. bf16 with bf16 units goes through oneDNN (AMX), whose
// fp32 sums are taken in another order than sgemm's, so the fp32 values differ by a few fp32
// ulps and, where one lies within that of a rounding midpoint of S, the rounded values differ by
// one ulp of S: at most one ulp, on a small fraction of the elements. f16 (and bf16 without
// bf16 units) runs sgemm on the same widened values as the reference: bitwise equal.
TYPED_TEST(Linear16, OutputsAreTheF32KernelRoundedOnce) {
  using S = TypeParam;
  const bool exact = !(std::is_same_v<S, cpu::bf16_t> && cpu::onednn_has_native_bf16());
  Stored<S> x({kB, kT, kC}, 1), w({kOC, kC}, 2), b({kOC}, 3), dout({kB, kT, kOC}, 4);
  auto compare = [&](const char* what, std::vector<S>& actual, const Tensor& reference) {
    int worst = 0, differing = 0;
    for (int64_t i = 0; i < reference.numel(); ++i) {
      S rounded;
      cpu::store(&rounded, reference.ptr<float>()[i]);
      const int d = ulps(actual[i].bits, rounded.bits);
      worst = std::max(worst, d);
      differing += d != 0;
    }
    EXPECT_LE(worst, exact ? 0 : 1) << what;
    EXPECT_LE(differing, reference.numel() / 20) << what;  // rare: only near midpoints
    std::printf("%s %s: %d of %lld differ by <= %d ulp\n", std::string(dtype_name(cpu::dtype_of_storage<S>())).c_str(),
                what, differing, static_cast<long long>(reference.numel()), worst);
  };
  for (const bool with_bias : {true, false}) {
    std::vector<S> out(kRows * kOC, S{0x7fff});
    auto ref = zeros(DType::f32, {kB, kT, kOC});
    linear_forward(Tensor{.data = out.data(), .dtype = cpu::dtype_of_storage<S>(), .shape = {kB, kT, kOC}}, x.t16(),
                   w.t16(), with_bias ? b.t16() : Tensor{});
    linear_forward(ref.t, x.t32(), w.t32(), with_bias ? b.t32() : Tensor{});
    compare(with_bias ? "out (bias)" : "out (no bias)", out, ref.t);
  }
  std::vector<S> dx(kRows * kC, S{0x7fff});
  auto dx_ref = zeros(DType::f32, {kB, kT, kC});
  linear_backward_input(Tensor{.data = dx.data(), .dtype = cpu::dtype_of_storage<S>(), .shape = {kB, kT, kC}},
                        dout.t16(), w.t16());
  linear_backward_input(dx_ref.t, dout.t32(), w.t32());
  compare("dinp", dx, dx_ref.t);
}

// dweight and dbias are f32 and accumulate onto what is there. Products of two bf16 or two f16
// values are exact in fp32 (at most 22 significant bits), so the only difference from the f32
// kernel on the widened values is the order of the fp32 sums over the kRows = 87 rows: a few
// roundings of ~2^-24 relative each; bound 1e-5 of the largest element (bitwise where sgemm is
// used, as for out). dbias sums the same loaded values in the same order: bitwise.
TYPED_TEST(Linear16, WeightGradientsAreF32AndAccumulate) {
  using S = TypeParam;
  Stored<S> x({kB, kT, kC}, 5), dout({kB, kT, kOC}, 6);
  auto dw = random_normal(DType::f32, {kOC, kC}, 7), db = random_normal(DType::f32, {kOC}, 8);
  auto dw_ref = testing::converted(dw.t, DType::f32), db_ref = testing::converted(db.t, DType::f32);
  linear_backward_weight(dw.t, db.t, dout.t16(), x.t16());
  linear_backward_weight(dw_ref.t, db_ref.t, dout.t32(), x.t32());
  const double dw_error = testing::normalized_max_error(dw.t, dw_ref.t);
  EXPECT_LE(dw_error, 1e-5);
  EXPECT_EQ(testing::normalized_max_error(db.t, db_ref.t), 0.0);
  std::printf("%s dweight: normalized max error %.3g\n", std::string(dtype_name(cpu::dtype_of_storage<S>())).c_str(),
              dw_error);
}

TEST(Linear16, RejectsMixedDtypes) {
  Stored<cpu::bf16_t> x({kRows, kC}, 1), w({kOC, kC}, 2), b({kOC}, 3), dout({kRows, kOC}, 4);
  Stored<cpu::f16_t> w16({kOC, kC}, 2);
  std::vector<cpu::bf16_t> out(kRows * kOC), dx(kRows * kC);
  const Tensor out_t{.data = out.data(), .dtype = DType::bf16, .shape = {kRows, kOC}};
  const Tensor dx_t{.data = dx.data(), .dtype = DType::bf16, .shape = {kRows, kC}};
  auto out32 = zeros(DType::f32, {kRows, kOC});
  auto dw32 = zeros(DType::f32, {kOC, kC}), db32 = zeros(DType::f32, {kOC});
  auto dw16 = zeros(DType::bf16, {kOC, kC}), db64 = zeros(DType::f64, {kOC});
  EXPECT_NO_THROW(linear_forward(out_t, x.t16(), w.t16(), b.t16()));
  testing::expect_error_naming([&] { linear_forward(out_t, x.t32(), w.t16(), b.t16()); }, "linear_forward", "inp");
  testing::expect_error_naming([&] { linear_forward(out_t, x.t16(), w.t16(), b.t32()); }, "linear_forward", "bias");
  testing::expect_error_naming([&] { linear_forward(out32.t, x.t16(), w.t16(), b.t16()); }, "linear_forward", "out");
  testing::expect_error_naming([&] { linear_forward(out_t, x.t16(), w16.t16(), Tensor{}); }, "linear_forward", "out");
  testing::expect_error_naming([&] { linear_backward_input(dx_t, dout.t16(), w16.t16()); }, "linear_backward_input", "dinp");
  testing::expect_error_naming([&] { linear_backward_input(dx_t, dout.t32(), w.t16()); }, "linear_backward_input", "dout");
  EXPECT_NO_THROW(linear_backward_weight(dw32.t, db32.t, dout.t16(), x.t16()));
  testing::expect_error_naming([&] { linear_backward_weight(dw16.t, Tensor{}, dout.t16(), x.t16()); },
                      "linear_backward_weight", "dweight");
  testing::expect_error_naming([&] { linear_backward_weight(dw32.t, db64.t, dout.t16(), x.t16()); },
                      "linear_backward_weight", "dbias");
  testing::expect_error_naming([&] { linear_backward_weight(dw32.t, db32.t, dout.t32(), x.t16()); },
                      "linear_backward_weight", "dout");
}

}  // namespace
}  // namespace dt::kernels
