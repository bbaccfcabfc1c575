#include "train/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace dt {
namespace {

std::vector<float> random_logits(int V, uint64_t seed, double std = 2.0) {
  const ElementRng rng(seed, "sampler_test.logits");
  std::vector<float> logits(static_cast<size_t>(V));
  for (int i = 0; i < V; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(std * rng.normal(i));
  return logits;
}

int argmax(const std::vector<float>& logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i) best = logits[i] > logits[best] ? i : best;
  return best;
}

TEST(Sampler, GreedyIsTheArgmaxWithTiesToTheLowestId) {
  Sampler greedy({.temperature = 0});
  EXPECT_EQ(greedy.sample(std::vector<float>{0.5f, 3.0f, -1.0f, 2.9f}, 0), 1);
  EXPECT_EQ(greedy.sample(std::vector<float>{1.0f, 7.0f, 7.0f, 7.0f}, 0), 1);
  EXPECT_EQ(greedy.sample(std::vector<float>{-INFINITY, -INFINITY}, 0), 0);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = random_logits(1000, seed);
    EXPECT_EQ(greedy.sample(logits, seed), argmax(logits));
  }
}

// top_k = 1 leaves one candidate and a top_p below the largest probability leaves one in the
// nucleus: both are greedy whatever the temperature and the draw.
TEST(Sampler, TopKOneAndASmallTopPAreGreedy) {
  Sampler top1({.temperature = 1.5f, .top_k = 1, .seed = 3});
  Sampler tiny_p({.temperature = 1, .top_p = 1e-6f, .seed = 4});
  for (uint64_t step = 0; step < 200; ++step) {
    const std::vector<float> logits = random_logits(500, step, 0.5);
    EXPECT_EQ(top1.sample(logits, step), argmax(logits));
    EXPECT_EQ(tiny_p.sample(logits, step), argmax(logits));
  }
  // Tied maxima: the lower id, as greedy.
  EXPECT_EQ(top1.sample(std::vector<float>{0, 2, 1, 2}, 0), 1);
}

std::vector<int32_t> draws(const SamplingConfig& config, const std::vector<float>& logits, int count) {
  Sampler sampler(config);
  std::vector<int32_t> tokens;
  for (int step = 0; step < count; ++step) tokens.push_back(sampler.sample(logits, static_cast<uint64_t>(step)));
  return tokens;
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  const std::vector<float> logits = random_logits(50, 9, 0.5);  // flat enough that draws vary
  const SamplingConfig config{.temperature = 1, .top_k = 20, .top_p = 0.9f, .seed = 42};
  const std::vector<int32_t> first = draws(config, logits, 100);
  EXPECT_EQ(first, draws(config, logits, 100));
  SamplingConfig other = config;
  other.seed = 43;
  EXPECT_NE(first, draws(other, logits, 100));
  // Each step is a function of the step alone: replaying step 57 by itself gives its token.
  EXPECT_EQ(Sampler(config).sample(logits, 57), first[57]);
}

// Pearson's chi-square statistic sum (observed - expected)^2 / expected of `count` draws against
// the probabilities `p` (zero-probability tokens must never be drawn).
double chi_square(const std::vector<int32_t>& tokens, const std::vector<double>& p) {
  std::vector<double> observed(p.size(), 0);
  for (const int32_t t : tokens) observed[static_cast<size_t>(t)] += 1;
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(observed[i], 0) << "token " << i << " is outside top-k / top-p but was drawn";
      continue;
    }
    const double expected = p[i] * static_cast<double>(tokens.size());
    chi2 += (observed[i] - expected) * (observed[i] - expected) / expected;
  }
  return chi2;
}

// 40000 draws against the exact distribution. Under a correct sampler the statistic follows a
// chi-square law with (candidates - 1) degrees of freedom; the bounds are its 99.9% quantiles
// (24.32 for 7, 13.82 for 2), so a correct sampler fails one seed in a thousand; the seeds here
// are fixed, so the test is deterministic. A wrong temperature, an off-by-one in top-k, or a
// nucleus that keeps one token too many or too few shifts some expected count by hundreds, and
// the statistic by hundreds or more.
TEST(Sampler, DrawsFollowTheSoftmaxOfTheKeptTokens) {
  const std::vector<float> logits{1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
  constexpr int kDraws = 40000;
  auto softmax = [&](double temperature, const std::vector<int>& kept) {
    std::vector<double> p(logits.size(), 0);
    double total = 0;
    for (const int i : kept) total += p[i] = std::exp(logits[i] / temperature);
    for (double& v : p) v /= total;
    return p;
  };
  const double all = chi_square(draws({.temperature = 1, .seed = 1}, logits, kDraws),
                                softmax(1, {0, 1, 2, 3, 4, 5, 6, 7}));
  const double hot = chi_square(draws({.temperature = 2, .seed = 2}, logits, kDraws),
                                softmax(2, {0, 1, 2, 3, 4, 5, 6, 7}));
  // top_k = 3 keeps 2, 5, 0 (p = 0.51, 0.31, 0.19 among them); top_p = 0.8 then keeps the
  // fewest leading ones reaching 0.8: 2 and 5 (0.82).
  const double top_k =
      chi_square(draws({.temperature = 1, .top_k = 3, .seed = 3}, logits, kDraws), softmax(1, {2, 5, 0}));
  const double nucleus =
      chi_square(draws({.temperature = 1, .top_k = 3, .top_p = 0.8f, .seed = 4}, logits, kDraws), softmax(1, {2, 5}));
  std::printf("chi-square: all %.2f, temperature 2 %.2f (bound 24.32); top-k %.2f (bound 13.82); nucleus %.2f (bound "
              "10.83)\n", all, hot, top_k, nucleus);
  EXPECT_LT(all, 24.32);
  EXPECT_LT(hot, 24.32);
  EXPECT_LT(top_k, 13.82);
  EXPECT_LT(nucleus, 10.83);  // 1 degree of freedom
}

TEST(Sampler, InvalidSettingsAndLogitsAreNamed) {
  try {
    validate_sampling_config({.temperature = -1, .top_k = -2, .top_p = 1.5f});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("temperature = -1: must be a finite value >= 0"), std::string::npos) << what;
    EXPECT_NE(what.find("top_k = -2: must be >= 0"), std::string::npos) << what;
    EXPECT_NE(what.find("top_p = 1.5: must be in (0, 1]"), std::string::npos) << what;
  }
  EXPECT_THROW(Sampler({.top_p = 0}), Error);
  EXPECT_THROW(Sampler({.temperature = NAN}), Error);
  EXPECT_NO_THROW(Sampler({.temperature = 0, .top_k = 0, .top_p = 1}));
  Sampler sampler({});
  EXPECT_THROW(sampler.sample(std::vector<float>{0.0f, NAN}, 0), Error);
  EXPECT_THROW(sampler.sample(std::vector<float>{}, 0), Error);
}

}  // namespace
}  // namespace dt
