#include "kernels/moe_permute.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/grouped_linear.h"
#include "kernels/moe_route.h"
#include "kernels/swiglu.h"
#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

// 37 tokens, top 3 of 6 experts; C = 21: no multiple of any pack width. The finite differences
// take narrower rows (kGradC): two forwards per element.
constexpr int64_t N = 37, k = 3, E = 6, C = 21, kGradC = 4;

OwnedTensor ints(Shape shape, const std::vector<int32_t>& values) {
  OwnedTensor t = zeros(DType::i32, shape);
  std::copy(values.begin(), values.end(), t.ptr<int32_t>());
  return t;
}
OwnedTensor floats(Shape shape, const std::vector<float>& values) {
  OwnedTensor t = zeros(DType::f32, shape);
  std::copy(values.begin(), values.end(), t.ptr<float>());
  return t;
}
std::vector<int32_t> values_of(const Tensor& t) { return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()}; }

// Every element NaN (floats) or -7 (i32): outputs start as garbage, so the tests see what is set.
OwnedTensor garbage(DType dtype, Shape shape) {
  OwnedTensor t = zeros(dtype, shape);
  if (dtype == DType::i32)
    std::fill_n(t.ptr<int32_t>(), t.t.numel(), -7);
  else
    std::memset(t.t.data, 0xff, t.t.bytes());  // all-ones bits: a NaN in every float type
  return t;
}

// A router's experts and f32 weights, with the load skewed toward the low experts (logits
// lowered by 0.4 per expert index), so that a capacity drops from some experts and not others.
struct Routed {
  OwnedTensor experts, weights;
};
Routed skewed_routing(int64_t tokens, uint64_t seed) {
  OwnedTensor logits = random_normal(DType::f32, {tokens, E}, seed);
  for (int64_t i = 0; i < logits.t.numel(); ++i) logits.ptr<float>()[i] -= 0.4f * static_cast<float>(i % E);
  Routed r{zeros(DType::i32, {tokens, k}), zeros(DType::f32, {tokens, k})};
  const OwnedTensor scores = zeros(DType::f32, {tokens, E});
  moe_route_forward(scores.t, r.experts.t, r.weights.t, logits.t, Tensor{}, {.top_k = k});
  return r;
}

struct Dispatched {
  OwnedTensor row_of;
  MoeDispatch plan;
};
Dispatched dispatch(const Tensor& experts, const Tensor& weights, int64_t num_experts, int64_t capacity) {
  Dispatched d{garbage(DType::i32, experts.shape), {}};
  d.plan = moe_dispatch(d.row_of.t, experts, weights, num_experts, capacity);
  return d;
}

// The dispatch written plainly: each expert's assignments in order, over capacity a stable sort
// by weight (descending) keeping the first `capacity`, then rows numbered expert by expert.
struct PlainDispatch {
  std::vector<int32_t> row_of;
  std::vector<int64_t> offsets, dropped;
};
PlainDispatch plain_dispatch(const Tensor& experts, const Tensor& weights, int64_t num_experts, int64_t capacity) {
  const int64_t A = experts.numel();
  const int32_t* ex = experts.ptr<int32_t>();
  PlainDispatch p{std::vector<int32_t>(A, -1), {0}, {}};
  for (int64_t e = 0; e < num_experts; ++e) {
    std::vector<int32_t> mine;
    for (int32_t i = 0; i < A; ++i)
      if (ex[i] == e) mine.push_back(i);
    std::vector<int32_t> kept = mine;
    if (capacity > 0 && static_cast<int64_t>(kept.size()) > capacity) {
      const float* w = weights.ptr<float>();
      std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return w[a] > w[b]; });
      kept.resize(capacity);
    }
    int64_t row = p.offsets.back();
    for (const int32_t i : mine)
      if (std::find(kept.begin(), kept.end(), i) != kept.end()) p.row_of[i] = static_cast<int32_t>(row++);
    p.offsets.push_back(row);
    p.dropped.push_back(static_cast<int64_t>(mine.size() - kept.size()));
  }
  return p;
}

// ---- the dispatch ------------------------------------------------------------------------

TEST(MoeDispatch, RowsAreAStableSortByExpert) {
  // Expert 0: (token 0, slot 1), (1, 0); expert 1: (0, 0), (2, 0); expert 2: (1, 1), (2, 1); expert 3: none.
  const OwnedTensor experts = ints({3, 2}, {1, 0, 0, 2, 1, 2});
  const Dispatched d = dispatch(experts.t, Tensor{}, 4, 0);
  EXPECT_EQ(values_of(d.row_of.t), (std::vector<int32_t>{2, 0, 1, 4, 3, 5}));
  EXPECT_EQ(d.plan.offsets, (std::vector<int64_t>{0, 2, 4, 6, 6}));
  EXPECT_EQ(d.plan.dropped, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(d.plan.rows(), 6);
  EXPECT_EQ(d.plan.rows_of(3), 0);

  // A router's experts, and a token that names one expert twice (two rows, in slot order).
  const Routed r = skewed_routing(N, 1);
  const PlainDispatch expected = plain_dispatch(r.experts.t, r.weights.t, E, 0);
  const Dispatched routed = dispatch(r.experts.t, Tensor{}, E, 0);
  EXPECT_EQ(values_of(routed.row_of.t), expected.row_of);
  EXPECT_EQ(routed.plan.offsets, expected.offsets);
  EXPECT_EQ(routed.plan.rows(), N * k);
  const OwnedTensor twice = ints({2, 2}, {1, 1, 0, 1});
  EXPECT_EQ(values_of(dispatch(twice.t, Tensor{}, 2, 0).row_of.t), (std::vector<int32_t>{1, 2, 0, 3}));
}

TEST(MoeDispatch, CapacityKeepsTheLargestWeightsAndTheEarlierOfEqualOnes) {
  // Expert 0 holds 5 assignments, capacity 3: 0.9 (token 1) and 0.7 (token 3) stay, then of the
  // three 0.5s the earliest (token 0); the kept rows follow token order. Expert 1: -0 and +0
  // weigh the same, so the earlier stays; expert 2: a NaN ranks below every number, -inf too.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const OwnedTensor experts = ints({9, 1}, {0, 0, 0, 0, 0, 1, 1, 2, 2});
  const OwnedTensor weights = floats({9, 1}, {0.5f, 0.9f, 0.5f, 0.7f, 0.5f, -0.0f, 0.0f, nan, -inf});
  const Dispatched three = dispatch(experts.t, weights.t, 3, 3);
  EXPECT_EQ(values_of(three.row_of.t), (std::vector<int32_t>{0, 1, -1, 2, -1, 3, 4, 5, 6}));
  EXPECT_EQ(three.plan.offsets, (std::vector<int64_t>{0, 3, 5, 7}));
  EXPECT_EQ(three.plan.dropped, (std::vector<int64_t>{2, 0, 0}));
  const Dispatched one = dispatch(experts.t, weights.t, 3, 1);
  EXPECT_EQ(values_of(one.row_of.t), (std::vector<int32_t>{-1, 0, -1, -1, -1, 1, -1, -1, 2}));
  EXPECT_EQ(one.plan.dropped, (std::vector<int64_t>{4, 1, 1}));

  // A router's skewed load at capacities from tight to loose.
  const Routed r = skewed_routing(N, 2);
  for (const int64_t capacity : {int64_t{1}, int64_t{7}, N * k / E, N}) {
    SCOPED_TRACE(capacity);
    const PlainDispatch expected = plain_dispatch(r.experts.t, r.weights.t, E, capacity);
    const Dispatched d = dispatch(r.experts.t, r.weights.t, E, capacity);
    EXPECT_EQ(values_of(d.row_of.t), expected.row_of);
    EXPECT_EQ(d.plan.offsets, expected.offsets);
    EXPECT_EQ(d.plan.dropped, expected.dropped);
  }
  // The skew drops at N k / E and keeps everything at N.
  const auto dropped = [&](int64_t capacity) {
    const MoeDispatch plan = dispatch(r.experts.t, r.weights.t, E, capacity).plan;
    int64_t total = 0;
    for (const int64_t d : plan.dropped) total += d;
    return total;
  };
  EXPECT_GT(dropped(N * k / E), 0);
  EXPECT_EQ(dropped(N), 0);
}

TEST(MoeDispatch, RejectsBadArgumentsSayingWhat) {
  const OwnedTensor experts = ints({3, 2}, {1, 0, 0, 2, 3, -1}), weights = zeros(DType::f32, {3, 2});
  const OwnedTensor row_of = zeros(DType::i32, {3, 2});
  std::string m = testing::error_message([&] { moe_dispatch(row_of.t, experts.t, Tensor{}, 3, 0); });
  EXPECT_NE(
      m.find("moe_dispatch: assignment (token 2, slot 0) names expert 3, outside [0, 3); 2 of the 6 assignments do"),
      std::string::npos)
      << m;
  const OwnedTensor good = ints({3, 2}, {1, 0, 0, 2, 1, 2});
  EXPECT_NO_THROW(moe_dispatch(row_of.t, good.t, weights.t, 3, 2));
  m = testing::error_message([&] { moe_dispatch(row_of.t, good.t, Tensor{}, 3, 2); });
  EXPECT_NE(m.find("capacity 2 needs the routing weights"), std::string::npos) << m;
  m = testing::error_message([&] { moe_dispatch(row_of.t, good.t, weights.t, 3, -1); });
  EXPECT_NE(m.find("capacity -1 is negative"), std::string::npos) << m;
  const OwnedTensor row_of_long = zeros(DType::i32, {3, 3}), weights_f64 = zeros(DType::f64, {3, 2});
  testing::expect_error_naming([&] { moe_dispatch(row_of_long.t, good.t, Tensor{}, 3, 0); }, "moe_dispatch", "row_of");
  testing::expect_error_naming([&] { moe_dispatch(row_of.t, good.t, weights_f64.t, 3, 1); }, "moe_dispatch", "weights");
  testing::expect_error_naming([&] { moe_dispatch(row_of.t, weights.t, Tensor{}, 3, 0); }, "moe_dispatch", "experts");
  EXPECT_THROW(moe_dispatch(row_of.t, row_of.t, Tensor{}, 3, 0), Error);  // row_of over experts
  EXPECT_THROW(moe_dispatch(row_of.t, good.t, Tensor{}, 0, 0), Error);
}

// ---- permute -----------------------------------------------------------------------------

// Whether every slot of token n was dropped.
bool all_dropped(const Tensor& row_of, int64_t n) {
  const int32_t* rows = row_of.ptr<int32_t>() + n * k;
  return std::all_of(rows, rows + k, [](int32_t r) { return r < 0; });
}

// Dropless and at a capacity that drops: the routed tokens and their dispatch.
struct DispatchCase {
  Routed routed;
  Dispatched dispatched;
};
std::vector<DispatchCase> dispatch_cases() {
  std::vector<DispatchCase> s;
  for (const int64_t capacity : {int64_t{0}, int64_t{5}}) {
    Routed r = skewed_routing(N, 3);
    Dispatched d = dispatch(r.experts.t, r.weights.t, E, capacity);
    s.push_back({std::move(r), std::move(d)});
  }
  // Capacity 5 drops every slot of some token: the cases below need one.
  bool some_token_dropped = false;
  for (int64_t n = 0; n < N; ++n) some_token_dropped |= all_dropped(s[1].dispatched.row_of.t, n);
  EXPECT_TRUE(some_token_dropped);
  return s;
}

TEST(MoePermute, CopiesEachKeptAssignmentsRowExactly) {
  for (const DispatchCase& s : dispatch_cases())
    for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(s.dispatched.plan.rows()) + " rows");
      const bool is_16bit = dtype == DType::bf16 || dtype == DType::f16;
      const OwnedTensor x = is_16bit ? testing::random_storage(dtype, {N, C}, 4) : random_normal(dtype, {N, C}, 4);
      const int64_t R = s.dispatched.plan.rows();
      const OwnedTensor permuted = garbage(dtype, {R, C});
      moe_permute_forward(permuted.t, x.t, s.dispatched.row_of.t);
      const size_t row_bytes = static_cast<size_t>(C) * dtype_size(dtype);
      int64_t copied = 0;
      for (int64_t i = 0; i < N * k; ++i) {
        const int32_t r = s.dispatched.row_of.ptr<int32_t>()[i];
        if (r < 0) continue;
        ++copied;
        EXPECT_EQ(std::memcmp(static_cast<const char*>(permuted.t.data) + r * row_bytes,
                              static_cast<const char*>(x.t.data) + (i / k) * row_bytes, row_bytes),
                  0)
            << "assignment " << i;
      }
      EXPECT_EQ(copied, R);  // every row is some assignment's
    }
}

TEST(MoePermute, BackwardMatchesFiniteDifferencesAndSetsDx) {
  for (const DispatchCase& s : dispatch_cases()) {
    const int64_t R = s.dispatched.plan.rows();
    const OwnedTensor x = random_normal(DType::f64, {N, kGradC}, 5), dpermuted = random_normal(DType::f64, {R, kGradC}, 6);
    const OwnedTensor permuted = zeros(DType::f64, {R, kGradC}), dx = garbage(DType::f64, {N, kGradC});
    moe_permute_backward(dx.t, dpermuted.t, s.dispatched.row_of.t);
    const auto loss = [&] {
      moe_permute_forward(permuted.t, x.t, s.dispatched.row_of.t);
      return testing::weighted_sum(permuted.t, dpermuted.t);
    };
    const auto result = testing::check_gradients(loss, {{"x", x.t, dx.t}});
    // Linear in x: the quotient is exact but for the rounding of L (~1e-16 |L| / h).
    EXPECT_LE(result.worst_error, 1e-7) << result.where;
  }
}

// ---- unpermute ---------------------------------------------------------------------------

TEST(MoeUnpermute, ForwardIsTheWeightedSumOfTheKeptRows) {
  for (const DispatchCase& s : dispatch_cases()) {
    const int64_t R = s.dispatched.plan.rows();
    const int32_t* row_of = s.dispatched.row_of.ptr<int32_t>();
    const OwnedTensor y = random_normal(DType::f32, {R, C}, 7), out = garbage(DType::f32, {N, C});
    const OwnedTensor expected = zeros(DType::f32, {N, C});
    moe_unpermute_forward(out.t, y.t, s.routed.weights.t, s.dispatched.row_of.t);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < k; ++j)
          if (row_of[n * k + j] >= 0)
            sum += element(s.routed.weights.t, n * k + j) * element(y.t, row_of[n * k + j] * C + c);
        expected.ptr<float>()[n * C + c] = static_cast<float>(sum);
      }
    // k fused multiply-adds in f32: an ulp or two of the terms.
    EXPECT_LE(testing::normalized_max_error(out.t, expected.t), 1e-6);
    for (int64_t n = 0; n < N; ++n) {
      if (!all_dropped(s.dispatched.row_of.t, n)) continue;
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out.ptr<float>()[n * C + c], 0.0f) << "token " << n;
    }
  }
}

TEST(MoeUnpermute, BackwardMatchesFiniteDifferencesAndSetsEveryOutput) {
  for (const DispatchCase& s : dispatch_cases()) {
    const int64_t R = s.dispatched.plan.rows();
    const OwnedTensor y = random_normal(DType::f64, {R, kGradC}, 8), dout = random_normal(DType::f64, {N, kGradC}, 9);
    const OwnedTensor weights = testing::converted(s.routed.weights.t, DType::f64);
    const OwnedTensor out = zeros(DType::f64, {N, kGradC});
    const OwnedTensor dy = garbage(DType::f64, {R, kGradC}), dweights = garbage(DType::f64, {N, k});
    moe_unpermute_backward(dy.t, dweights.t, dout.t, y.t, weights.t, s.dispatched.row_of.t);
    const auto loss = [&] {
      moe_unpermute_forward(out.t, y.t, weights.t, s.dispatched.row_of.t);
      return testing::weighted_sum(out.t, dout.t);
    };
    // Dropped slots get dweights 0 (their weight reaches nothing): the finite difference agrees.
    const auto result = testing::check_gradients(loss, {{"y", y.t, dy.t}, {"weights", weights.t, dweights.t}});
    EXPECT_LE(result.worst_error, 1e-7) << result.where;  // bilinear: exact but for L's rounding
  }
}

// 16-bit storage: each result is the f32 kernel's on the exactly widened inputs, rounded once
// (the same sums in the same order); dweights, f32 either way, within f32 summation order.
TEST(MoePermute, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  const DispatchCase s = std::move(dispatch_cases()[1]);
  const Tensor row_of = s.dispatched.row_of.t, weights = s.routed.weights.t;
  const int64_t R = s.dispatched.plan.rows();
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const OwnedTensor dpermuted = testing::random_storage(S, {R, C}, 10), y = testing::random_storage(S, {R, C}, 11);
    const OwnedTensor dout = testing::random_storage(S, {N, C}, 12);
    const OwnedTensor dpermuted32 = testing::widened(dpermuted.t), y32 = testing::widened(y.t);
    const OwnedTensor dout32 = testing::widened(dout.t);

    const OwnedTensor dx = garbage(S, {N, C}), dx32 = zeros(DType::f32, {N, C});
    moe_permute_backward(dx.t, dpermuted.t, row_of);
    moe_permute_backward(dx32.t, dpermuted32.t, row_of);
    EXPECT_EQ(testing::max_ulp_distance(dx.t, testing::rounded(dx32.t, S).t), 0);

    const OwnedTensor out = garbage(S, {N, C}), out32 = zeros(DType::f32, {N, C});
    moe_unpermute_forward(out.t, y.t, weights, row_of);
    moe_unpermute_forward(out32.t, y32.t, weights, row_of);
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(out32.t, S).t), 0);

    const OwnedTensor dy = garbage(S, {R, C}), dy32 = zeros(DType::f32, {R, C});
    const OwnedTensor dweights = garbage(DType::f32, {N, k}), dweights32 = zeros(DType::f32, {N, k});
    moe_unpermute_backward(dy.t, dweights.t, dout.t, y.t, weights, row_of);
    moe_unpermute_backward(dy32.t, dweights32.t, dout32.t, y32.t, weights, row_of);
    EXPECT_EQ(testing::max_ulp_distance(dy.t, testing::rounded(dy32.t, S).t), 0);
    // The same products of the same (exactly widened) values, but the simd reduction over C may
    // group them differently by storage type: a few f32 ulps of the largest, below 1e-6.
    EXPECT_LE(testing::normalized_max_error(dweights.t, dweights32.t), 1e-6);
  }
}

TEST(MoePermute, RejectsMismatchedTensorsByName) {
  const DispatchCase s = std::move(dispatch_cases()[0]);
  const Tensor row_of = s.dispatched.row_of.t, weights = s.routed.weights.t;
  const int64_t R = s.dispatched.plan.rows();
  const OwnedTensor x = zeros(DType::bf16, {N, C}), permuted = zeros(DType::bf16, {R, C});
  const OwnedTensor permuted_f32 = zeros(DType::f32, {R, C}), permuted_wide = zeros(DType::bf16, {R, C + 1});
  const OwnedTensor x_short = zeros(DType::bf16, {N - 1, C}), weights_f64 = zeros(DType::f64, {N, k});
  const OwnedTensor row_of_f32 = zeros(DType::f32, {N, k}), dweights = zeros(DType::f32, {N, k});
  const OwnedTensor y = zeros(DType::bf16, {R, C});
  EXPECT_NO_THROW(moe_permute_forward(permuted.t, x.t, row_of));
  EXPECT_NO_THROW(moe_unpermute_backward(permuted.t, dweights.t, x.t, y.t, weights, row_of));
  testing::expect_error_naming([&] { moe_permute_forward(permuted_f32.t, x.t, row_of); }, "moe_permute_forward",
                               "permuted");
  testing::expect_error_naming([&] { moe_permute_forward(permuted_wide.t, x.t, row_of); }, "moe_permute_forward",
                               "permuted");
  testing::expect_error_naming([&] { moe_permute_forward(permuted.t, x.t, row_of_f32.t); }, "moe_permute_forward",
                               "row_of");
  const std::string m = testing::error_message([&] { moe_permute_backward(x_short.t, permuted.t, row_of); });
  EXPECT_NE(m.find("do not have one row of slots per token"), std::string::npos) << m;
  testing::expect_error_naming([&] { moe_unpermute_forward(x.t, permuted.t, weights_f64.t, row_of); },
                               "moe_unpermute_forward", "weights");
  testing::expect_error_naming([&] { moe_unpermute_backward(permuted.t, weights_f64.t, x.t, y.t, weights, row_of); },
                               "moe_unpermute_backward", "dweights");
  EXPECT_THROW(moe_unpermute_backward(y.t, dweights.t, x.t, y.t, weights, row_of), Error);  // dy over y
  // dx (N, C) inside dpermuted (R, C), R > N.
  EXPECT_THROW(moe_permute_backward(permuted.t.slice_rows(0, N), permuted.t, row_of), Error);
}

// ---- composed ----------------------------------------------------------------------------

// A SwiGLU mixture-of-experts MLP through route, dispatch, permute, the grouped projections and
// the combine, against the same MLP as a plain loop over each token's experts in f64.
TEST(MoeMlp, ComposedKernelsAreThePlainPerTokenLoop) {
  constexpr int64_t F = 10;  // each expert's hidden width
  const OwnedTensor x = random_normal(DType::f32, {N, C}, 13), logits = random_normal(DType::f32, {N, E}, 14);
  const OwnedTensor w_up = random_normal(DType::f32, {E, 2 * F, C}, 15, 0.3);  // gate rows, then up rows
  const OwnedTensor w_down = random_normal(DType::f32, {E, C, F}, 16, 0.3);
  for (const int64_t capacity : {int64_t{0}, int64_t{5}}) {
    SCOPED_TRACE(capacity);
    const MoeRouting routing{.score = MoeScore::softmax, .top_k = k, .renormalize = true};
    const OwnedTensor scores = zeros(DType::f32, {N, E}), experts = zeros(DType::i32, {N, k});
    const OwnedTensor weights = zeros(DType::f32, {N, k});
    moe_route_forward(scores.t, experts.t, weights.t, logits.t, Tensor{}, routing);
    const Dispatched d = dispatch(experts.t, weights.t, E, capacity);
    const int64_t R = d.plan.rows();
    const OwnedTensor xp = zeros(DType::f32, {R, C}), h = zeros(DType::f32, {R, 2 * F});
    const OwnedTensor a = zeros(DType::f32, {R, F}), y = zeros(DType::f32, {R, C}), out = zeros(DType::f32, {N, C});
    moe_permute_forward(xp.t, x.t, d.row_of.t);
    grouped_linear_forward(h.t, xp.t, w_up.t, d.plan.offsets);
    swiglu_forward(a.t, h.t);
    grouped_linear_forward(y.t, a.t, w_down.t, d.plan.offsets);
    moe_unpermute_forward(out.t, y.t, weights.t, d.row_of.t);

    const OwnedTensor expected = zeros(DType::f32, {N, C});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < k; ++j) {
        if (d.row_of.ptr<int32_t>()[n * k + j] < 0) continue;  // dropped over capacity
        const int64_t e = experts.ptr<int32_t>()[n * k + j];
        std::vector<double> act(F);
        for (int64_t f = 0; f < F; ++f) {
          double gate = 0, up = 0;
          for (int64_t c = 0; c < C; ++c) {
            gate += element(w_up.t, (e * 2 * F + f) * C + c) * element(x.t, n * C + c);
            up += element(w_up.t, (e * 2 * F + F + f) * C + c) * element(x.t, n * C + c);
          }
          act[f] = gate / (1 + std::exp(-gate)) * up;
        }
        for (int64_t c = 0; c < C; ++c) {
          double v = 0;
          for (int64_t f = 0; f < F; ++f) v += element(w_down.t, (e * C + c) * F + f) * act[f];
          expected.ptr<float>()[n * C + c] += static_cast<float>(element(weights.t, n * k + j) * v);
        }
      }
    const double error = testing::normalized_max_error(out.t, expected.t);
    EXPECT_LE(error, 1e-5);  // f32 products of 21 and 10 terms and the SwiGLU between
    std::printf("MoE MLP (capacity %lld) vs the plain loop, normalized max error %.3g\n",
                static_cast<long long>(capacity), error);
  }
}

}  // namespace
}  // namespace dt::kernels
