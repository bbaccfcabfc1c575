// Blocks merged into a sequence's attention: the chunks of a causal sequence — each query chunk
// against every earlier key chunk in full and its own causally — give attention_forward's output
// and log-sum-exp, and their backward shares summed give attention_backward's gradients, for
// grouped-query heads and a tensor-parallel rank's heads, in f64 (to rounding) and f32, with
// chunks shorter and longer than the kernel's 64-row tiles. Full blocks of unequal lengths merge
// into the definition's attention over all their keys. In 16-bit the blocks compute in f32 from
// the widened inputs: the same bits as the f32 blocks on them. And the bits do not depend on the
// thread count.
#include "kernels/attention_block.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

// Rows [t0, t0 + rows) of every sequence of x (B, T, W), columns [c0, c0 + width).
OwnedTensor rows_of(const Tensor& x, int64_t t0, int64_t rows, int64_t c0, int64_t width) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2), e = static_cast<int64_t>(dtype_size(x.dtype));
  OwnedTensor out = testing::zeros(x.dtype, {B, rows, width});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < rows; ++t)
      std::memcpy(static_cast<char*>(out.t.data) + ((b * rows + t) * width) * e,
                  static_cast<const char*>(x.data) + ((b * T + t0 + t) * W + c0) * e,
                  static_cast<size_t>(width * e));
  return out;
}

// Rows [a * chunk, (a + 1) * chunk), chunk a of every sequence of x, columns [c0, c0 + width).
OwnedTensor chunk_of(const Tensor& x, int a, int chunk, int64_t c0, int64_t width) {
  return rows_of(x, int64_t{a} * chunk, chunk, c0, width);
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

// The definition, in double: every query of q (B, Tq, (NH + 2*NKV) * HS) against every key of kv
// (B, Tk, 2*NKV*HS), unmasked, its output (B, Tq, NH*HS) and log-sum-exp (B, NH, Tq), and for
// dout the gradients of q's query columns (B, Tq, NH*HS) and of kv.
struct Definition {
  OwnedTensor out, lse, dq, dkv;  // f64
};

Definition full_attention(const Tensor& q, const Tensor& kv, const Tensor& dout, const AttentionHeads& h) {
  const int64_t B = q.dim(0), Tq = q.dim(1), Tk = kv.dim(1), W = q.dim(2), KV = kv.dim(2);
  const int64_t HS = W / (h.n_head + 2 * h.n_kv_head), A = h.n_head * HS;
  const double scale = 1 / std::sqrt(static_cast<double>(HS));
  Definition r{testing::zeros(DType::f64, {B, Tq, A}), testing::zeros(DType::f64, {B, h.n_head, Tq}),
               testing::zeros(DType::f64, {B, Tq, A}), testing::zeros(DType::f64, {B, Tk, KV})};
  double *out = r.out.ptr<double>(), *dq = r.dq.ptr<double>(), *dkv = r.dkv.ptr<double>();
  std::vector<double> p(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int hh = 0; hh < h.n_head; ++hh) {
      const int64_t g = h.kv_of(hh), qc = hh * HS, kc = g * HS, vc = (h.n_kv_head + g) * HS;
      const auto qe = [&](int64_t i, int64_t c) { return testing::element(q, (b * Tq + i) * W + qc + c); };
      const auto ke = [&](int64_t j, int64_t c) { return testing::element(kv, (b * Tk + j) * KV + kc + c); };
      const auto ve = [&](int64_t j, int64_t c) { return testing::element(kv, (b * Tk + j) * KV + vc + c); };
      const auto de = [&](int64_t i, int64_t c) { return testing::element(dout, (b * Tq + i) * A + qc + c); };
      for (int64_t i = 0; i < Tq; ++i) {
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          double s = 0;
          for (int64_t c = 0; c < HS; ++c) s += qe(i, c) * ke(j, c);
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (int64_t j = 0; j < Tk; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int64_t j = 0; j < Tk; ++j) p[j] /= sum;
        r.lse.ptr<double>()[(b * h.n_head + hh) * Tq + i] = m + std::log(sum);
        double* oi = out + (b * Tq + i) * A + qc;
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t c = 0; c < HS; ++c) oi[c] += p[j] * ve(j, c);
        double D = 0;
        for (int64_t c = 0; c < HS; ++c) D += de(i, c) * oi[c];
        for (int64_t j = 0; j < Tk; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < HS; ++c) dp += de(i, c) * ve(j, c);
          const double ds = p[j] * (dp - D) * scale;
          for (int64_t c = 0; c < HS; ++c) {
            dq[(b * Tq + i) * A + qc + c] += ds * ke(j, c);
            dkv[(b * Tk + j) * KV + kc + c] += ds * qe(i, c);
            dkv[(b * Tk + j) * KV + vc + c] += p[j] * de(i, c);
          }
        }
      }
    }
  return r;
}

// A query block against two full key blocks of other lengths, none a multiple of the tiles, merged:
// the definition's attention over all their keys. Backward from that attention's out and lse, the
// two blocks' shares give its gradients.
TEST(AttentionBlockFull, BlocksOfUnequalLengthsMergeIntoTheDefinition) {
  const AttentionHeads h(6, 2);
  const int64_t B = 2, Tq = 70, Tk1 = 130, Tk2 = 45, HS = 16, W = (6 + 2 * 2) * HS, A = 6 * HS, KV = 2 * 2 * HS;
  for (const DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const OwnedTensor q = testing::random_normal(dtype, {B, Tq, W}, 5);
    const OwnedTensor kv = testing::random_normal(dtype, {B, Tk1 + Tk2, KV}, 6);
    const OwnedTensor dout = testing::random_normal(dtype, {B, Tq, A}, 7);
    const OwnedTensor kv1 = rows_of(kv.t, 0, Tk1, 0, KV), kv2 = rows_of(kv.t, Tk1, Tk2, 0, KV);
    const Definition want = full_attention(q.t, kv.t, dout.t, h);

    OwnedTensor out = testing::zeros(dtype, {B, Tq, A}), lse = testing::zeros(dtype, {B, 6, Tq});
    attention_block_forward(out.t, lse.t, q.t, kv1.t, h, BlockMask::full, /*first=*/true);
    attention_block_forward(out.t, lse.t, q.t, kv2.t, h, BlockMask::full, /*first=*/false);
    // The bounds of ChunksMergeIntoTheCausalAttention: f64 to rounding; f32 a few ulps of the
    // largest element, from the merge's exponentials and the tiles' order of summation.
    const double bound = dtype == DType::f64 ? 1e-12 : 2e-6;
    EXPECT_LT(relative_error(out.t, want.out.t), bound);
    EXPECT_LT(relative_error(lse.t, want.lse.t), bound);

    const OwnedTensor want_out = testing::converted(want.out.t, dtype);
    const OwnedTensor want_lse = testing::converted(want.lse.t, dtype);
    OwnedTensor dq = testing::zeros(dtype, {B, Tq, A}), dkv1 = testing::zeros(dtype, {B, Tk1, KV}),
                dkv2 = testing::zeros(dtype, {B, Tk2, KV});
    attention_block_backward(dq.t, dkv1.t, dout.t, q.t, kv1.t, want_out.t, want_lse.t, h, BlockMask::full);
    attention_block_backward(dq.t, dkv2.t, dout.t, q.t, kv2.t, want_out.t, want_lse.t, h, BlockMask::full);
    const OwnedTensor want_dkv1 = rows_of(want.dkv.t, 0, Tk1, 0, KV),
                      want_dkv2 = rows_of(want.dkv.t, Tk1, Tk2, 0, KV);
    const double grad_bound = dtype == DType::f64 ? 1e-12 : 1e-5;
    EXPECT_LT(relative_error(dq.t, want.dq.t), grad_bound);
    EXPECT_LT(relative_error(dkv1.t, want_dkv1.t), grad_bound);
    EXPECT_LT(relative_error(dkv2.t, want_dkv2.t), grad_bound);
  }
}

// Everything a block pair gives: the query chunk's out and lse after a full block and its own
// causal block, and the backward's dq and the two blocks' dkv, as bytes.
std::vector<char> block_results(const Tensor& q, const Tensor& kv_full, const Tensor& kv_own, const Tensor& dout,
                                const AttentionHeads& h) {
  const int64_t B = q.dim(0), T = q.dim(1), A = dout.dim(2);
  const DType acc = q.dtype == DType::f64 ? DType::f64 : DType::f32;
  OwnedTensor out = testing::zeros(acc, {B, T, A}), lse = testing::zeros(acc, {B, h.n_head, T});
  attention_block_forward(out.t, lse.t, q, kv_full, h, BlockMask::full, /*first=*/true);
  attention_block_forward(out.t, lse.t, q, kv_own, h, BlockMask::causal, /*first=*/false);
  const OwnedTensor stored = q.dtype == acc ? testing::converted(out.t, acc) : testing::rounded(out.t, q.dtype);
  OwnedTensor dq = testing::zeros(acc, {B, T, A}), dkv_full = testing::zeros(acc, kv_full.shape),
              dkv_own = testing::zeros(acc, kv_own.shape);
  attention_block_backward(dq.t, dkv_full.t, dout, q, kv_full, stored.t, lse.t, h, BlockMask::full);
  attention_block_backward(dq.t, dkv_own.t, dout, q, kv_own, stored.t, lse.t, h, BlockMask::causal);
  std::vector<char> bytes;
  for (const OwnedTensor* x : {&out, &lse, &dq, &dkv_full, &dkv_own})
    bytes.insert(bytes.end(), static_cast<const char*>(x->t.data), static_cast<const char*>(x->t.data) + x->t.bytes());
  return bytes;
}

// Bitwise equal across runs and thread counts: each (sequence, head, query tile) of the forward
// and each (sequence, key/value head) of the backward is one thread's, its sums in one order.
TEST(AttentionBlockDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  const AttentionHeads h(6, 2);
  const int64_t B = 2, T = 150, HS = 32, W = (6 + 2 * 2) * HS, A = 6 * HS, KV = 2 * 2 * HS;
  for (const DType storage : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(storage));
    const auto random = [&](Shape shape, uint64_t seed) {
      return storage == DType::f32 ? testing::random_normal(storage, shape, seed)
                                   : testing::random_storage(storage, shape, seed);
    };
    const OwnedTensor q = random({B, T, W}, 8), dout = random({B, T, A}, 9);
    const OwnedTensor kv_full = random({B, 90, KV}, 10), kv_own = random({B, T, KV}, 11);
    const int threads = omp_get_max_threads();
    const std::vector<char> first = block_results(q.t, kv_full.t, kv_own.t, dout.t, h);
    EXPECT_EQ(first, block_results(q.t, kv_full.t, kv_own.t, dout.t, h)) << "run to run";
    for (const int other : {1, 3}) {
      omp_set_num_threads(other);
      const std::vector<char> again = block_results(q.t, kv_full.t, kv_own.t, dout.t, h);
      omp_set_num_threads(threads);
      EXPECT_EQ(first, again) << other << " threads against " << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlock,
                         ::testing::Values(Case{"mha", 2, 4, 5, 4, 4, 8}, Case{"gqa_6_over_2", 2, 3, 7, 6, 2, 16},
                                           Case{"mqa", 1, 5, 3, 4, 1, 8},
                                           Case{"tp_rank_heads", 2, 4, 4, 2, 2, 8, /*group=*/3, /*phase=*/2},
                                           // Two query and key tiles a chunk, the second partial,
                                           // and a head size that no vector register divides.
                                           Case{"chunks_of_100_head_13", 1, 3, 100, 4, 2, 13}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dt::kernels
