// The vocabulary-parallel cross-entropy against the whole-row kernel (kernels/cross_entropy.h):
// the logits of a vocabulary of 37 cut into uneven slices, each padded as a tensor-parallel
// rank stores it, give the whole rows' losses and gradients, and the same loss bits on every slice.
#include "kernels/vocab_parallel_cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;
using testing::zeros;

constexpr int64_t N = 6, V = 37;

OwnedTensor some_targets() {
  auto t = zeros(DType::i32, {N});
  const int32_t values[N] = {3, kIgnoreIndex, 36, 0, 20, 17};  // in the first, last and middle slices
  std::copy_n(values, N, t.ptr<int32_t>());
  return t;
}

struct Slice {
  int64_t first, rows, stored;
};

// The whole (N, V) f32 logits cut into `slices`, each stored with `stored` columns, the padding
// holding garbage that must never be read.
std::vector<OwnedTensor> cut(const OwnedTensor& whole, const std::vector<Slice>& slices) {
  std::vector<OwnedTensor> out;
  for (const Slice& s : slices) {
    auto x = zeros(DType::f32, {N, s.stored});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < s.stored; ++v)
        x.ptr<float>()[n * s.stored + v] = v < s.rows ? whole.ptr<float>()[n * V + s.first + v] : 1e30f;
    out.push_back(std::move(x));
  }
  return out;
}

// Runs both steps on every slice (the all-gather done by hand) and returns the slices' losses.
std::vector<OwnedTensor> run(std::vector<OwnedTensor>& logits, const std::vector<Slice>& slices,
                             const OwnedTensor& targets, bool with_gradient, float loss_scale) {
  const auto R = static_cast<int64_t>(slices.size());
  auto all_stats = zeros(DType::f32, {R, N, 3});
  for (int64_t r = 0; r < R; ++r)
    vocab_slice_statistics(all_stats.t.slice_rows(r, 1).reshape({N, 3}), logits[r].t, targets.t, slices[r].first,
                           slices[r].rows);
  std::vector<OwnedTensor> losses;
  for (int64_t r = 0; r < R; ++r) {
    losses.push_back(zeros(DType::f32, {N}));
    vocab_parallel_cross_entropy(losses.back().t, logits[r].t, all_stats.t, targets.t, slices[r].first,
                                 slices[r].rows, with_gradient, loss_scale);
  }
  return losses;
}

TEST(VocabParallelCrossEntropy, SlicesGiveTheWholeRowsLossesAndGradients) {
  const std::vector<Slice> slices = {{0, 10, 16}, {10, 9, 16}, {19, 9, 9}, {28, 9, 16}};
  const auto targets = some_targets();
  const auto whole = testing::random_normal(DType::f32, {N, V}, 5, 3.0);
  auto reference_logits = testing::converted(whole.t, DType::f32);
  auto reference_losses = zeros(DType::f32, {N});
  cross_entropy_forward_backward(reference_losses.t, reference_logits.t, targets.t, V, 0.5f);

  auto logits = cut(whole, slices);
  const auto losses = run(logits, slices, targets, /*with_gradient=*/true, 0.5f);
  for (size_t r = 0; r < slices.size(); ++r) {
    // The same merge of the same gathered stats: the same bits on every rank.
    EXPECT_EQ(std::memcmp(losses[r].t.data, losses[0].t.data, losses[0].t.bytes()), 0) << "slice " << r;
    for (int64_t n = 0; n < N; ++n) {
      // The whole-row sum of 37 exponentials against the slices' partial sums rescaled and
      // added: both round each term and sum once, a few f32 ulps of the loss (about 3) apart.
      EXPECT_NEAR(losses[r].ptr<float>()[n], reference_losses.ptr<float>()[n], 4e-6) << "row " << n;
      const Slice& s = slices[r];
      for (int64_t v = 0; v < s.stored; ++v) {
        const float got = logits[r].ptr<float>()[n * s.stored + v];
        if (v >= s.rows || n == 1) {
          EXPECT_EQ(got, 0.0f) << "padding or ignored row " << n << ", column " << v;
          continue;
        }
        // exp(x - M) * (scale / S), with S a few ulps apart as above: the gradients, below the
        // scale 0.5 in magnitude (ulp at most 2^-24), a few ulps apart. Measured 1.2e-7.
        EXPECT_NEAR(got, reference_logits.ptr<float>()[n * V + s.first + v], 4 * 0x1p-24)
            << "row " << n << " id " << s.first + v;
      }
    }
  }
  EXPECT_EQ(losses[0].ptr<float>()[1], 0.0f);  // the ignored row
}

// 16-bit logits: the forward's losses as the f32 kernels give them on the widened logits, and
// the gradient rounded once.
TEST(VocabParallelCrossEntropy, SixteenBitLogitsAreTheF32KernelsOnWidenedLogits) {
  const std::vector<Slice> slices = {{0, 19, 24}, {19, 18, 24}};
  const auto targets = some_targets();
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto whole16 = testing::random_storage(S, {N, V}, 9, 3.0);
    const auto whole = testing::widened(whole16.t);
    auto logits32 = cut(whole, slices);
    std::vector<OwnedTensor> logits16;
    for (const OwnedTensor& x : logits32) logits16.push_back(testing::rounded(x.t, S));
    const auto losses32 = run(logits32, slices, targets, true, 1.0f);
    const auto losses16 = run(logits16, slices, targets, true, 1.0f);
    for (size_t r = 0; r < slices.size(); ++r) {
      EXPECT_EQ(testing::max_abs_difference(losses16[r].t, losses32[r].t), 0);
      EXPECT_EQ(testing::max_ulp_distance(logits16[r].t, testing::rounded(logits32[r].t, S).t), 0);
    }
  }
}

TEST(VocabParallelCrossEntropy, WrongArgumentsAreRejectedByName) {
  const auto targets = some_targets();
  auto logits = zeros(DType::f32, {N, 16});
  auto stats = zeros(DType::f32, {N, 2});
  std::string m = testing::error_message([&] { vocab_slice_statistics(stats.t, logits.t, targets.t, 0, 10); });
  EXPECT_NE(m.find("vocab_slice_statistics: stats"), std::string::npos) << m;
  auto losses = zeros(DType::f32, {N});
  auto all_stats = zeros(DType::f32, {2, N + 1, 3});
  m = testing::error_message(
      [&] { vocab_parallel_cross_entropy(losses.t, logits.t, all_stats.t, targets.t, 0, 10, false, 1); });
  EXPECT_NE(m.find("vocab_parallel_cross_entropy: all_stats"), std::string::npos) << m;
  m = testing::error_message([&] { vocab_slice_statistics(zeros(DType::f32, {N, 3}).t, logits.t, targets.t, 0, 17); });
  EXPECT_NE(m.find("rows = 17"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
