#include "kernels/grouped_linear.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

// Five groups, group 1 empty, the last holding one row; nothing a multiple of a vector width.
constexpr int64_t G = 5, C = 13, OC = 11;
const std::vector<int64_t> kOffsets = {0, 7, 7, 20, 21, 30};
constexpr int64_t R = 30;

OwnedTensor values(DType dtype, Shape shape, uint64_t seed, double std = 1.0) {
  if (dtype == DType::bf16 || dtype == DType::f16) return testing::random_storage(dtype, shape, seed, std);
  return random_normal(dtype, shape, seed, std);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

Tensor group(const Tensor& w, int64_t g) { return w.slice_rows(g, 1).reshape({w.dim(1), w.dim(2)}); }

// Each group against the dense linear op on copies of its rows: the same calls, so the same
// bits, whatever the storage type; the empty group's dweight keeps its bits.
TEST(GroupedLinear, EachGroupIsTheLinearOpOnItsRows) {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType grad = dtype == DType::f64 ? DType::f64 : DType::f32;
    const OwnedTensor inp = values(dtype, {R, C}, 1), weight = values(dtype, {G, OC, C}, 2, 0.3);
    const OwnedTensor dout = values(dtype, {R, OC}, 3);
    const OwnedTensor out = zeros(dtype, {R, OC}), dinp = zeros(dtype, {R, C});
    const OwnedTensor dweight = random_normal(grad, {G, OC, C}, 4), dweight0 = testing::converted(dweight.t, grad);
    grouped_linear_forward(out.t, inp.t, weight.t, kOffsets);
    grouped_linear_backward_input(dinp.t, dout.t, weight.t, kOffsets);
    grouped_linear_backward_weight(dweight.t, dout.t, inp.t, kOffsets);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t first = kOffsets[g], rows = kOffsets[g + 1] - first;
      const OwnedTensor x = zeros(dtype, {rows, C}), dy = zeros(dtype, {rows, OC});
      std::memcpy(x.t.data, inp.t.slice_rows(first, rows).data, x.t.bytes());
      std::memcpy(dy.t.data, dout.t.slice_rows(first, rows).data, dy.t.bytes());
      const OwnedTensor y = zeros(dtype, {rows, OC}), dx = zeros(dtype, {rows, C});
      const OwnedTensor dw = testing::converted(group(dweight0.t, g), grad);
      if (rows > 0) {
        linear_forward(y.t, x.t, group(weight.t, g), Tensor{});
        linear_backward_input(dx.t, dy.t, group(weight.t, g));
        linear_backward_weight(dw.t, Tensor{}, dy.t, x.t);
      }
      EXPECT_TRUE(same_bytes(out.t.slice_rows(first, rows), y.t)) << "out, group " << g;
      EXPECT_TRUE(same_bytes(dinp.t.slice_rows(first, rows), dx.t)) << "dinp, group " << g;
      EXPECT_TRUE(same_bytes(group(dweight.t, g), dw.t)) << "dweight, group " << g;
    }
  }
}

// f32 against sums in f64, each row through its group's weight.
TEST(GroupedLinear, MatchesThePlainLoop) {
  const OwnedTensor inp = random_normal(DType::f32, {R, C}, 5), weight = random_normal(DType::f32, {G, OC, C}, 6);
  const OwnedTensor dout = random_normal(DType::f32, {R, OC}, 7);
  const OwnedTensor out = zeros(DType::f32, {R, OC}), dinp = zeros(DType::f32, {R, C});
  const OwnedTensor dweight = zeros(DType::f32, {G, OC, C});
  grouped_linear_forward(out.t, inp.t, weight.t, kOffsets);
  grouped_linear_backward_input(dinp.t, dout.t, weight.t, kOffsets);
  grouped_linear_backward_weight(dweight.t, dout.t, inp.t, kOffsets);
  const OwnedTensor out_ref = zeros(DType::f32, {R, OC}), dinp_ref = zeros(DType::f32, {R, C});
  const OwnedTensor dweight_ref = zeros(DType::f32, {G, OC, C});
  for (int64_t g = 0; g < G; ++g) {
    const auto w = [&](int64_t o, int64_t c) { return element(weight.t, (g * OC + o) * C + c); };
    for (int64_t r = kOffsets[g]; r < kOffsets[g + 1]; ++r) {
      for (int64_t o = 0; o < OC; ++o) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += element(inp.t, r * C + c) * w(o, c);
        out_ref.ptr<float>()[r * OC + o] = static_cast<float>(s);
      }
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t o = 0; o < OC; ++o) s += element(dout.t, r * OC + o) * w(o, c);
        dinp_ref.ptr<float>()[r * C + c] = static_cast<float>(s);
      }
    }
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t r = kOffsets[g]; r < kOffsets[g + 1]; ++r)
          s += element(dout.t, r * OC + o) * element(inp.t, r * C + c);
        dweight_ref.ptr<float>()[(g * OC + o) * C + c] = static_cast<float>(s);
      }
  }
  // sgemm's blocked sums of 13 (11, 13) terms against f64: ~1e-6 of the scale (linear_test).
  EXPECT_LE(testing::normalized_max_error(out.t, out_ref.t), 1e-5);
  EXPECT_LE(testing::normalized_max_error(dinp.t, dinp_ref.t), 1e-5);
  EXPECT_LE(testing::normalized_max_error(dweight.t, dweight_ref.t), 1e-5);
}

TEST(GroupedLinear, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const OwnedTensor inp = random_normal(DType::f64, {R, C}, 8), weight = random_normal(DType::f64, {G, OC, C}, 9);
  const OwnedTensor dout = random_normal(DType::f64, {R, OC}, 10), out = zeros(DType::f64, {R, OC});
  const OwnedTensor dinp = random_normal(DType::f64, {R, C}, 11);  // set, not added to
  const OwnedTensor dweight = zeros(DType::f64, {G, OC, C});
  grouped_linear_backward_input(dinp.t, dout.t, weight.t, kOffsets);
  grouped_linear_backward_weight(dweight.t, dout.t, inp.t, kOffsets);
  const auto loss = [&] {
    grouped_linear_forward(out.t, inp.t, weight.t, kOffsets);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto result = testing::check_gradients(loss, {{"inp", inp.t, dinp.t}, {"weight", weight.t, dweight.t}});
  EXPECT_LE(result.worst_error, 1e-7) << result.where;  // bilinear: exact up to rounding (linear_test)
  // The empty group's weight has no gradient; a second call doubles the others.
  const OwnedTensor twice = testing::converted(dweight.t, DType::f64);
  grouped_linear_backward_weight(twice.t, dout.t, inp.t, kOffsets);
  // The second sum is added inside the GEMM (beta = 1), not doubled: f64 roundings of values of a
  // few units, ~1e-15 each, far below 1e-12.
  for (int64_t i = 0; i < dweight.t.numel(); ++i) EXPECT_NEAR(element(twice.t, i), 2 * element(dweight.t, i), 1e-12);
  for (int64_t i = OC * C; i < 2 * OC * C; ++i) EXPECT_EQ(element(dweight.t, i), 0.0);
}

TEST(GroupedLinear, NoRowsAtAllChangesNothing) {
  const std::vector<int64_t> empty(G + 1, 0);
  const OwnedTensor inp = zeros(DType::bf16, {0, C}), dout = zeros(DType::bf16, {0, OC});
  const OwnedTensor out = zeros(DType::bf16, {0, OC}), dinp = zeros(DType::bf16, {0, C});
  const OwnedTensor weight = values(DType::bf16, {G, OC, C}, 12), dweight = random_normal(DType::f32, {G, OC, C}, 13);
  const OwnedTensor before = testing::converted(dweight.t, DType::f32);
  grouped_linear_forward(out.t, inp.t, weight.t, empty);
  grouped_linear_backward_input(dinp.t, dout.t, weight.t, empty);
  grouped_linear_backward_weight(dweight.t, dout.t, inp.t, empty);
  EXPECT_TRUE(same_bytes(dweight.t, before.t));
}

TEST(GroupedLinear, RejectsBadOffsetsAndTensorsByName) {
  const OwnedTensor inp = zeros(DType::f32, {R, C}), weight = zeros(DType::f32, {G, OC, C});
  const OwnedTensor out = zeros(DType::f32, {R, OC}), dweight = zeros(DType::f32, {G, OC, C});
  EXPECT_NO_THROW(grouped_linear_forward(out.t, inp.t, weight.t, kOffsets));
  const auto forward_error = [&](const std::vector<int64_t>& offsets) {
    return testing::error_message([&] { grouped_linear_forward(out.t, inp.t, weight.t, offsets); });
  };
  const struct {
    std::vector<int64_t> offsets;
    const char* message;
  } bad[] = {
      {{0, 7, 20, 21, 30}, "grouped_linear_forward: 5 offsets for 5 groups; expected G + 1 = 6"},
      {{1, 7, 7, 20, 21, 30}, "grouped_linear_forward: offsets start at 1, not 0"},
      {{0, 7, 6, 20, 21, 30}, "offsets[2] = 6 < offsets[1] = 7"},
      {{0, 7, 7, 20, 21, 29}, "offsets end at 29 but inp has 30 rows"},
  };
  for (const auto& b : bad) {
    const std::string m = forward_error(b.offsets);
    EXPECT_NE(m.find(b.message), std::string::npos) << m;
  }
  const OwnedTensor weight2d = zeros(DType::f32, {OC, C}), out_wide = zeros(DType::f32, {R, OC + 1});
  const OwnedTensor out_bf16 = zeros(DType::bf16, {R, OC}), dweight_bf16 = zeros(DType::bf16, {G, OC, C});
  testing::expect_error_naming([&] { grouped_linear_forward(out.t, inp.t, weight2d.t, kOffsets); },
                               "grouped_linear_forward", "weight");
  testing::expect_error_naming([&] { grouped_linear_forward(out_wide.t, inp.t, weight.t, kOffsets); },
                               "grouped_linear_forward", "out");
  testing::expect_error_naming([&] { grouped_linear_backward_input(inp.t, out_bf16.t, weight.t, kOffsets); },
                               "grouped_linear_backward_input", "dout");
  testing::expect_error_naming([&] { grouped_linear_backward_weight(dweight_bf16.t, out.t, inp.t, kOffsets); },
                               "grouped_linear_backward_weight", "dweight");
  // Checked even when every group is empty and no linear call would see them.
  const OwnedTensor none = zeros(DType::bf16, {0, C}), none_out = zeros(DType::f32, {0, OC});
  testing::expect_error_naming(
      [&] { grouped_linear_forward(none_out.t, none.t, weight.t, std::vector<int64_t>(G + 1, 0)); },
      "grouped_linear_forward", "inp");
}

}  // namespace
}  // namespace dt::kernels
