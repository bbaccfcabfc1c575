// FP8 linear products (kernels/float8_linear.h) against their definition: the sums, in f64, of
// the products of the dequantized operands; a bf16 result is the f32 one rounded once.
#include "kernels/float8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/convert.h"
#include "kernels/linear.h"
#include "tests/float8_testing.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::Quantized;
using testing::quantize;

std::vector<double> dequantized(const Quantized& q) {
  testing::OwnedTensor out = testing::zeros(DType::f32, q.data.t.shape);
  float8_dequantize(out.t, q.q());
  std::vector<double> v(static_cast<size_t>(out.t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = out.ptr<float>()[i];
  return v;
}

constexpr int64_t N = 64, C = 48, OC = 32;

struct Case {
  const char* name;
  Float8Tiles rows, columns, square;  // activations along C / OC, down N, weights
};
// The experts' weight gradient reads the rows' (1, B) tiles (model/float8_grouped_linear.h).
const Case kCases[] = {{"whole", {}, {}, {}},
                       {"tiles of 16", {1, 16}, {16, 1}, {16, 16}},
                       {"rows' tiles of 16 in every product", {1, 16}, {1, 16}, {16, 16}}};

TEST(Float8Linear, ProductsAreTheSumsOfTheDequantizedProducts) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const testing::OwnedTensor x = testing::random_normal(DType::f32, {N, C}, 1, 3.0);
    const testing::OwnedTensor w = testing::random_normal(DType::f32, {OC, C}, 2, 0.05);
    const testing::OwnedTensor dy = testing::random_normal(DType::f32, {N, OC}, 3, 1e-3);
    const testing::OwnedTensor bias = testing::random_normal(DType::f32, {OC}, 4);
    const Quantized xq = quantize(x.t, DType::f8e4m3, c.rows), wq = quantize(w.t, DType::f8e4m3, c.square);
    const Quantized dyq = quantize(dy.t, DType::f8e5m2, c.rows);
    const Quantized x_cols = quantize(x.t, DType::f8e4m3, c.columns), dy_cols = quantize(dy.t, DType::f8e5m2, c.columns);
    const std::vector<double> X = dequantized(xq), W = dequantized(wq), DY = dequantized(dyq);
    const std::vector<double> Xc = dequantized(x_cols), DYc = dequantized(dy_cols);

    std::vector<double> out(N * OC), dinp(N * C), dw(OC * C, 0.5);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) {
        double sum = bias.ptr<float>()[o];
        for (int64_t k = 0; k < C; ++k) sum += X[n * C + k] * W[o * C + k];
        out[n * OC + o] = sum;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < C; ++k) {
        double sum = 0;
        for (int64_t o = 0; o < OC; ++o) sum += DY[n * OC + o] * W[o * C + k];
        dinp[n * C + k] = sum;
      }
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t k = 0; k < C; ++k)
        for (int64_t n = 0; n < N; ++n) dw[o * C + k] += DYc[n * OC + o] * Xc[n * C + k];

    const testing::OwnedTensor got_out = testing::zeros(DType::f32, {N, OC}), got_dinp = testing::zeros(DType::f32, {N, C});
    testing::OwnedTensor got_dw = testing::zeros(DType::f32, {OC, C});
    for (int64_t i = 0; i < OC * C; ++i) got_dw.ptr<float>()[i] = 0.5f;  // accumulated into
    float8_linear_forward(got_out.t, xq.q(), wq.q(), bias.t);
    float8_linear_backward_input(got_dinp.t, dyq.q(), wq.q());
    float8_linear_backward_weight(got_dw.t, dy_cols.q(), x_cols.q());
    // f32 sums of at most 64 exact products: within 64 f32 roundings of the exact sum.
    EXPECT_LT(testing::normalized_error(got_out.t, out), 64 * 6e-8);
    EXPECT_LT(testing::normalized_error(got_dinp.t, dinp), 64 * 6e-8);
    EXPECT_LT(testing::normalized_error(got_dw.t, dw), 64 * 6e-8);

    // bf16 results: the f32 ones rounded once.
    const testing::OwnedTensor out16 = testing::zeros(DType::bf16, {N, OC}), bias16 = testing::zeros(DType::bf16, {OC});
    const testing::OwnedTensor dinp16 = testing::zeros(DType::bf16, {N, C});
    const testing::OwnedTensor rounded_out = testing::zeros(DType::bf16, {N, OC}), rounded_dinp = testing::zeros(DType::bf16, {N, C});
    convert(bias16.t, bias.t);
    const testing::OwnedTensor widened_bias = testing::zeros(DType::f32, {OC});
    convert(widened_bias.t, bias16.t);
    float8_linear_forward(got_out.t, xq.q(), wq.q(), widened_bias.t);
    float8_linear_forward(out16.t, xq.q(), wq.q(), bias16.t);
    float8_linear_backward_input(dinp16.t, dyq.q(), wq.q());
    convert(rounded_out.t, got_out.t);
    convert(rounded_dinp.t, got_dinp.t);
    EXPECT_EQ(std::memcmp(out16.t.data, rounded_out.t.data, out16.t.bytes()), 0);
    EXPECT_EQ(std::memcmp(dinp16.t.data, rounded_dinp.t.data, dinp16.t.bytes()), 0);
  }
}

TEST(Float8Linear, RefusesTilesAProductDoesNotRead) {
  const testing::OwnedTensor x = testing::random_normal(DType::f32, {N, C}, 1);
  const testing::OwnedTensor w = testing::random_normal(DType::f32, {OC, C}, 2);
  const Quantized down = quantize(x.t, DType::f8e4m3, {16, 1}), wq = quantize(w.t, DType::f8e4m3, {16, 16});
  const testing::OwnedTensor out = testing::zeros(DType::bf16, {N, OC});
  EXPECT_NE(testing::error_of([&] { float8_linear_forward(out.t, down.q(), wq.q(), {}); })
                .find("inp is quantized in 16 x 1 tiles, which this product does not read"),
            std::string::npos);
  const Quantized square = quantize(x.t, DType::f8e4m3, {16, 16});
  testing::OwnedTensor dw = testing::zeros(DType::f32, {OC, C});
  const testing::OwnedTensor dy = testing::random_normal(DType::f32, {N, OC}, 3);
  const Quantized dyq = quantize(dy.t, DType::f8e5m2, {16, 1});
  EXPECT_NE(testing::error_of([&] { float8_linear_backward_weight(dw.t, dyq.q(), square.q()); })
                .find("inp is quantized in 16 x 16 tiles"),
            std::string::npos);
}

// The bias's gradient alone equals the one linear_backward_weight adds beside the weight's.
TEST(Float8Linear, BiasGradientAloneEqualsTheOneBesideTheWeights) {
  for (const DType storage : {DType::f32, DType::bf16}) {
    const testing::OwnedTensor dy32 = testing::random_normal(DType::f32, {N, OC}, 5);
    const testing::OwnedTensor x32 = testing::random_normal(DType::f32, {N, C}, 6);
    const testing::OwnedTensor dy = testing::zeros(storage, {N, OC}), x = testing::zeros(storage, {N, C});
    convert(dy.t, dy32.t);
    convert(x.t, x32.t);
    const testing::OwnedTensor dw = testing::zeros(DType::f32, {OC, C}), both = testing::random_normal(DType::f32, {OC}, 7);
    const testing::OwnedTensor alone = testing::zeros(DType::f32, {OC});
    std::memcpy(alone.t.data, both.t.data, both.t.bytes());
    linear_backward_weight(dw.t, both.t, dy.t, x.t);
    linear_backward_bias(alone.t, dy.t);
    EXPECT_EQ(std::memcmp(alone.t.data, both.t.data, both.t.bytes()), 0) << dtype_name(storage);
  }
}

}  // namespace
}  // namespace dt::kernels
