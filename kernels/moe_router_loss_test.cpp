#include "kernels/moe_router_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::normalized_error;
using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 3 sequences of 13 rows: not a multiple of the GPU's 4 warps per sequence.
constexpr int64_t S = 3, L = 13, N = S * L;

struct ScoreCase {
  const char* name;
  int64_t E, k;
  MoeScore score;
};
const ScoreCase kCases[] = {{"softmax, Mixtral's 8 experts", 8, 2, MoeScore::softmax},
                            {"sigmoid, 64 experts", 64, 8, MoeScore::sigmoid},
                            {"softmax, 40 experts (lanes with two)", 40, 4, MoeScore::softmax}};

OwnedTensor filled(DType dtype, Shape shape, double value) {
  OwnedTensor t = zeros(dtype, shape);
  for (int64_t i = 0; i < t.t.numel(); ++i)
    if (dtype == DType::f64)
      t.ptr<double>()[i] = value;
    else
      t.ptr<float>()[i] = static_cast<float>(value);
  return t;
}

// The router's view of N rows: logits, their scores and k experts a row (the k of largest score).
struct Routed {
  OwnedTensor logits, scores, experts;
};

Routed routed(const ScoreCase& c, DType dtype, uint64_t seed) {
  Routed r{random_normal(dtype, {N, c.E}, seed, 2.0), zeros(dtype, {N, c.E}), zeros(DType::i32, {N, c.k})};
  OwnedTensor weights = zeros(dtype, {N, c.k});
  moe_route_forward(r.scores.t, r.experts.t, weights.t, r.logits.t, Tensor{},
                    {.score = c.score, .top_k = c.k, .renormalize = true});
  return r;
}

// The statistics into outputs that start as NaN: every element must be set.
struct Stats {
  OwnedTensor counts, probs, z;
};

Stats stats(const Routed& r, MoeScore score) {
  const DType dtype = r.scores.t.dtype;
  const int64_t E = r.scores.t.dim(1);
  Stats s{filled(dtype, {S, E}, kNaN), filled(dtype, {S, E}, kNaN), filled(dtype, {S}, kNaN)};
  moe_router_stats(s.counts.t, s.probs.t, s.z.t, r.scores.t, r.experts.t, r.logits.t, score);
  return s;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = element(t, i);
  return v;
}

// ---- the reference, written plainly in f64 ----------------------------------------------

struct Reference {
  std::vector<double> counts, probs, z;
};

Reference reference_stats(const Routed& r, MoeScore score) {
  const int64_t E = r.scores.t.dim(1), k = r.experts.t.dim(1);
  Reference ref{std::vector<double>(S * E, 0.0), std::vector<double>(S * E, 0.0), std::vector<double>(S, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / L;
    for (int64_t j = 0; j < k; ++j) ref.counts[q * E + r.experts.ptr<int32_t>()[n * k + j]] += 1;
    double Z = 1e-20, m = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e) Z += element(r.scores.t, n * E + e);
    for (int64_t e = 0; e < E; ++e) {
      const double s = element(r.scores.t, n * E + e);
      ref.probs[q * E + e] += score == MoeScore::sigmoid ? s / Z : s;
      m = std::max(m, element(r.logits.t, n * E + e));
    }
    for (int64_t e = 0; e < E; ++e) sum += std::exp(element(r.logits.t, n * E + e) - m);
    ref.z[q] += std::pow(m + std::log(sum), 2);
  }
  return ref;
}

// ---- tests -------------------------------------------------------------------------------

TEST(MoeRouterLoss, StatisticsMatchThePlainReference) {
  for (const ScoreCase& c : kCases)
    for (const DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      const Routed r = routed(c, dtype, 1);
      const Stats s = stats(r, c.score);
      const Reference ref = reference_stats(r, c.score);
      EXPECT_EQ(normalized_error(s.counts.t, ref.counts), 0);  // whole numbers
      // f32: 13 rows' sums of scores that carry a few ulps each.
      const double bound = dtype == DType::f32 ? 1e-6 : 1e-14;
      EXPECT_LE(normalized_error(s.probs.t, ref.probs), bound);
      EXPECT_LE(normalized_error(s.z.t, ref.z), bound);
    }
}

TEST(MoeRouterLoss, EachStatisticIsOptionalAndAnExpertNamedTwiceCountsTwice) {
  // One sequence of two rows over 3 experts: row 0 chooses 2 and 0, row 1 names expert 1 twice.
  OwnedTensor scores = filled(DType::f64, {2, 3}, 0.25), experts = zeros(DType::i32, {2, 2});
  const int32_t chosen[] = {2, 0, 1, 1};
  std::copy(std::begin(chosen), std::end(chosen), experts.ptr<int32_t>());
  const OwnedTensor counts = filled(DType::f64, {1, 3}, kNaN);
  moe_router_stats(counts.t, Tensor{}, Tensor{}, scores.t, experts.t, Tensor{}, MoeScore::softmax);
  EXPECT_EQ(values_of(counts.t), (std::vector<double>{1, 2, 1}));
  // Sigmoid scores are normalized per row: 0.25 / 0.75 each, twice.
  const OwnedTensor probs = filled(DType::f64, {1, 3}, kNaN);
  moe_router_stats(Tensor{}, probs.t, Tensor{}, scores.t, Tensor{}, Tensor{}, MoeScore::sigmoid);
  for (const double p : values_of(probs.t)) EXPECT_DOUBLE_EQ(p, 2.0 / 3.0);
  // Equal logits x: logsumexp x + log 3, squared, twice.
  const OwnedTensor z = filled(DType::f64, {1}, kNaN);
  moe_router_stats(Tensor{}, Tensor{}, z.t, Tensor{}, Tensor{}, scores.t, MoeScore::softmax);
  EXPECT_DOUBLE_EQ(z.ptr<double>()[0], 2 * std::pow(0.25 + std::log(3.0), 2));
}

// The balance loss a.sum_{s,e} counts[s, e] probs[s, e] with the counts held fixed, against
// central differences of the probabilities moe_router_stats gives.
TEST(MoeRouterLoss, BalanceBackwardMatchesFiniteDifferences) {
  for (const ScoreCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Routed r = routed(c, DType::f64, 2);
    const OwnedTensor counts = stats(r, c.score).counts;
    const float scale = 0.37f;
    const OwnedTensor dscores = filled(DType::f64, {N, c.E}, kNaN);  // set, not added to
    moe_balance_backward(dscores.t, counts.t, r.scores.t, scale, c.score);
    const auto loss = [&] {
      const OwnedTensor probs = zeros(DType::f64, {S, c.E});
      moe_router_stats(Tensor{}, probs.t, Tensor{}, r.scores.t, Tensor{}, Tensor{}, c.score);
      return static_cast<double>(scale) * testing::weighted_sum(probs.t, counts.t);
    };
    // The loss sums E * S terms to some tens while a score's gradient is about 1/E of one: a
    // step of 1e-4 keeps the quotient's rounding (1e-16 of the loss over 2h) far below 1e-7 of it,
    // and the loss is a ratio of sums, whose third derivative keeps the h^2 term as small.
    const auto result = testing::check_gradients(loss, {{"scores", r.scores.t, dscores.t}}, 1e-4);
    EXPECT_LE(result.worst_error, 1e-7) << result.where;
  }
}

// The z-loss a.sum_s z[s], against central differences; the gradient adds to what dlogits holds.
TEST(MoeRouterLoss, ZLossBackwardAddsTheFiniteDifferences) {
  for (const ScoreCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Routed r = routed(c, DType::f64, 3);
    const float scale = 0.011f;
    const OwnedTensor before = random_normal(DType::f64, {N, c.E}, 4);
    const OwnedTensor dlogits = testing::converted(before.t, DType::f64);
    moe_z_loss_backward(dlogits.t, r.logits.t, scale);
    for (int64_t i = 0; i < dlogits.t.numel(); ++i) dlogits.ptr<double>()[i] -= before.ptr<double>()[i];
    const auto loss = [&] {
      const OwnedTensor z = zeros(DType::f64, {S});
      moe_router_stats(Tensor{}, Tensor{}, z.t, Tensor{}, Tensor{}, r.logits.t, c.score);
      double sum = 0;
      for (const double v : values_of(z.t)) sum += v;
      return static_cast<double>(scale) * sum;
    };
    const auto result = testing::check_gradients(loss, {{"logits", r.logits.t, dlogits.t}});
    EXPECT_LE(result.worst_error, 1e-7) << result.where;
  }
}

TEST(MoeRouterLoss, ShapesThatDoNotMatchAreRefusedByName) {
  const Routed r = routed(kCases[0], DType::f32, 5);
  const auto refuses = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const OwnedTensor four = zeros(DType::f32, {4, 8});  // 4 sequences do not divide 39 rows
  refuses([&] { moe_router_stats(four.t, Tensor{}, Tensor{}, r.scores.t, r.experts.t, Tensor{}, MoeScore::softmax); },
          "sequences must divide the N = 39 rows");
  refuses([&] { moe_router_stats(Tensor{}, Tensor{}, Tensor{}, r.scores.t, r.experts.t, Tensor{}, MoeScore::softmax); },
          "no output asked for");
  const OwnedTensor z = zeros(DType::f32, {S});
  refuses([&] { moe_router_stats(Tensor{}, Tensor{}, z.t, r.scores.t, Tensor{}, Tensor{}, MoeScore::softmax); },
          "z reads the logits, which are undefined");
  const OwnedTensor wide = zeros(DType::f32, {N, 9});
  refuses([&] { moe_balance_backward(wide.t, zeros(DType::f32, {S, 8}).t, r.scores.t, 1, MoeScore::softmax); },
          "dscores");
}

}  // namespace
}  // namespace dt::kernels
