#include "kernels/moe_route.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "tests/gradcheck.h"
#include "tests/reference_io.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::normalized_error;
using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The routings of the models the op serves, at their expert counts (DeepSeek-V3's 256 cut to 64).
struct RoutingCase {
  const char* name;
  int64_t E;
  MoeRouting routing;
  bool bias;
};
const RoutingCase kCases[] = {
    {"mixtral", 8, {.score = MoeScore::softmax, .top_k = 2, .renormalize = true}, false},
    {"qwen1.5-moe", 60, {.score = MoeScore::softmax, .top_k = 4, .renormalize = false}, false},
    {"olmoe", 64, {.score = MoeScore::softmax, .top_k = 8, .renormalize = false}, false},
    {"deepseek-v3", 64, {.score = MoeScore::sigmoid, .top_k = 8, .renormalize = true, .route_scale = 2.5f}, true},
    {"sigmoid, every expert",
     5,
     {.score = MoeScore::sigmoid, .top_k = 5, .renormalize = false, .route_scale = 0.5f},
     false},
};

// 37 tokens: not a multiple of the GPU's rows per block. The finite differences take fewer: two
// forwards per logit.
constexpr int64_t N = 37, kGradRows = 3;

OwnedTensor filled(DType dtype, Shape shape, double value) {
  OwnedTensor t = zeros(dtype, shape);
  for (int64_t i = 0; i < t.t.numel(); ++i) {
    if (dtype == DType::f64)
      t.ptr<double>()[i] = value;
    else if (dtype == DType::f32)
      t.ptr<float>()[i] = static_cast<float>(value);
    else
      t.ptr<int32_t>()[i] = static_cast<int32_t>(value);
  }
  return t;
}

struct Routed {
  OwnedTensor scores, experts, weights;
};

// The forward into outputs that start as garbage (NaN, expert -7): every element must be set.
Routed route(const Tensor& logits, const Tensor& bias, const MoeRouting& routing) {
  const int64_t rows = logits.dim(0), E = logits.dim(1), k = routing.top_k;
  Routed r{filled(logits.dtype, {rows, E}, kNaN), filled(DType::i32, {rows, k}, -7),
           filled(logits.dtype, {rows, k}, kNaN)};
  moe_route_forward(r.scores.t, r.experts.t, r.weights.t, logits, bias, routing);
  return r;
}

OwnedTensor inputs_bias(const RoutingCase& c, DType dtype) {
  return c.bias ? random_normal(dtype, {c.E}, 11, 0.05) : OwnedTensor{};
}

// ---- the reference, written plainly in f64 ----------------------------------------------

struct Reference {
  std::vector<double> scores;    // (N, E)
  std::vector<int32_t> experts;  // (N, k)
  std::vector<double> weights;   // (N, k)
  double min_gap = INFINITY;     // the smallest gap between unequal consecutive choice values ranked 0..k
};

Reference reference_route(const Tensor& logits, const Tensor& bias, const MoeRouting& routing) {
  const int64_t rows = logits.dim(0), E = logits.dim(1), k = routing.top_k;
  Reference ref;
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<double> p(E), choice(E);
    for (int64_t e = 0; e < E; ++e) p[e] = element(logits, n * E + e);
    if (routing.score == MoeScore::softmax) {
      const double m = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (double& v : p) sum += (v = std::exp(v - m));
      for (double& v : p) v /= sum;
    } else {
      for (double& v : p) v = 1 / (1 + std::exp(-v));
    }
    for (int64_t e = 0; e < E; ++e) choice[e] = p[e] + (bias.defined() ? element(bias, e) : 0.0);
    // Descending choice; a stable sort keeps equal values in expert order.
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
    for (int64_t j = 0; j < std::min(k, E - 1); ++j)
      if (choice[order[j]] != choice[order[j + 1]])  // an exact tie is ordered by the rule, not rounding
        ref.min_gap = std::min(ref.min_gap, choice[order[j]] - choice[order[j + 1]]);
    double Z = 1e-20;
    for (int64_t j = 0; j < k; ++j) Z += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ref.experts.push_back(order[j]);
      const double g = p[order[j]];
      ref.weights.push_back((routing.renormalize ? g / Z : g) * routing.route_scale);
    }
    ref.scores.insert(ref.scores.end(), p.begin(), p.end());
  }
  return ref;
}

// dlogits from the explicit Jacobians: weights by scores, then scores by logits.
std::vector<double> reference_dlogits(const Reference& ref, const Tensor& dweights, const Tensor& dscores, int64_t E,
                                      const MoeRouting& routing) {
  const int64_t rows = static_cast<int64_t>(ref.scores.size()) / E, k = routing.top_k;
  const double scale = routing.route_scale;
  std::vector<double> dlogits(ref.scores.size());
  for (int64_t n = 0; n < rows; ++n) {
    const double* p = &ref.scores[n * E];
    const int32_t* chosen = &ref.experts[n * k];
    double Z = 1e-20;
    for (int64_t j = 0; j < k; ++j) Z += p[chosen[j]];
    std::vector<double> ds(E, 0.0);
    for (int64_t e = 0; e < E; ++e) ds[e] = dscores.defined() ? element(dscores, n * E + e) : 0.0;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < k; ++i) {
        // d weights_j / d g_i, g_i the score of chosen expert i.
        const double jacobian =
            routing.renormalize ? scale * ((i == j ? 1 / Z : 0) - p[chosen[j]] / (Z * Z)) : (i == j ? scale : 0);
        ds[chosen[i]] += element(dweights, n * k + j) * jacobian;
      }
    for (int64_t f = 0; f < E; ++f) {
      double d = 0;
      for (int64_t e = 0; e < E; ++e) {
        const double jacobian =
            routing.score == MoeScore::softmax ? p[e] * ((e == f ? 1 : 0) - p[f]) : (e == f ? p[e] * (1 - p[e]) : 0);
        d += ds[e] * jacobian;
      }
      dlogits[n * E + f] = d;
    }
  }
  return dlogits;
}

std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
}

// Choice values closer than this could rank differently in f32 on another device or library:
// the test data must keep its gaps above it (checked).
constexpr double kMinGap = 1e-5;

// Logits and biases on grids (1/8, 1/64): many exact ties among the choice values, which f32
// and f64 alike leave exact (equal inputs, equal scores), and otherwise wide gaps.
OwnedTensor on_grid(const OwnedTensor& t, double step) {
  OwnedTensor g = testing::converted(t.t, DType::f64);
  for (int64_t i = 0; i < g.t.numel(); ++i) g.ptr<double>()[i] = std::round(g.ptr<double>()[i] / step) * step;
  return testing::converted(g.t, t.t.dtype);
}

// ---- tests -------------------------------------------------------------------------------

TEST(MoeRoute, ForwardMatchesThePlainReference) {
  for (const RoutingCase& c : kCases)
    for (const DType dtype : {DType::f32, DType::f64})
      for (const bool grid : {false, true}) {
        SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)) + (grid ? " on a grid" : ""));
        OwnedTensor logits = random_normal(dtype, {N, c.E}, 1, 2.0), bias = inputs_bias(c, dtype);
        if (grid) {
          logits = on_grid(logits, 1.0 / 8);
          if (c.bias) bias = on_grid(bias, 1.0 / 64);
        }
        const Reference ref = reference_route(logits.t, bias.t, c.routing);
        ASSERT_GT(ref.min_gap, kMinGap);
        const Routed r = route(logits.t, bias.t, c.routing);
        EXPECT_EQ(ints(r.experts.t), ref.experts);
        // f32: exp within an ulp or two, a sum over E and a division: a few 1e-7 of the largest.
        const double bound = dtype == DType::f32 ? 1e-6 : 1e-14;
        EXPECT_LE(normalized_error(r.scores.t, ref.scores), bound);
        EXPECT_LE(normalized_error(r.weights.t, ref.weights), bound);
      }
}

TEST(MoeRoute, EqualChoicesRankTheLowerExpertFirstAndNaNLast) {
  // Row 0: equal logits, so equal softmax scores: experts 0, 1, 2 in that order.
  // Row 1 (sigmoid with a bias): equal logits, the bias lifts experts 1 and 3 equally: 1, 3, 0.
  // Row 2 (sigmoid): a NaN logit ranks after every number: 3, 1, 2.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    MoeScore score;
    std::vector<float> logits, bias;
    std::vector<int32_t> experts;
  } rows[] = {{MoeScore::softmax, {0.5f, 0.5f, 0.5f, 0.5f}, {}, {0, 1, 2}},
              {MoeScore::sigmoid, {1, 1, 1, 1}, {0, 0.25f, 0, 0.25f}, {1, 3, 0}},
              {MoeScore::sigmoid, {nan, 2, 1, 3}, {}, {3, 1, 2}}};
  for (const auto& row : rows) {
    OwnedTensor logits = zeros(DType::f32, {1, 4}), bias = zeros(DType::f32, {4});
    std::copy(row.logits.begin(), row.logits.end(), logits.ptr<float>());
    if (!row.bias.empty()) std::copy(row.bias.begin(), row.bias.end(), bias.ptr<float>());
    const Routed r =
        route(logits.t, row.bias.empty() ? Tensor{} : bias.t, {.score = row.score, .top_k = 3, .renormalize = false});
    EXPECT_EQ(ints(r.experts.t), row.experts);
  }
  // Softmax of a row holding a NaN is NaN throughout: every choice ranks last alike, so the lower
  // indices win, and the weights say NaN rather than hide it.
  OwnedTensor logits = zeros(DType::f32, {1, 4});
  logits.ptr<float>()[2] = nan;
  const Routed r = route(logits.t, Tensor{}, {.score = MoeScore::softmax, .top_k = 2});
  EXPECT_EQ(ints(r.experts.t), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(std::isnan(r.weights.ptr<float>()[0]));
}

TEST(MoeRoute, TheBiasChoosesButNeverWeighs) {
  // Expert 3 has the lowest score; a bias of 1 makes it the first choice. Its weight is its
  // score (times the scale), not score + bias.
  OwnedTensor logits = zeros(DType::f64, {1, 4}), bias = zeros(DType::f64, {4});
  const double x[] = {0.3, 0.2, 0.1, -2.0};
  std::copy(std::begin(x), std::end(x), logits.ptr<double>());
  bias.ptr<double>()[3] = 1.0;
  const MoeRouting routing{.score = MoeScore::sigmoid, .top_k = 2, .renormalize = false, .route_scale = 2.5f};
  const Routed r = route(logits.t, bias.t, routing);
  EXPECT_EQ(ints(r.experts.t), (std::vector<int32_t>{3, 0}));
  EXPECT_DOUBLE_EQ(r.weights.ptr<double>()[0], 2.5 / (1 + std::exp(2.0)));
  EXPECT_DOUBLE_EQ(r.weights.ptr<double>()[1], 2.5 / (1 + std::exp(-0.3)));
}

// The gradient of L = sum(weights * dweights) + sum(scores * dscores) with respect to the logits.
TEST(MoeRoute, BackwardMatchesFiniteDifferences) {
  for (const RoutingCase& c : kCases)
    for (const bool with_dscores : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (with_dscores ? ", with dscores" : ""));
      const int64_t k = c.routing.top_k;
      const OwnedTensor logits = random_normal(DType::f64, {kGradRows, c.E}, 2, 2.0);
      const OwnedTensor bias = inputs_bias(c, DType::f64);
      ASSERT_GT(reference_route(logits.t, bias.t, c.routing).min_gap, kMinGap);  // h = 1e-6 flips no choice
      const OwnedTensor dweights = random_normal(DType::f64, {kGradRows, k}, 3);
      const OwnedTensor dscores = with_dscores ? random_normal(DType::f64, {kGradRows, c.E}, 4) : OwnedTensor{};
      const Routed r = route(logits.t, bias.t, c.routing);
      // dlogits is set, not accumulated: stale contents (NaN) must not leak through.
      const OwnedTensor dlogits = filled(DType::f64, {kGradRows, c.E}, kNaN);
      moe_route_backward(dlogits.t, dweights.t, dscores.t, r.scores.t, r.experts.t, c.routing);
      const auto loss = [&] {
        const Routed again = route(logits.t, bias.t, c.routing);
        return testing::weighted_sum(again.weights.t, dweights.t) +
               (with_dscores ? testing::weighted_sum(again.scores.t, dscores.t) : 0.0);
      };
      const auto result = testing::check_gradients(loss, {{"logits", logits.t, dlogits.t}});
      EXPECT_LE(result.worst_error, 1e-7) << result.where;  // smooth where the choice is fixed
    }
}

TEST(MoeRoute, BackwardMatchesThePlainJacobians) {
  double worst_f32 = 0;
  for (const RoutingCase& c : kCases)
    for (const DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      const OwnedTensor logits = random_normal(dtype, {N, c.E}, 5, 2.0), bias = inputs_bias(c, dtype);
      const Reference ref = reference_route(logits.t, bias.t, c.routing);
      ASSERT_GT(ref.min_gap, kMinGap);
      const OwnedTensor dweights = random_normal(dtype, {N, c.routing.top_k}, 6);
      const OwnedTensor dscores = random_normal(dtype, {N, c.E}, 7);
      const Routed r = route(logits.t, bias.t, c.routing);
      for (const bool with_dscores : {false, true}) {
        const Tensor extra = with_dscores ? dscores.t : Tensor{};
        const OwnedTensor dlogits = filled(dtype, {N, c.E}, kNaN);
        moe_route_backward(dlogits.t, dweights.t, extra, r.scores.t, r.experts.t, c.routing);
        const double error = normalized_error(dlogits.t, reference_dlogits(ref, dweights.t, extra, c.E, c.routing));
        // f32: the scores' few ulps carried through two short sums and products.
        EXPECT_LE(error, dtype == DType::f32 ? 2e-6 : 1e-13) << (with_dscores ? "with dscores" : "");
        if (dtype == DType::f32) worst_f32 = std::max(worst_f32, error);
      }
    }
  std::printf("moe_route_backward f32 vs the f64 Jacobians, worst normalized error: %.3g\n", worst_f32);
}

// Mixtral's, Qwen1.5-MoE's and DeepSeek-V3's routing as Hugging Face's models compute them in
// PyTorch (tests/reference/moe_route_reference.py), in f32 on both sides.
TEST(MoeRoute, MatchesPyTorch) {
  struct PyCase {
    const char* name;  // also the script's routing
    int64_t E;
    MoeRouting routing;
    bool bias_and_dscores;
  };
  const PyCase cases[] = {
      {"mixtral", 8, {.score = MoeScore::softmax, .top_k = 2, .renormalize = true}, false},
      {"qwen", 60, {.score = MoeScore::softmax, .top_k = 4, .renormalize = false}, false},
      {"deepseek_v3", 64, {.score = MoeScore::sigmoid, .top_k = 8, .renormalize = true, .route_scale = 2.5f}, true},
  };
  testing::TempDir dir;
  ckpt::SafetensorsWriter writer;
  std::vector<OwnedTensor> inputs;  // alive until the writer writes
  std::string names;
  for (const PyCase& c : cases) {
    const std::string p = std::string(c.name) + ".";
    inputs.push_back(random_normal(DType::f32, {N, c.E}, 21, 2.0));
    writer.add(p + "logits", inputs.back().t);
    inputs.push_back(random_normal(DType::f32, {N, c.routing.top_k}, 22));
    writer.add(p + "dweights", inputs.back().t);
    if (c.bias_and_dscores) {
      inputs.push_back(random_normal(DType::f32, {c.E}, 23, 0.05));
      writer.add(p + "bias", inputs.back().t);
      inputs.push_back(random_normal(DType::f32, {N, c.E}, 24));
      writer.add(p + "dscores", inputs.back().t);
    }
    writer.set_metadata(p + "routing", c.name);
    testing::set_numeric_metadata(writer, {{(p + "top_k").c_str(), static_cast<double>(c.routing.top_k)},
                                           {(p + "route_scale").c_str(), c.routing.route_scale}});
    names += (names.empty() ? "" : ",") + std::string(c.name);
  }
  writer.set_metadata("cases", names);
  writer.write(dir.file("in.safetensors"));
  ASSERT_EQ(testing::run_reference_script("moe_route_reference.py",
                                          dir.file("in.safetensors") + " " + dir.file("out.safetensors")),
            0);
  const ckpt::SafetensorsReader theirs(dir.file("out.safetensors"));
  const auto read = [&](const std::string& name) { return theirs.read(name, MemTag::workspace); };
  const auto as_f64 = [](const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = element(t, i);
    return v;
  };

  size_t input = 0;
  for (const PyCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = std::string(c.name) + ".";
    const Tensor logits = inputs[input++].t, dweights = inputs[input++].t;
    const Tensor bias = c.bias_and_dscores ? inputs[input++].t : Tensor{};
    const Tensor dscores = c.bias_and_dscores ? inputs[input++].t : Tensor{};
    ASSERT_GT(reference_route(logits, bias, c.routing).min_gap, kMinGap);  // no tie for torch.topk to order
    const Routed r = route(logits, bias, c.routing);
    const OwnedTensor dlogits = zeros(DType::f32, {N, c.E});
    moe_route_backward(dlogits.t, dweights, dscores, r.scores.t, r.experts.t, c.routing);

    EXPECT_EQ(ints(r.experts.t), ints(read(p + "experts").tensor));
    // Both in f32 with different exponentials and summation orders: a few ulps of the largest.
    const double scores = normalized_error(r.scores.t, as_f64(read(p + "scores").tensor));
    const double weights = normalized_error(r.weights.t, as_f64(read(p + "weights").tensor));
    const double grads = normalized_error(dlogits.t, as_f64(read(p + "dlogits").tensor));
    EXPECT_LE(scores, 1e-6);
    EXPECT_LE(weights, 1e-6);
    EXPECT_LE(grads, 2e-6);
    std::printf("moe_route %s vs PyTorch, normalized max errors: scores %.3g, weights %.3g, dlogits %.3g\n", c.name,
                scores, weights, grads);
  }
}

TEST(MoeRoute, EmptyBatchIsANoOp) {
  const MoeRouting routing{};
  const OwnedTensor logits = zeros(DType::f32, {0, 8});
  const Routed r = route(logits.t, Tensor{}, routing);
  const OwnedTensor dlogits = zeros(DType::f32, {0, 8}), dweights = zeros(DType::f32, {0, 2});
  EXPECT_NO_THROW(moe_route_backward(dlogits.t, dweights.t, Tensor{}, r.scores.t, r.experts.t, routing));
}

TEST(MoeRoute, RejectsBadArgumentsByName) {
  constexpr int64_t E = 8, k = 2;
  const MoeRouting routing{};
  const OwnedTensor logits = zeros(DType::f32, {N, E}), scores = zeros(DType::f32, {N, E});
  const OwnedTensor experts = zeros(DType::i32, {N, k}), weights = zeros(DType::f32, {N, k});
  const OwnedTensor bias = zeros(DType::f32, {E}), dlogits = zeros(DType::f32, {N, E});
  const OwnedTensor dweights = zeros(DType::f32, {N, k}), dscores = zeros(DType::f32, {N, E});
  const OwnedTensor wrong_k = zeros(DType::f32, {N, k + 1}), f64 = zeros(DType::f64, {N, E});
  const OwnedTensor experts_f32 = zeros(DType::f32, {N, k}), bias_long = zeros(DType::f32, {E + 1});
  const OwnedTensor logits_bf16 = zeros(DType::bf16, {N, E});
  const auto forward = [&](const Tensor& s, const Tensor& ex, const Tensor& w, const Tensor& x, const Tensor& b,
                           const MoeRouting& r) { return [=] { moe_route_forward(s, ex, w, x, b, r); }; };
  EXPECT_NO_THROW(forward(scores.t, experts.t, weights.t, logits.t, bias.t, routing)());
  EXPECT_NO_THROW(moe_route_backward(dlogits.t, dweights.t, dscores.t, scores.t, experts.t, routing));

  constexpr const char* fwd = "moe_route_forward";
  testing::expect_error_naming(forward(f64.t, experts.t, weights.t, logits.t, bias.t, routing), fwd, "scores");
  testing::expect_error_naming(forward(scores.t, experts_f32.t, weights.t, logits.t, bias.t, routing), fwd, "experts");
  testing::expect_error_naming(forward(scores.t, experts.t, wrong_k.t, logits.t, bias.t, routing), fwd, "weights");
  testing::expect_error_naming(forward(scores.t, experts.t, weights.t, logits.t, bias_long.t, routing), fwd, "bias");
  testing::expect_error_naming(forward(scores.t, experts.t, weights.t, logits_bf16.t, bias.t, routing), fwd, "logits");
  for (const int64_t top_k : {int64_t{0}, E + 1}) {
    const std::string m =
        testing::error_message(forward(scores.t, experts.t, weights.t, logits.t, bias.t, {.top_k = top_k}));
    EXPECT_NE(m.find("top_k " + std::to_string(top_k) + " with 8 experts; it must be in [1, 8]"), std::string::npos)
        << m;
  }
  for (const float scale :
       {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const std::string m =
        testing::error_message(forward(scores.t, experts.t, weights.t, logits.t, bias.t, {.route_scale = scale}));
    EXPECT_NE(m.find("route_scale"), std::string::npos) << m;
  }
  // Outputs over inputs or over each other.
  EXPECT_THROW(forward(logits.t, experts.t, weights.t, logits.t, bias.t, routing)(), Error);
  const Tensor weights_in_scores{.data = scores.t.data, .dtype = DType::f32, .shape = {N, k}};
  EXPECT_THROW(forward(scores.t, experts.t, weights_in_scores, logits.t, bias.t, routing)(), Error);

  constexpr const char* bwd = "moe_route_backward";
  testing::expect_error_naming([&] { moe_route_backward(f64.t, dweights.t, dscores.t, scores.t, experts.t, routing); },
                               bwd, "dlogits");
  testing::expect_error_naming(
      [&] { moe_route_backward(dlogits.t, wrong_k.t, dscores.t, scores.t, experts.t, routing); }, bwd, "dweights");
  testing::expect_error_naming([&] { moe_route_backward(dlogits.t, dweights.t, f64.t, scores.t, experts.t, routing); },
                               bwd, "dscores");
  testing::expect_error_naming(
      [&] { moe_route_backward(dlogits.t, dweights.t, dscores.t, scores.t, experts_f32.t, routing); }, bwd, "experts");
  EXPECT_THROW(moe_route_backward(scores.t, dweights.t, dscores.t, scores.t, experts.t, routing), Error);
  EXPECT_THROW(moe_route_backward(dscores.t, dweights.t, dscores.t, scores.t, experts.t, routing), Error);
}

}  // namespace
}  // namespace dt::kernels
