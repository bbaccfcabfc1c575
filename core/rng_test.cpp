#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace dt {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Philox, KnownAnswersFromRandom123) {
  // The three "philox4x32 10" lines of Random123's tests/kat_vectors: counter, key, output.
  struct Case {
    PhiloxCounter counter;
    PhiloxKey key;
    PhiloxCounter expected;
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& c : cases) EXPECT_EQ(philox4x32_10(c.counter, c.key), c.expected);
}

// Stream names are hashed into the counter, so the hash must never change: a new value would
// change every initialisation. These are the published 64-bit FNV-1a test vectors.
TEST(StableHash, IsFnv1a64) {
  EXPECT_EQ(stable_hash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(stable_hash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stable_hash("foobar"), 0x85944171f73967e8ull);
}

constexpr uint64_t kSeed = 1234;
constexpr float kMean = 0.0f, kStd = 0.02f;

// The promise of rng.h: element i of a named tensor depends only on (seed, name, i), so a
// tensor filled whole equals one filled in any pieces, in any order, with other streams drawn
// in between and a fresh generator each time.
TEST(ElementRng, ValueDependsOnlyOnSeedNameAndIndex) {
  const std::string name = "h.3.mlp.fc.weight";
  constexpr int64_t kRows = 97, kCols = 103;  // primes, so no split below is even
  constexpr int64_t kCount = kRows * kCols;
  std::vector<float> whole(kCount);
  fill_normal(whole.data(), kCount, 0, ElementRng(kSeed, name), kMean, kStd);

  std::vector<float> reversed(kCount), other(1000);
  constexpr int64_t kChunk = 1000;
  for (int64_t end = kCount; end > 0; end -= kChunk) {
    const int64_t begin = std::max<int64_t>(0, end - kChunk);
    fill_normal(other.data(), kChunk, static_cast<uint64_t>(begin), ElementRng(kSeed, "h.3.attn.qkv.weight"),
                kMean, kStd);
    fill_normal(reversed.data() + begin, end - begin, static_cast<uint64_t>(begin), ElementRng(kSeed, name), kMean,
                kStd);
  }
  EXPECT_TRUE(same_bits(reversed, whole));

  // As tensor-parallel ranks do: rank r of `world` fills only its rows [r*R/world, (r+1)*R/world).
  for (int64_t world = 2; world <= 5; ++world) {
    std::vector<float> sharded(kCount);
    for (int64_t rank = world - 1; rank >= 0; --rank) {
      const int64_t row_begin = rank * kRows / world, row_end = (rank + 1) * kRows / world;
      fill_normal(sharded.data() + row_begin * kCols, (row_end - row_begin) * kCols,
                  static_cast<uint64_t>(row_begin * kCols), ElementRng(kSeed, name), kMean, kStd);
    }
    EXPECT_TRUE(same_bits(sharded, whole)) << "world " << world;
  }

  const ElementRng rng(kSeed, name);
  for (uint64_t i : std::initializer_list<uint64_t>{0, 1, 5000, kCount - 1})
    EXPECT_EQ(whole[i], static_cast<float>(kMean + kStd * rng.normal(i))) << "element " << i;
}

TEST(ElementRng, FillNormalAppliesMeanAndStd) {
  const ElementRng rng(kSeed, "ln_f.weight");
  std::vector<float> out(100);
  fill_normal(out.data(), 100, 7, rng, 1.0f, 0.5f);
  for (uint64_t k = 0; k < out.size(); ++k) EXPECT_EQ(out[k], static_cast<float>(1.0 + 0.5 * rng.normal(7 + k)));
}

// Streams that differ in any input share no values: with 32 random bits per uniform a chance
// match has probability 2^-32 per element, so even one match over 1000 elements means the
// input is ignored or two inputs collide.
TEST(ElementRng, DifferentSeedsNamesAndIndicesGiveDifferentStreams) {
  const ElementRng base(kSeed, "wte.weight");
  const ElementRng others[] = {
      ElementRng(kSeed + 1, "wte.weight"),
      ElementRng(kSeed + (1ull << 32), "wte.weight"),  // the seed's high word is part of the key
      ElementRng(kSeed, "wpe.weight"),
      ElementRng(kSeed, "wte.weight "),
  };
  for (size_t s = 0; s < std::size(others); ++s) {
    int matches = 0;
    for (uint64_t i = 0; i < 1000; ++i) matches += base.uniform(i) == others[s].uniform(i);
    EXPECT_EQ(matches, 0) << "stream " << s;
  }
  int matches = 0;
  for (uint64_t i = 0; i < 1000; ++i) matches += base.uniform(i) == base.uniform(i + (1ull << 32));
  EXPECT_EQ(matches, 0) << "the index's high word must reach the counter";
}

// Bounds are 6 standard errors of the statistic under a correct generator: a correct
// implementation fails with probability ~1e-9, and the seed is fixed, so the test is also
// deterministic.
TEST(ElementRng, UniformIsInOpenUnitIntervalWithMeanHalf) {
  const ElementRng rng(kSeed, "uniform");
  constexpr int kSamples = 100000;
  double sum = 0;
  for (uint64_t i = 0; i < kSamples; ++i) {
    const double u = rng.uniform(i);
    ASSERT_GT(u, 0.0) << i;
    ASSERT_LT(u, 1.0) << i;
    sum += u;
  }
  const double standard_error = std::sqrt(1.0 / 12.0 / kSamples);  // a uniform's variance is 1/12
  EXPECT_NEAR(sum / kSamples, 0.5, 6 * standard_error);
}

TEST(ElementRng, NormalHasMeanZeroStdOneAndNormalTails) {
  const ElementRng rng(kSeed, "normal");
  constexpr int kSamples = 1000000;
  double sum = 0, sum_squares = 0;
  int beyond_3_sigma = 0;
  for (uint64_t i = 0; i < kSamples; ++i) {
    const double x = rng.normal(i);
    sum += x;
    sum_squares += x * x;
    beyond_3_sigma += std::fabs(x) > 3.0;
  }
  const double mean = sum / kSamples;
  const double std = std::sqrt(sum_squares / kSamples - mean * mean);
  // Standard errors: of the mean 1/sqrt(n); of the sample std of a normal ~1/sqrt(2n); of a
  // fraction p, sqrt(p(1-p)/n). P(|x| > 3) = 0.0026998 for a standard normal.
  constexpr double kTail = 0.0026998;
  EXPECT_NEAR(mean, 0.0, 6 / std::sqrt(kSamples));
  EXPECT_NEAR(std, 1.0, 6 / std::sqrt(2.0 * kSamples));
  EXPECT_NEAR(static_cast<double>(beyond_3_sigma) / kSamples, kTail, 6 * std::sqrt(kTail * (1 - kTail) / kSamples));
}

}  // namespace
}  // namespace dt
