// The experts' FP8 products (model/float8_grouped_linear.h) against the FP8 kernels called on
// what one rank would quantize: each segment of an expert's rows (the rows one rank sent it) a
// tensor of its own with its own scale, each expert's weight another; blockwise, every row in
// (1, B) tiles; delayed, the experts' scales read from the layer's state and their amaxes
// recorded there. A route of 2 ranks and 4 experts, one expert without rows and one segment
// empty, as expert parallelism delivers them.
#include "model/float8_grouped_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/float8_linear.h"
#include "model/transformer.h"
#include "tests/float8_testing.h"
#include "tests/gradcheck.h"

namespace dt {
namespace {

using testing::OwnedTensor;

constexpr int64_t E = 4, C = 48, OC = 64, B = 16;

// Expert x's rows from rank q: received[q · E + x]; expert 2 gets none, expert 1 none from rank 0.
ExpertRoute two_ranks() {
  ExpertRoute r{.sent = {6, 7}, .received = {3, 0, 0, 3, 2, 4, 0, 1}, .offsets = {0}};
  for (int64_t x = 0; x < E; ++x) r.offsets.push_back(r.offsets.back() + r.received[x] + r.received[E + x]);
  return r;
}

struct Segment {
  int64_t expert, first, rows;
};
// Blockwise reads each expert's rows whole (its tiles are rows'); the others segment by segment.
std::vector<Segment> segments(const ExpertRoute& r, bool by_rank) {
  std::vector<Segment> out;
  for (int64_t x = 0, first = 0; x < E; ++x)
    for (int64_t q = 0; q < 2; ++q) {
      const int64_t n = r.received[q * E + x];
      if (n > 0) out.push_back({x, first, n});
      first += n;
    }
  if (by_rank) return out;
  std::vector<Segment> whole;
  for (int64_t x = 0; x < E; ++x)
    if (r.offsets[x + 1] > r.offsets[x]) whole.push_back({x, r.offsets[x], r.offsets[x + 1] - r.offsets[x]});
  return whole;
}

Tensor expert(const Tensor& w, int64_t x) { return w.slice_rows(x, 1).reshape({w.dim(1), w.dim(2)}); }

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.data, b.data, a.bytes()) == 0; }

TEST(Float8GroupedLinear, EachSegmentIsQuantizedAsOneRanksTensor) {
  for (const Float8Scaling scaling : {Float8Scaling::tensorwise, Float8Scaling::blockwise}) {
    SCOPED_TRACE(float8_scaling_name(scaling));
    const bool blockwise = scaling == Float8Scaling::blockwise;
    const Float8Training fp8{.recipe = {.scaling = scaling, .block = B}};
    const ExpertRoute route = two_ranks();
    const int64_t R = route.rows();
    // Segments of very different sizes, so that a scale shared between them would show.
    OwnedTensor x = testing::random_normal(DType::f32, {R, C}, 1, 3.0);
    for (int64_t i = 0; i < 3 * C; ++i) x.ptr<float>()[i] *= 40;
    const OwnedTensor w = testing::random_normal(DType::f32, {E, OC, C}, 2, 0.05);
    const OwnedTensor dy = testing::random_normal(DType::f32, {R, OC}, 3, 1e-3);
    const Float8GroupedLinear layer(fp8, {}, E, {}, nullptr);
    const OwnedTensor out = testing::zeros(DType::f32, {R, OC}), dinp = testing::zeros(DType::f32, {R, C});
    const OwnedTensor dw = testing::zeros(DType::f32, {E, OC, C});
    layer.forward(out.t, x.t, w.t, route);
    layer.backward_input(dinp.t, dy.t, w.t, route);
    layer.backward_weight(dw.t, dy.t, x.t, route);

    const OwnedTensor want_out = testing::zeros(DType::f32, {R, OC}), want_dinp = testing::zeros(DType::f32, {R, C});
    const OwnedTensor want_dw = testing::zeros(DType::f32, {E, OC, C});
    const kernels::Float8Tiles rows = blockwise ? kernels::Float8Tiles{1, B} : kernels::Float8Tiles::whole();
    const kernels::Float8Tiles square = blockwise ? kernels::Float8Tiles{B, B} : kernels::Float8Tiles::whole();
    for (const Segment& s : segments(route, !blockwise)) {
      const testing::Quantized wq = testing::quantize(expert(w.t, s.expert), DType::f8e4m3, square);
      const testing::Quantized xq = testing::quantize(x.t.slice_rows(s.first, s.rows), DType::f8e4m3, rows);
      const testing::Quantized dyq = testing::quantize(dy.t.slice_rows(s.first, s.rows), DType::f8e5m2, rows);
      kernels::float8_linear_forward(want_out.t.slice_rows(s.first, s.rows), xq.q(), wq.q(), Tensor{});
      kernels::float8_linear_backward_input(want_dinp.t.slice_rows(s.first, s.rows), dyq.q(), wq.q());
      kernels::float8_linear_backward_weight(expert(want_dw.t, s.expert), dyq.q(), xq.q());
    }
    EXPECT_TRUE(same_bits(out.t, want_out.t));
    EXPECT_TRUE(same_bits(dinp.t, want_dinp.t));
    EXPECT_TRUE(same_bits(dw.t, want_dw.t));
  }
}

// Delayed: each expert's scales are its state's, and a product records each operand's amax into
// its expert's entry (the max over its segments); an expert without rows records only its weight's.
TEST(Float8GroupedLinear, DelayedScalingReadsAndRecordsEachExpertsState) {
  const Float8Training fp8{.recipe = {.scaling = Float8Scaling::delayed}};
  Transformer model(model_preset("moe-tiny"), 1, 8, Recompute::none, DType::bf16, Device::cpu, {}, nullptr, {},
                    nullptr, {}, nullptr, &fp8);
  const LinearStateView state = model.linear_states().of(0, "mlp.experts.fc");
  const Tensor amax = state.get("fp8_amax"), scale = state.get("fp8_scale");
  ASSERT_EQ(amax.numel(), 3 * E);  // input, weight, gradient of each expert
  ASSERT_EQ(state.get("fp8_amax_history").numel(), 3 * E * 16);
  for (int64_t i = 0; i < 3 * E; ++i) scale.ptr<float>()[i] = static_cast<float>(i + 1);

  const ExpertRoute route = two_ranks();
  const int64_t R = route.rows();
  const OwnedTensor x = testing::random_normal(DType::f32, {R, C}, 1, 3.0);
  const OwnedTensor w = testing::random_normal(DType::f32, {E, OC, C}, 2, 0.05);
  const Float8GroupedLinear layer(fp8, state, E, {}, nullptr);
  const OwnedTensor out = testing::zeros(DType::f32, {R, OC});
  layer.forward(out.t, x.t, w.t, route);

  const OwnedTensor want = testing::zeros(DType::f32, {R, OC});
  for (int64_t e = 0; e < E; ++e) {
    float x_amax = 0, w_amax = 0;
    for (int64_t i = route.offsets[e] * C; i < route.offsets[e + 1] * C; ++i)
      x_amax = std::max(x_amax, std::fabs(x.ptr<float>()[i]));
    for (int64_t i = e * OC * C; i < (e + 1) * OC * C; ++i) w_amax = std::max(w_amax, std::fabs(w.ptr<float>()[i]));
    EXPECT_EQ(amax.ptr<float>()[3 * e], x_amax) << "expert " << e;
    EXPECT_EQ(amax.ptr<float>()[3 * e + 1], w_amax) << "expert " << e;
    EXPECT_EQ(amax.ptr<float>()[3 * e + 2], 0) << "expert " << e;  // no gradient yet
  }
  // Each segment with its expert's input scale (3e + 1), its weight with its weight scale (3e + 2).
  const auto with_scale = [](Tensor t, float s) {
    testing::Quantized q{testing::zeros(DType::f8e4m3, t.shape), testing::zeros(DType::f32, {1}), {}};
    OwnedTensor scale_t = testing::zeros(DType::f32, {1});
    *scale_t.ptr<float>() = s;
    kernels::float8_quantize(q.q(), t, scale_t.t);
    return q;
  };
  for (const Segment& s : segments(route, true)) {
    const testing::Quantized xq = with_scale(x.t.slice_rows(s.first, s.rows), static_cast<float>(3 * s.expert + 1));
    const testing::Quantized wq = with_scale(expert(w.t, s.expert), static_cast<float>(3 * s.expert + 2));
    kernels::float8_linear_forward(want.t.slice_rows(s.first, s.rows), xq.q(), wq.q(), Tensor{});
  }
  EXPECT_TRUE(same_bits(out.t, want.t));
}

}  // namespace
}  // namespace dt
