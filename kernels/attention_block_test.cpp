// Blocks merged into a sequence's attention: the chunks of a causal sequence — each query chunk
// against every earlier key chunk in full and its own causally — give attention_forward's output
// and log-sum-exp, and their backward shares summed give attention_backward's gradients, for
// grouped-query heads and a tensor-parallel rank's heads, in f64 (to rounding) and f32. In 16-bit
// the blocks compute in f32 from the widened inputs: the same bits as the f32 blocks on them.
#include "kernels/attention_block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;

struct Case {
  const char* name;
  int B, chunks, chunk, NH, NKV, HS;
  int group = 0, phase = 0;  // a tensor-parallel rank's heads when group > 0
  AttentionHeads heads() const { return group > 0 ? AttentionHeads(NH, NKV, group, phase) : AttentionHeads(NH, NKV); }
  int T() const { return chunks * chunk; }
};

// Rows [a * chunk, (a + 1) * chunk) of every sequence of x (B, T, W), columns [c0, c0 + width).
OwnedTensor chunk_of(const Tensor& x, int a, int chunk, int64_t c0, int64_t width) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2), e = static_cast<int64_t>(dtype_size(x.dtype));
  OwnedTensor out = testing::zeros(x.dtype, {B, chunk, width});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < chunk; ++t)
      std::memcpy(static_cast<char*>(out.t.data) + ((b * chunk + t) * width) * e,
                  static_cast<const char*>(x.data) + ((b * T + a * chunk + t) * W + c0) * e,
                  static_cast<size_t>(width * e));
  return out;
}

// Adds part (B, chunk, width) into x's rows of chunk a, columns [c0, c0 + width) (f32 or f64).
void add_into(const Tensor& x, const Tensor& part, int a, int chunk, int64_t c0) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2), width = part.dim(2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < chunk; ++t)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t to = (b * T + a * chunk + t) * W + c0 + c, from = (b * chunk + t) * width + c;
        if (x.dtype == DType::f64) x.ptr<double>()[to] += part.ptr<double>()[from];
        else x.ptr<float>()[to] += part.ptr<float>()[from];
      }
}

// The largest |actual - expected| over the largest |expected| (f32 or f64).
double relative_error(const Tensor& actual, const Tensor& expected) {
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    worst = std::max(worst, std::fabs(testing::element(actual, i) - testing::element(expected, i)));
    largest = std::max(largest, std::fabs(testing::element(expected, i)));
  }
  return worst / largest;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Chunked {
  OwnedTensor out, lse, dqkv;  // the whole sequence's, assembled from the blocks
};

// Every query chunk's attention from its blocks, and the blocks' gradients summed.
Chunked by_blocks(const Case& c, const Tensor& qkv, const Tensor& dout_whole, const Tensor& out_whole,
                  const Tensor& lse_whole) {
  const AttentionHeads h = c.heads();
  const int64_t W = qkv.dim(2), A = int64_t{c.NH} * c.HS, KV = 2 * int64_t{c.NKV} * c.HS;
  const DType acc = qkv.dtype == DType::f64 ? DType::f64 : DType::f32;
  Chunked r{testing::zeros(acc, {c.B, c.T(), A}), testing::zeros(acc, {c.B, c.NH, c.T()}),
            testing::zeros(acc, {c.B, c.T(), W})};
  for (int a = 0; a < c.chunks; ++a) {
    const OwnedTensor q = chunk_of(qkv, a, c.chunk, 0, W);
    OwnedTensor out = testing::zeros(acc, {c.B, c.chunk, A}), lse = testing::zeros(acc, {c.B, c.NH, c.chunk});
    for (int k = 0; k <= a; ++k) {
      const OwnedTensor kv = chunk_of(qkv, k, c.chunk, A, KV);
      attention_block_forward(out.t, lse.t, q.t, kv.t, h, k == a ? BlockMask::causal : BlockMask::full, k == 0);
    }
    add_into(r.out.t, out.t, a, c.chunk, 0);
    for (int64_t b = 0; b < c.B; ++b)
      for (int hh = 0; hh < c.NH; ++hh)
        for (int t = 0; t < c.chunk; ++t) {
          const int64_t to = (b * c.NH + hh) * c.T() + a * c.chunk + t, from = (b * c.NH + hh) * c.chunk + t;
          if (acc == DType::f64) r.lse.ptr<double>()[to] = lse.ptr<double>()[from];
          else r.lse.ptr<float>()[to] = lse.ptr<float>()[from];
        }
  }
  // Backward from the whole attention's out and lse (what ring attention holds after forward).
  const OwnedTensor lse_rows = testing::converted(lse_whole, acc);
  for (int a = 0; a < c.chunks; ++a) {
    const OwnedTensor q = chunk_of(qkv, a, c.chunk, 0, W), dout = chunk_of(dout_whole, a, c.chunk, 0, A),
                      out = chunk_of(out_whole, a, c.chunk, 0, A);
    OwnedTensor lse = testing::zeros(acc, {c.B, c.NH, c.chunk});
    for (int64_t b = 0; b < c.B; ++b)
      for (int hh = 0; hh < c.NH; ++hh)
        std::memcpy(static_cast<char*>(lse.t.data) + ((b * c.NH + hh) * c.chunk) * dtype_size(acc),
                    static_cast<const char*>(lse_rows.t.data) + ((b * c.NH + hh) * c.T() + a * c.chunk) * dtype_size(acc),
                    static_cast<size_t>(c.chunk) * dtype_size(acc));
    OwnedTensor dq = testing::zeros(acc, {c.B, c.chunk, A});
    for (int k = 0; k <= a; ++k) {
      const OwnedTensor kv = chunk_of(qkv, k, c.chunk, A, KV);
      OwnedTensor dkv = testing::zeros(acc, {c.B, c.chunk, KV});
      attention_block_backward(dq.t, dkv.t, dout.t, q.t, kv.t, out.t, lse.t, h,
                               k == a ? BlockMask::causal : BlockMask::full);
      add_into(r.dqkv.t, dkv.t, k, c.chunk, A);
    }
    add_into(r.dqkv.t, dq.t, a, c.chunk, 0);
  }
  return r;
}

class AttentionBlock : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionBlock, ChunksMergeIntoTheCausalAttention) {
  const Case& c = GetParam();
  for (const DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t W = (c.NH + 2 * int64_t{c.NKV}) * c.HS, A = int64_t{c.NH} * c.HS;
    const OwnedTensor qkv = testing::random_normal(dtype, {c.B, c.T(), W}, 1);
    const OwnedTensor dout = testing::random_normal(dtype, {c.B, c.T(), A}, 2);
    OwnedTensor out = testing::zeros(dtype, {c.B, c.T(), A}), lse = testing::zeros(dtype, {c.B, c.NH, c.T()});
    OwnedTensor dqkv = testing::zeros(dtype, {c.B, c.T(), W});
    attention_forward(out.t, lse.t, qkv.t, c.heads());
    attention_backward(dqkv.t, dout.t, qkv.t, out.t, lse.t, c.heads());
    const Chunked got = by_blocks(c, qkv.t, dout.t, out.t, lse.t);
    // f64: the same sums in another order (1e-12); f32: the merge's exponentials and the blocks'
    // order, a few ulps of the largest element.
    const double bound = dtype == DType::f64 ? 1e-12 : 2e-6;
    EXPECT_LT(relative_error(got.out.t, out.t), bound);
    EXPECT_LT(relative_error(got.lse.t, lse.t), bound);
    EXPECT_LT(relative_error(got.dqkv.t, dqkv.t), dtype == DType::f64 ? 1e-12 : 1e-5);
  }
}

TEST_P(AttentionBlock, SixteenBitBlocksComputeInF32FromTheWidenedInputs) {
  const Case& c = GetParam();
  const int64_t W = (c.NH + 2 * int64_t{c.NKV}) * c.HS, A = int64_t{c.NH} * c.HS;
  for (const DType storage : {DType::bf16, DType::f16}) {
    const OwnedTensor qkv16 = testing::random_storage(storage, {c.B, c.T(), W}, 3);
    const OwnedTensor dout16 = testing::random_storage(storage, {c.B, c.T(), A}, 4);
    const OwnedTensor qkv = testing::widened(qkv16.t), dout = testing::widened(dout16.t);
    OwnedTensor out = testing::zeros(DType::f32, {c.B, c.T(), A}), lse = testing::zeros(DType::f32, {c.B, c.NH, c.T()});
    OwnedTensor dqkv = testing::zeros(DType::f32, {c.B, c.T(), W});
    attention_forward(out.t, lse.t, qkv.t, c.heads());
    // The backward reads out in the storage type: the f32 blocks read the same rounded values.
    const OwnedTensor out16 = testing::rounded(out.t, storage), out_widened = testing::widened(out16.t);
    const Chunked f32 = by_blocks(c, qkv.t, dout.t, out_widened.t, lse.t);
    const Chunked s16 = by_blocks(c, qkv16.t, dout16.t, out16.t, lse.t);
    for (const auto& [a, b] : {std::pair{&s16.out, &f32.out}, std::pair{&s16.lse, &f32.lse},
                               std::pair{&s16.dqkv, &f32.dqkv}})
      EXPECT_EQ(std::memcmp(a->t.data, b->t.data, a->t.bytes()), 0) << dtype_name(storage);
  }
}

TEST(AttentionBlockChecks, ACausalBlockOfUnequalLengthsIsRefused) {
  const OwnedTensor q = testing::zeros(DType::f32, {1, 4, 3 * 8}), kv = testing::zeros(DType::f32, {1, 5, 2 * 8});
  const OwnedTensor out = testing::zeros(DType::f32, {1, 4, 8}), lse = testing::zeros(DType::f32, {1, 1, 4});
  const std::string e = testing::error_of([&] {
    attention_block_forward(out.t, lse.t, q.t, kv.t, AttentionHeads(1, 1), BlockMask::causal, true);
  });
  EXPECT_NE(e.find("a causal block of 4 queries and 5 keys"), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlock,
                         ::testing::Values(Case{"mha", 2, 4, 5, 4, 4, 8}, Case{"gqa_6_over_2", 2, 3, 7, 6, 2, 16},
                                           Case{"mqa", 1, 5, 3, 4, 1, 8},
                                           Case{"tp_rank_heads", 2, 4, 4, 2, 2, 8, /*group=*/3, /*phase=*/2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dt::kernels
