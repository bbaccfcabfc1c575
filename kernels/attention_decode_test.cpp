// attention_decode against the training attention (kernels/attention.h): the last M positions of
// a sequence attended through a key/value cache must give the rows attention_forward gives them
// when it runs the whole sequence at once.
#include "kernels/attention_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

struct Case {
  const char* name;
  int T, M, NH, NKV, HS;
  double input_std = 1;  // std of q, k, v; larger makes the softmax peakier
  int qkv_width() const { return (NH + 2 * NKV) * HS; }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " T=" << c.T << " M=" << c.M << " NH=" << c.NH << " NKV=" << c.NKV << " HS=" << c.HS;
}

// max |actual - expected| / max |expected| over f32 or f64 tensors of equal size.
double normalized_error(const Tensor& actual, const Tensor& expected) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    diff = std::max(diff, std::fabs(testing::element(actual, i) - testing::element(expected, i)));
    scale = std::max(scale, std::fabs(testing::element(expected, i)));
  }
  return diff / scale;
}

// The decode inputs cut out of one packed qkv (1, T, QKV) of `dtype`: q of the last M positions,
// (M, NH*HS), and the key/value heads of every position, (T, 2*NKV*HS).
struct DecodeInputs {
  testing::OwnedTensor q, kv;
};
DecodeInputs split(const Case& c, const Tensor& qkv) {
  const int64_t C = int64_t{c.NH} * c.HS, KV = 2 * int64_t{c.NKV} * c.HS, elem = dtype_size(qkv.dtype);
  DecodeInputs in{testing::zeros(qkv.dtype, {c.M, C}), testing::zeros(qkv.dtype, {c.T, KV})};
  const char* rows = static_cast<const char*>(qkv.data);
  for (int64_t t = 0; t < c.T; ++t) {
    const char* row = rows + t * c.qkv_width() * elem;
    std::memcpy(static_cast<char*>(in.kv.t.data) + t * KV * elem, row + C * elem, KV * elem);
    if (t >= c.T - c.M)
      std::memcpy(static_cast<char*>(in.q.t.data) + (t - (c.T - c.M)) * C * elem, row, C * elem);
  }
  return in;
}

class AttentionDecodeVsForward : public ::testing::TestWithParam<Case> {};

// The reference is attention_forward in f64; out rows [T - M, T) are the decode's rows.
// f64 decode: the same sums in another order, so ~1e-16 per operation; bound 1e-12.
// f32 decode: as attention_forward's own f32 test (kernels/attention_test.cpp), a softmax-weighted
// sum of at most T terms with f32 rounding and vec_exp's 1.4 ulp; bound 1e-5 of the largest
// element. A wrong mask, offset, scale or head mapping gives errors of order 1.
TEST_P(AttentionDecodeVsForward, LastRowsMatchF64AttentionForward) {
  const Case c = GetParam();
  const int64_t C = int64_t{c.NH} * c.HS;
  const testing::OwnedTensor qkv = testing::random_normal(DType::f64, {1, c.T, c.qkv_width()}, 7, c.input_std);
  const testing::OwnedTensor full = testing::zeros(DType::f64, {1, c.T, C});
  const testing::OwnedTensor lse = testing::zeros(DType::f64, {1, c.NH, c.T});
  attention_forward(full.t, lse.t, qkv.t, {c.NH, c.NKV});
  const Tensor expected = full.t.reshape({c.T, C}).slice_rows(c.T - c.M, c.M);

  const DecodeInputs in64 = split(c, qkv.t);
  const testing::OwnedTensor out64 = testing::zeros(DType::f64, {c.M, C});
  attention_decode(out64.t, in64.q.t, in64.kv.t, c.NH, c.NKV);
  EXPECT_LT(normalized_error(out64.t, expected), 1e-12);

  const testing::OwnedTensor qkv32 = testing::converted(qkv.t, DType::f32);
  const DecodeInputs in32 = split(c, qkv32.t);
  const testing::OwnedTensor out32 = testing::zeros(DType::f32, {c.M, C});
  attention_decode(out32.t, in32.q.t, in32.kv.t, c.NH, c.NKV);
  const double error = normalized_error(out32.t, expected);
  std::printf("%s: f32 normalized max error %.3g\n", c.name, error);
  EXPECT_LT(error, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    AttentionDecode, AttentionDecodeVsForward,
    ::testing::Values(Case{"one_step_mha", 37, 1, 4, 4, 16}, Case{"chunk_gqa_odd_head", 70, 5, 6, 2, 13},
                      Case{"whole_prompt_mqa", 150, 150, 4, 1, 64}, Case{"one_position", 1, 1, 2, 1, 8},
                      // Scores of std ~9: one key dominates most rows.
                      Case{"peaked", 140, 3, 3, 1, 32, 3.0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AttentionDecodeArguments, RejectShortCacheBadHeadsAnd16Bit) {
  const testing::OwnedTensor q = testing::zeros(DType::f32, {3, 12}), out = testing::zeros(DType::f32, {3, 12});
  const testing::OwnedTensor kv = testing::zeros(DType::f32, {5, 12});  // NH = 4, NKV = 2, HS = 3
  EXPECT_NO_THROW(attention_decode(out.t, q.t, kv.t, 4, 2));
  // The cache must hold the queries' own positions.
  EXPECT_THROW(attention_decode(out.t, q.t, kv.t.slice_rows(0, 2), 4, 2), Error);
  EXPECT_THROW(attention_decode(out.t, q.t, kv.t, 4, 3), Error);
  EXPECT_THROW(attention_decode(out.t, q.t, kv.t, 4, 1), Error);  // kv width is 2 * NKV * HS
  EXPECT_THROW(attention_decode(q.t, q.t, kv.t, 4, 2), Error);    // out aliases q
  const testing::OwnedTensor q16 = testing::zeros(DType::bf16, {3, 12});
  EXPECT_THROW(attention_decode(out.t, q16.t, kv.t, 4, 2), Error);
}

}  // namespace
}  // namespace dt::kernels
