// attention_block_forward and attention_block_backward on the GPU (kernels/attention_block.h):
// the per-row kernels against the CPU ops on the same inputs, and cuDNN's blocks against both,
// on the chunks of a causal sequence merged and summed as ring attention does; shapes cuDNN
// refuses run on the per-row kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_block.h"
#include "kernels/cuda/cudnn_attention.h"
#include "tests/cuda_testing.h"
#include "tests/gradcheck.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;

TEST(CudaAttentionBlock, PerRowKernelsMatchTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  const int B = 2, T = 13, NH = 6, NKV = 2, HS = 16;
  const AttentionHeads heads(NH, NKV);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType acc = DType::f32;
    const OwnedTensor q = testing::random_values(dtype, {B, T, (NH + 2 * NKV) * HS}, 1);
    const OwnedTensor kv0 = testing::random_values(dtype, {B, T, 2 * NKV * HS}, 2);
    const OwnedTensor kv1 = testing::random_values(dtype, {B, T, 2 * NKV * HS}, 3);
    const OwnedTensor dout = testing::random_values(dtype, {B, T, NH * HS}, 4);
    // Run on `device` (the per-row kernels on the GPU, whatever cuDNN takes): returns out, lse,
    // dq, dkv0, dkv1 on the host.
    const auto run = [&](Device device) {
      const bool gpu = device == Device::cuda;
      const auto forward = gpu ? cuda::per_row_attention_block_forward : attention_block_forward;
      const auto backward = gpu ? cuda::per_row_attention_block_backward : attention_block_backward;
      const auto on = [&](const OwnedTensor& t) { return testing::copy_to(t.t, device); };
      const OwnedTensor gq = on(q), g0 = on(kv0), g1 = on(kv1), gdout = on(dout);
      const OwnedTensor out = testing::copy_to(testing::zeros(acc, {B, T, NH * HS}).t, device);
      const OwnedTensor lse = testing::copy_to(testing::zeros(acc, {B, NH, T}).t, device);
      forward(out.t, lse.t, gq.t, g1.t, heads, BlockMask::causal, true);
      forward(out.t, lse.t, gq.t, g0.t, heads, BlockMask::full, false);
      // The backward reads out in the storage type; any values serve to compare the devices.
      const OwnedTensor out_s = on(testing::random_values(dtype, {B, T, NH * HS}, 5));
      const OwnedTensor dq = testing::copy_to(testing::zeros(acc, {B, T, NH * HS}).t, device);
      const OwnedTensor d0 = testing::copy_to(testing::zeros(acc, kv0.t.shape).t, device);
      const OwnedTensor d1 = testing::copy_to(testing::zeros(acc, kv1.t.shape).t, device);
      backward(dq.t, d1.t, gdout.t, gq.t, g1.t, out_s.t, lse.t, heads, BlockMask::causal);
      backward(dq.t, d0.t, gdout.t, gq.t, g0.t, out_s.t, lse.t, heads, BlockMask::full);
      std::vector<OwnedTensor> results;
      for (const OwnedTensor* t : {&out, &lse, &dq, &d0, &d1}) results.push_back(testing::to_host(t->t));
      return results;
    };
    const std::vector<OwnedTensor> cpu = run(Device::cpu), gpu = run(Device::cuda);
    // The same math in another order of threads' sums: f32 rounding.
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(testing::max_error(gpu[i].t, cpu[i].t), 1e-4) << i;
  }
}

// A causal sequence of `chunks` chunks of `chunk` positions (one sequence, as ring attention
// calls the blocks), in bf16.
struct Case {
  const char* name;
  int chunks, chunk, NH, NKV, HS;
  int T() const { return chunks * chunk; }
  int W() const { return (NH + 2 * NKV) * HS; }
  int A() const { return NH * HS; }
  int KV() const { return 2 * NKV * HS; }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " chunks=" << c.chunks << " chunk=" << c.chunk << " NH=" << c.NH << " NKV=" << c.NKV
      << " HS=" << c.HS;
}

// Rows [first, first + count) of x (1, T, width) as (1, count, width): a view.
Tensor chunk_rows(const Tensor& x, int64_t first, int64_t count) {
  return x.reshape({x.dim(1), x.dim(2)}).slice_rows(first, count).reshape({1, count, x.dim(2)});
}

// Which kernels take the blocks: those the public ops dispatch to (cuDNN's, for the cases
// below), or the per-row ones.
enum class Kernels { dispatched, per_row };

// What the blocks give, on the host, all in f32: out (1, T, A) merged over each query chunk's
// blocks; lse kept per chunk, (chunks, NH, chunk), as ring attention keeps it; dq (1, T, A) and
// dkv (1, T, KV) summed over the blocks. `largest_share`: the largest element of any one block's
// backward share of dq or dkv, kept only where the blocks run on the host (each share is then
// computed alone and added in).
struct Blocks {
  OwnedTensor out, lse, dq, dkv;
  double largest_share = 0;
};

// Query chunk a against key chunk a causally, first, then against each earlier chunk in full;
// the backward from out rounded to bf16 (as ring attention stores it) and lse, for every pair.
Blocks run_blocks(const Case& c, const Tensor& qkv, const Tensor& kv, const Tensor& dout, Device device,
                  Kernels kernels) {
  const AttentionHeads heads(c.NH, c.NKV);
  const bool per_row = kernels == Kernels::per_row;
  const auto forward = per_row ? cuda::per_row_attention_block_forward : attention_block_forward;
  const auto backward = per_row ? cuda::per_row_attention_block_backward : attention_block_backward;
  const OwnedTensor q_on = testing::copy_to(qkv, device), kv_on = testing::copy_to(kv, device),
                    dout_on = testing::copy_to(dout, device);
  const auto zeros_on = [&](Shape shape) { return testing::copy_to(testing::zeros(DType::f32, shape).t, device); };
  const OwnedTensor out = zeros_on({1, c.T(), c.A()}), lse = zeros_on({1, c.chunks * c.NH, c.chunk});
  const auto rows = [&](const OwnedTensor& x, int a) { return chunk_rows(x.t, int64_t{a} * c.chunk, c.chunk); };
  const auto lse_of = [&](int a) { return chunk_rows(lse.t, int64_t{a} * c.NH, c.NH); };  // (1, NH, chunk)
  for (int a = 0; a < c.chunks; ++a)
    for (int k = a; k >= 0; --k)
      forward(rows(out, a), lse_of(a), rows(q_on, a), rows(kv_on, k), heads,
              k == a ? BlockMask::causal : BlockMask::full, k == a);

  const OwnedTensor stored = testing::copy_to(testing::rounded(testing::to_host(out.t).t, DType::bf16).t, device);
  Blocks r{testing::to_host(out.t), testing::to_host(lse.t), testing::zeros(DType::f32, {1, c.T(), c.A()}),
           testing::zeros(DType::f32, {1, c.T(), c.KV()})};
  const OwnedTensor dq = zeros_on({1, c.T(), c.A()}), dkv = zeros_on({1, c.T(), c.KV()});
  for (int a = 0; a < c.chunks; ++a)
    for (int k = a; k >= 0; --k) {
      const BlockMask mask = k == a ? BlockMask::causal : BlockMask::full;
      if (device == Device::cuda) {
        backward(rows(dq, a), rows(dkv, k), rows(dout_on, a), rows(q_on, a), rows(kv_on, k), rows(stored, a),
                 lse_of(a), heads, mask);
        continue;
      }
      // On the host each share alone, into zeros, then added: its largest element bounds its rounding.
      const OwnedTensor dq_share = testing::zeros(DType::f32, {1, c.chunk, c.A()}),
                        dkv_share = testing::zeros(DType::f32, {1, c.chunk, c.KV()});
      backward(dq_share.t, dkv_share.t, rows(dout_on, a), rows(q_on, a), rows(kv_on, k), rows(stored, a), lse_of(a),
               heads, mask);
      for (const auto& [share, into] : {std::pair{&dq_share, rows(r.dq, a)}, std::pair{&dkv_share, rows(r.dkv, k)}})
        for (int64_t i = 0; i < share->t.numel(); ++i) {
          const float x = share->t.ptr<float>()[i];
          into.ptr<float>()[i] += x;
          r.largest_share = std::max(r.largest_share, std::fabs(double{x}));
        }
    }
  if (device == Device::cuda) r.dq = testing::to_host(dq.t), r.dkv = testing::to_host(dkv.t);
  return r;
}

// max |actual - expected| / scale; infinite for a NaN.
double error_over(const Tensor& actual, const Tensor& expected, double scale) {
  const std::vector<double> a = testing::values(actual), e = testing::values(expected);
  double worst = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    const double diff = std::fabs(a[i] - e[i]);
    if (std::isnan(diff)) return INFINITY;
    worst = std::max(worst, diff);
  }
  return worst / scale;
}

double largest(const Tensor& t) {
  double m = 0;
  for (const double x : testing::values(t)) m = std::max(m, std::fabs(x));
  return m;
}

// kv (1, T, KV): the key and value columns of qkv (1, T, W).
OwnedTensor key_values(const Case& c, const Tensor& qkv) {
  OwnedTensor kv = testing::zeros(qkv.dtype, {1, c.T(), c.KV()});
  const size_t e = dtype_size(qkv.dtype);
  for (int64_t t = 0; t < c.T(); ++t)
    std::memcpy(static_cast<char*>(kv.t.data) + t * c.KV() * e,
                static_cast<const char*>(qkv.data) + (t * c.W() + c.A()) * e, c.KV() * e);
  return kv;
}

class CudnnAttentionBlock : public ::testing::TestWithParam<Case> {};

// The reference is the CPU's blocks, which compute in f32 from the widened bf16 inputs
// (kernels/cpu/attention_block.cpp). The per-row GPU kernels do the same sums in another order:
// f32 rounding, 1e-4 of the largest element as the test above.
//
// cuDNN's blocks round where the reference does not (kernels/attention_block.h):
// - P before P.v and dS before its products, the roundings of the whole sequence's bf16
//   attention. Their size is measured here: the CPU's whole-sequence bf16 attention
//   (kernels/cpu/attention.cpp rounds at those points, and out and dqkv once when stored)
//   against its f32 run on the widened inputs. As in kernels/cuda/attention_test.cpp, rounding
//   at the same points but from f32 values that differ in their last bits can land on the
//   neighbouring bf16 value, so cuDNN's share of this error is at most twice the CPU's.
// - Each block's own out_b, dq, dk, dv, rounded to bf16 once: at most 2^-9 of the element.
//   out merges the blocks' out_b with weights e^(lse_b - lse) that sum to 1, and every out_b
//   row is a convex combination of v rows: at most 2^-9 max|v| in all (max|v| is taken over k
//   and v here, which only widens the bound). dq and dkv add up to
//   `chunks` shares per element: at most chunks x 2^-9 x the largest share.
// - f32 summation orders: 1e-5 (out, lse) and 3e-5 (dq, dkv) of the largest element, the f32
//   bounds of kernels/cuda/attention_test.cpp. lse is f32 from the exact scores in both.
// Each bound is a worst case; the measured errors are printed. A wrong mask, scale, layout,
// head grouping or merge gives errors of order 1.
TEST_P(CudnnAttentionBlock, MatchesThePerRowKernelsAndTheCpuWithinItsRounding) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  const AttentionHeads heads(c.NH, c.NKV);
  const OwnedTensor qkv = testing::random_storage(DType::bf16, {1, c.T(), c.W()}, 81);
  const OwnedTensor dout = testing::random_storage(DType::bf16, {1, c.T(), c.A()}, 82);
  const OwnedTensor kv = key_values(c, qkv.t);
  {  // cuDNN must take every block of these shapes: a refusal would leave ring attention on the slow kernels.
    const OwnedTensor q_on = testing::copy_to(qkv.t, Device::cuda), kv_on = testing::copy_to(kv.t, Device::cuda);
    const Tensor q = chunk_rows(q_on.t, 0, c.chunk), k = chunk_rows(kv_on.t, 0, c.chunk);
    for (const BlockMask mask : {BlockMask::causal, BlockMask::full})
      for (const bool backward : {false, true})
        ASSERT_EQ(cuda::cudnn_attention_block_refusal(q, k, heads, mask, backward, {q.data, k.data}), "")
            << (mask == BlockMask::causal ? "causal " : "full ") << (backward ? "backward" : "forward");
  }

  const Blocks cpu = run_blocks(c, qkv.t, kv.t, dout.t, Device::cpu, Kernels::dispatched);
  const Blocks per_row = run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::per_row);
  const Blocks cudnn = run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::dispatched);

  const double out_scale = largest(cpu.out.t), lse_scale = largest(cpu.lse.t);
  const double grad_scale = std::max(largest(cpu.dq.t), largest(cpu.dkv.t));
  EXPECT_LT(error_over(per_row.out.t, cpu.out.t, out_scale), 1e-4);
  EXPECT_LT(error_over(per_row.lse.t, cpu.lse.t, lse_scale), 1e-4);
  EXPECT_LT(error_over(per_row.dq.t, cpu.dq.t, grad_scale), 1e-4);
  EXPECT_LT(error_over(per_row.dkv.t, cpu.dkv.t, grad_scale), 1e-4);

  // The CPU's whole-sequence bf16 attention against its f32 run: the size of the P and dS roundings.
  const auto whole = [&](const Tensor& q, const Tensor& d) {
    const DType dtype = q.dtype;
    OwnedTensor out = testing::zeros(dtype, {1, c.T(), c.A()}), lse = testing::zeros(DType::f32, {1, c.NH, c.T()}),
                dqkv = testing::zeros(dtype, q.shape);
    attention_forward(out.t, lse.t, q, heads);
    attention_backward(dqkv.t, d, q, out.t, lse.t, heads);
    return std::pair{std::move(out), std::move(dqkv)};
  };
  const auto [out16, dqkv16] = whole(qkv.t, dout.t);
  const auto [out32, dqkv32] = whole(testing::widened(qkv.t).t, testing::widened(dout.t).t);
  const double cpu_out = testing::max_error(testing::widened(out16.t).t, out32.t);
  const double cpu_dqkv = testing::max_error(testing::widened(dqkv16.t).t, dqkv32.t);

  constexpr double kHalfUlp = 1.0 / 512;  // bf16's 8 significand bits: a rounding is within 2^-9 of the value
  const double out_bound = 2 * cpu_out + kHalfUlp * largest(kv.t) / out_scale + 1e-5;
  const double grad_bound = 2 * cpu_dqkv + c.chunks * kHalfUlp * cpu.largest_share / grad_scale + 3e-5;
  const double out_error = error_over(cudnn.out.t, cpu.out.t, out_scale);
  const double dq_error = error_over(cudnn.dq.t, cpu.dq.t, grad_scale);
  const double dkv_error = error_over(cudnn.dkv.t, cpu.dkv.t, grad_scale);
  EXPECT_LT(out_error, out_bound);
  EXPECT_LT(error_over(cudnn.lse.t, cpu.lse.t, lse_scale), 1e-5);
  EXPECT_LT(dq_error, grad_bound);
  EXPECT_LT(dkv_error, grad_bound);
  // Against the per-row kernels directly: both bounds together (each is held to the CPU's).
  EXPECT_LT(error_over(cudnn.out.t, per_row.out.t, out_scale), out_bound + 1e-4);
  EXPECT_LT(error_over(cudnn.dq.t, per_row.dq.t, grad_scale), grad_bound + 1e-4);
  EXPECT_LT(error_over(cudnn.dkv.t, per_row.dkv.t, grad_scale), grad_bound + 1e-4);
  std::printf("%s: cuDNN blocks against the CPU's: out %.3g (bound %.3g), dq %.3g dkv %.3g (bound %.3g); the CPU's "
              "whole bf16 attention: out %.3g dqkv %.3g (of the largest element)\n",
              c.name, out_error, out_bound, dq_error, dkv_error, grad_bound, cpu_out, cpu_dqkv);
}

// Chunk lengths off cuDNN's 64- and 128-row tiles (37, 40, 48), head sizes 64 and 128, grouped
// and multi-query heads, and two to four chunks: up to ten blocks, four merged into a chunk.
INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionBlock,
                         ::testing::Values(Case{"mha_two_chunks", 2, 64, 4, 4, 64},
                                           Case{"gqa_three_chunks", 3, 48, 6, 2, 64},
                                           Case{"head_128_gqa", 2, 40, 4, 2, 128},
                                           Case{"mqa_four_chunks", 4, 37, 4, 1, 64}),
                         [](const auto& info) { return std::string(info.param.name); });

void expect_same_bits(const Blocks& a, const Blocks& b) {
  EXPECT_TRUE(testing::same_bits(a.out.t, b.out.t));
  EXPECT_TRUE(testing::same_bits(a.lse.t, b.lse.t));
  EXPECT_TRUE(testing::same_bits(a.dq.t, b.dq.t));
  EXPECT_TRUE(testing::same_bits(a.dkv.t, b.dkv.t));
}

// Two runs of cuDNN's blocks give the same bits: its deterministic backward, and merges and adds
// of one thread per element.
TEST(CudnnAttentionBlockDeterminism, SameBitsAcrossRuns) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c{"gqa", 3, 48, 6, 2, 64};
  const OwnedTensor qkv = testing::random_storage(DType::bf16, {1, c.T(), c.W()}, 83);
  const OwnedTensor dout = testing::random_storage(DType::bf16, {1, c.T(), c.A()}, 84);
  const OwnedTensor kv = key_values(c, qkv.t);
  expect_same_bits(run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::dispatched),
                   run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::dispatched));
}

// What cuDNN cannot express is refused, naming why, before anything touches a GPU (these run
// everywhere).
TEST(CudnnAttentionBlock, RefusesWhatItCannotExpressAndSaysWhy) {
  const auto refusal = [](DType dtype, AttentionHeads heads, int HS, int keys) {
    const OwnedTensor q = testing::zeros(dtype, {1, 8, (heads.n_head + 2 * heads.n_kv_head) * HS});
    const OwnedTensor kv = testing::zeros(dtype, {1, keys, 2 * heads.n_kv_head * HS});
    return cuda::cudnn_attention_block_refusal(q.t, kv.t, heads, BlockMask::full, false, {q.t.data, kv.t.data});
  };
  EXPECT_NE(refusal(DType::f32, AttentionHeads(4, 2), 64, 8).find("takes bf16 and f16, not f32"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, AttentionHeads(2, 2, 3, 2), 64, 8).find("tensor-parallel rank's query heads"),
            std::string::npos);
  EXPECT_NE(refusal(DType::bf16, AttentionHeads(2, 1), 20, 8).find("head size 20"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, AttentionHeads(2, 1), 64, 0).find("without keys"), std::string::npos);
}

// A bf16 shape cuDNN refuses (head size 20) runs the per-row kernels through the public ops: the
// same bits, and the choice is named.
TEST(CudnnAttentionBlock, RefusedShapesRunOnThePerRowKernels) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c{"head_20", 2, 24, 4, 2, 20};
  const OwnedTensor qkv = testing::random_storage(DType::bf16, {1, c.T(), c.W()}, 85);
  const OwnedTensor dout = testing::random_storage(DType::bf16, {1, c.T(), c.A()}, 86);
  const OwnedTensor kv = key_values(c, qkv.t);
  expect_same_bits(run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::dispatched),
                   run_blocks(c, qkv.t, kv.t, dout.t, Device::cuda, Kernels::per_row));
  const std::string named = cuda::attention_block_kernels(chunk_rows(qkv.t, 0, c.chunk), chunk_rows(kv.t, 0, c.chunk),
                                                          AttentionHeads(c.NH, c.NKV), BlockMask::full);
  EXPECT_NE(named.find("dtrain's per-row kernels (cuDNN: head size 20"), std::string::npos) << named;
}

}  // namespace
}  // namespace dt::kernels
