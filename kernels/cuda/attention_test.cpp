// attention_forward, attention_backward and attention_decode on the GPU against the CPU ops, on
// the same inputs, through the public ops (so the device dispatch is exercised too). Outputs
// start as NaN on the device: an element the GPU fails to set shows as an infinite error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/cuda/cudnn_attention.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;
using testing::random_values;
using testing::values;

struct Case {
  const char* name;
  int B, T, NH, NKV, HS;
  double input_std = 1;  // std of q, k, v; larger makes the softmax peakier
  // A tensor-parallel rank's heads (kernels/attention.h) when group > 0, else a whole model's.
  int group = 0, phase = 0;
  int qkv_width() const { return (NH + 2 * NKV) * HS; }
  AttentionHeads heads() const { return group > 0 ? AttentionHeads(NH, NKV, group, phase) : AttentionHeads(NH, NKV); }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " B=" << c.B << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV << " HS=" << c.HS;
}

// A tensor on `device` whose every byte is 0xff: NaN in f32, f64, bf16 and f16.
OwnedTensor nan_filled(DType dtype, Shape shape, Device device) {
  OwnedTensor host = testing::zeros(dtype, shape);
  std::memset(host.t.data, 0xff, host.t.bytes());
  if (device == Device::cpu) return host;
  return testing::copy_to(host.t, device);
}

// max_i |actual_i - expected_i| / max_i |expected_i|; infinite if actual has a NaN.
double normalized_error(const Tensor& actual, const Tensor& expected) {
  const std::vector<double> a = values(actual), e = values(expected);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    const double diff = std::fabs(a[i] - e[i]);
    if (std::isnan(diff)) return INFINITY;
    worst = std::max(worst, diff);
    scale = std::max(scale, std::fabs(e[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// out, lse and dqkv of one forward and backward, copied to the host.
struct AttentionResult {
  OwnedTensor out, lse, dqkv;
};

// Which GPU kernels run: those the public ops dispatch to, our SIMT ones, or cuDNN's.
enum class Kernels { dispatched, simt, cudnn };

AttentionResult run_attention(const Case& c, const Tensor& qkv, const Tensor& dout, Device device,
                              Kernels kernels = Kernels::dispatched) {
  const OwnedTensor qkv_on = testing::copy_to(qkv, device), dout_on = testing::copy_to(dout, device);
  const DType stats = qkv.dtype == DType::f64 ? DType::f64 : DType::f32;
  const OwnedTensor out = nan_filled(qkv.dtype, {c.B, c.T, c.NH * c.HS}, device);
  const OwnedTensor lse = nan_filled(stats, {c.B, c.NH, c.T}, device);
  const OwnedTensor dqkv = nan_filled(qkv.dtype, qkv.shape, device);
  const Tensor q = qkv_on.t, d = dout_on.t;
  switch (kernels) {
    case Kernels::dispatched:
      attention_forward(out.t, lse.t, q, c.heads());
      attention_backward(dqkv.t, d, q, out.t, lse.t, c.heads());
      break;
    case Kernels::simt:
      cuda::simt_attention_forward(out.t, lse.t, q, c.heads());
      cuda::simt_attention_backward(dqkv.t, d, q, out.t, lse.t, c.heads());
      break;
    case Kernels::cudnn:
      cuda::cudnn_attention_forward(out.t, lse.t, q, c.heads());
      cuda::cudnn_attention_backward(dqkv.t, d, q, out.t, lse.t, c.heads());
      break;
  }
  return {testing::copy_to(out.t, Device::cpu), testing::copy_to(lse.t, Device::cpu),
          testing::copy_to(dqkv.t, Device::cpu)};
}

Shape qkv_shape(const Case& c) { return {c.B, c.T, c.qkv_width()}; }
Shape out_shape(const Case& c) { return {c.B, c.T, c.NH * c.HS}; }

class CudaAttention : public ::testing::TestWithParam<Case> {};

// f32: both ops compute the same f32 sums (scores, online softmax, the four products, D) in
// different orders, and exp differs (CUDA's expf against the CPU's vec_exp, each within 2 ulp).
// Each is within 1e-6 (out, lse) and 3e-6 (dqkv) of the f64 truth on the CPU's cases
// (kernels/attention_test.cpp), so they differ by about twice that; the bounds, 1e-5 and 3e-5
// of the largest element, leave a 5x margin. A wrong mask, scale, tile edge or head mapping
// gives errors of order 1.
TEST_P(CudaAttention, F32MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  const OwnedTensor qkv = testing::random_normal(DType::f32, qkv_shape(c), 61, c.input_std);
  const OwnedTensor dout = testing::random_normal(DType::f32, out_shape(c), 62);
  const AttentionResult cpu = run_attention(c, qkv.t, dout.t, Device::cpu);
  const AttentionResult gpu = run_attention(c, qkv.t, dout.t, Device::cuda);
  EXPECT_LT(normalized_error(gpu.out.t, cpu.out.t), 1e-5);
  EXPECT_LT(normalized_error(gpu.lse.t, cpu.lse.t), 1e-5);
  EXPECT_LT(normalized_error(gpu.dqkv.t, cpu.dqkv.t), 3e-5);
}

// f64 (the finite-difference tests' dtype): the same sums in f64, ~1e-16 per operation over at
// most a few hundred terms; 1e-12 leaves a wide margin and still catches any f32 step.
TEST_P(CudaAttention, F64MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  const OwnedTensor qkv = testing::random_normal(DType::f64, qkv_shape(c), 63, c.input_std);
  const OwnedTensor dout = testing::random_normal(DType::f64, out_shape(c), 64);
  const AttentionResult cpu = run_attention(c, qkv.t, dout.t, Device::cpu);
  const AttentionResult gpu = run_attention(c, qkv.t, dout.t, Device::cuda);
  EXPECT_LT(normalized_error(gpu.out.t, cpu.out.t), 1e-12);
  EXPECT_LT(normalized_error(gpu.lse.t, cpu.lse.t), 1e-12);
  EXPECT_LT(normalized_error(gpu.dqkv.t, cpu.dqkv.t), 1e-12);
}

// bf16 and f16: both ops round at the same points (P before P.V and P^T.dout, dS before dS.K and
// dS^T.Q, out and dqkv when stored; kernels/attention.h), but the f32 values they round differ in
// their last bits, so single roundings can land on neighbouring 16-bit values. Measured against
// the f32 CPU op on the same (16-bit) inputs, the GPU's error must therefore be of the size of
// the CPU's own 16-bit error, whose bound kernels/attention_test.cpp derives and checks (there:
// bf16 out <= 3.2e-3, dqkv <= 8.5e-3 of the largest element; f16 4e-4 and 8e-4): at most twice
// it, plus the f32 bound above for the difference in summation order. Rounding anywhere else
// (an accumulator, the scores) gives errors many times the CPU's. lse is f32 from the exact
// inputs in both: the f32 bound.
//
// Both GPU kernels are held to it: our SIMT ones, and cuDNN's fused ones on every case cuDNN
// takes (kernels/cuda/cudnn_attention.h), which must be every whole-model case with a head size
// that is a multiple of 8 up to 128 and more than one position — cuDNN refusing one of those on
// an Ampere or newer GPU would silently leave the model on the slow kernels, so it fails here.
// (cuDNN 9.19 builds no backward for a single position, "s_q = s_kv = 1 is not supported": such
// calls run the SIMT kernels.) cuDNN's flash kernels round P
// and dS to the storage type before their products as ours do; its lse, the natural
// log-sum-exp of the scaled scores, is the quantity ours is, so the f32 bound applies.
TEST_P(CudaAttention, Bf16AndF16WithinTwiceTheCpuRoundingError) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  const bool cudnn_must_take = c.group == 0 && c.HS % 8 == 0 && c.HS <= 128 && c.T > 1;
  for (const DType storage : testing::kStorage16) {
    SCOPED_TRACE(std::string(dtype_name(storage)));
    const OwnedTensor qkv = testing::random_storage(storage, qkv_shape(c), 65, c.input_std);
    const OwnedTensor dout = testing::random_storage(storage, out_shape(c), 66);
    const AttentionResult exact =
        run_attention(c, testing::widened(qkv.t).t, testing::widened(dout.t).t, Device::cpu);
    const AttentionResult cpu = run_attention(c, qkv.t, dout.t, Device::cpu);
    const double cpu_out = normalized_error(cpu.out.t, exact.out.t);
    const double cpu_dqkv = normalized_error(cpu.dqkv.t, exact.dqkv.t);
    std::vector<std::pair<const char*, Kernels>> kernels{{"simt", Kernels::simt}};
    if (cudnn_must_take) {
      const OwnedTensor on_gpu = testing::copy_to(qkv.t, Device::cuda);
      for (const bool backward : {false, true})
        ASSERT_EQ(cuda::cudnn_attention_refusal(on_gpu.t, c.heads(), backward, {on_gpu.t.data}), "")
            << (backward ? "backward" : "forward");
      kernels.emplace_back("cudnn", Kernels::cudnn);
    }
    for (const auto& [name, which] : kernels) {
      SCOPED_TRACE(name);
      const AttentionResult gpu = run_attention(c, qkv.t, dout.t, Device::cuda, which);
      const double gpu_out = normalized_error(gpu.out.t, exact.out.t);
      const double gpu_dqkv = normalized_error(gpu.dqkv.t, exact.dqkv.t);
      EXPECT_LE(gpu_out, 2 * cpu_out + 1e-5);
      EXPECT_LE(gpu_dqkv, 2 * cpu_dqkv + 3e-5);
      EXPECT_LT(normalized_error(gpu.lse.t, exact.lse.t), 1e-5);
      std::printf("%s %s %s: out error gpu %.3g cpu %.3g; dqkv error gpu %.3g cpu %.3g (of the largest element)\n",
                  std::string(dtype_name(storage)).c_str(), c.name, name, gpu_out, cpu_out, gpu_dqkv, cpu_dqkv);
    }
  }
}

// Tiles are 16 to 64 rows and keys (kernels/cuda/attention.cu), so T = 37, 70, 90, 100, 150 end
// mid-tile; HS = 13 and 20 take the element-by-element tile loads (20 only in 16-bit storage),
// the others the 16-byte ones; HS = 80 runs inside the 128 bucket.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(Case{"mha", 2, 37, 4, 4, 64}, Case{"gqa_6_over_2", 2, 100, 6, 2, 64},
                      Case{"mqa", 1, 150, 4, 1, 128}, Case{"head_80_gqa", 1, 70, 6, 2, 80},
                      Case{"head_256", 1, 90, 2, 1, 256}, Case{"head_256_mha", 2, 33, 2, 2, 256},
                      Case{"odd_head", 2, 33, 3, 1, 13}, Case{"head_20", 1, 65, 2, 1, 20},
                      Case{"one_position", 3, 1, 2, 1, 64}, Case{"exact_tiles", 1, 256, 2, 2, 64},
                      // Scores of std ~9: the running max moves between key tiles.
                      Case{"peaked", 2, 140, 3, 1, 32, 3.0},
                      // Tensor-parallel ranks' heads (as in kernels/attention_test.cpp).
                      Case{"tp_rank_two_groups", 2, 70, 2, 2, 64, 1.0, 3, 2},
                      Case{"tp_rank_uneven_groups", 1, 130, 3, 2, 64, 1.0, 4, 2}),
    [](const auto& info) { return std::string(info.param.name); });

// No atomics in ours, cuDNN's deterministic backward: two runs give the same bits, in f32 and in
// bf16, with each kernel.
TEST(CudaAttentionDeterminism, SameBitsAcrossRuns) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c{"gqa", 2, 150, 6, 2, 64};
  for (const auto& [dtype, which] : {std::pair{DType::f32, Kernels::simt}, std::pair{DType::bf16, Kernels::simt},
                                     std::pair{DType::bf16, Kernels::cudnn}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + (which == Kernels::cudnn ? " cudnn" : " simt"));
    const OwnedTensor qkv = random_values(dtype, qkv_shape(c), 67);
    const OwnedTensor dout = random_values(dtype, out_shape(c), 68);
    const AttentionResult first = run_attention(c, qkv.t, dout.t, Device::cuda, which);
    const AttentionResult second = run_attention(c, qkv.t, dout.t, Device::cuda, which);
    EXPECT_EQ(std::memcmp(first.out.t.data, second.out.t.data, first.out.t.bytes()), 0);
    EXPECT_EQ(std::memcmp(first.lse.t.data, second.lse.t.data, first.lse.t.bytes()), 0);
    EXPECT_EQ(std::memcmp(first.dqkv.t.data, second.dqkv.t.data, first.dqkv.t.bytes()), 0);
  }
}

// What cuDNN's grouping, dtypes and head sizes cannot express is refused, naming why, before
// anything touches a GPU (these run everywhere); the ops then run the SIMT kernels.
TEST(CudnnAttention, RefusesWhatItCannotExpressAndSaysWhy) {
  const auto refusal = [](DType dtype, const Case& c) {
    const OwnedTensor qkv = testing::zeros(dtype, qkv_shape(c));
    return cuda::cudnn_attention_refusal(qkv.t, c.heads(), /*backward=*/false, {qkv.t.data});
  };
  EXPECT_NE(refusal(DType::f32, {"f32", 1, 8, 4, 2, 64}).find("takes bf16 and f16, not f32"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, {"tp", 1, 8, 2, 2, 64, 1.0, 3, 2}).find("tensor-parallel rank's query heads"),
            std::string::npos);
  EXPECT_NE(refusal(DType::bf16, {"odd", 1, 8, 2, 1, 13}).find("head size 13: cuDNN's attention takes multiples of 8"),
            std::string::npos);
  EXPECT_NE(refusal(DType::f16, {"wide", 1, 8, 2, 1, 256}).find("head size 256"), std::string::npos);
}

// On a GPU the model's shapes run on cuDNN, and the ops say which kernels they use.
TEST(CudnnAttention, TheModelsShapesRunOnCudnnAndTheChoiceIsNamed) {
  DT_SKIP_WITHOUT_CUDA();
  const Case gpt2{"gpt2_124m", 1, 1024, 12, 12, 64}, llama{"llama_1b", 1, 2048, 32, 8, 64};
  for (const Case& c : {gpt2, llama}) {
    const OwnedTensor qkv = testing::copy_to(testing::zeros(DType::bf16, qkv_shape(c)).t, Device::cuda);
    EXPECT_EQ(cuda::attention_kernels(qkv.t, c.heads()).find("cuDNN 9."), 0u) << cuda::attention_kernels(qkv.t, c.heads());
  }
  const Case odd{"odd", 1, 8, 2, 1, 13};
  const OwnedTensor qkv = testing::copy_to(testing::zeros(DType::bf16, qkv_shape(odd)).t, Device::cuda);
  EXPECT_NE(cuda::attention_kernels(qkv.t, odd.heads()).find("dtrain's SIMT flash attention (cuDNN: head size 13"),
            std::string::npos)
      << cuda::attention_kernels(qkv.t, odd.heads());
}

// A head size above 256 stops with a message naming the op, the head size and the supported ones.
TEST(CudaAttentionArguments, HeadSizeAbove256IsANamedError) {
  DT_SKIP_WITHOUT_CUDA();
  const Case c{"head_264", 1, 4, 2, 1, 264};
  const OwnedTensor qkv = nan_filled(DType::f32, qkv_shape(c), Device::cuda);
  const OwnedTensor out = nan_filled(DType::f32, out_shape(c), Device::cuda);
  const OwnedTensor dout = nan_filled(DType::f32, out_shape(c), Device::cuda);
  const OwnedTensor lse = nan_filled(DType::f32, {c.B, c.NH, c.T}, Device::cuda);
  const OwnedTensor dqkv = nan_filled(DType::f32, qkv_shape(c), Device::cuda);
  const OwnedTensor q = nan_filled(DType::f32, {1, c.NH * c.HS}, Device::cuda);
  const OwnedTensor kv = nan_filled(DType::f32, {c.T, 2 * c.NKV * c.HS}, Device::cuda);
  const OwnedTensor decode_out = nan_filled(DType::f32, {1, c.NH * c.HS}, Device::cuda);
  const std::pair<std::string, std::string> errors[] = {
      {"attention_forward", testing::error_message([&] { attention_forward(out.t, lse.t, qkv.t, {c.NH, c.NKV}); })},
      {"attention_backward", testing::error_message([&] {
         attention_backward(dqkv.t, dout.t, qkv.t, out.t, lse.t, {c.NH, c.NKV});
       })},
      {"attention_decode", testing::error_message([&] { attention_decode(decode_out.t, q.t, kv.t, c.NH, c.NKV); })}};
  for (const auto& [op, message] : errors) {
    EXPECT_NE(message.find(op + ": head size 264"), std::string::npos) << message;
    EXPECT_NE(message.find("1 to 256"), std::string::npos) << message;
  }
}

struct DecodeCase {
  const char* name;
  int M, T, NH, NKV, HS;  // M query rows at the last M of T cached positions
};

void PrintTo(const DecodeCase& c, std::ostream* os) {
  *os << c.name << " M=" << c.M << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV << " HS=" << c.HS;
}

class CudaAttentionDecode : public ::testing::TestWithParam<DecodeCase> {};

// Both compute each row's softmax-weighted sum of at most T value rows; the CPU takes the max
// first and sums once, the GPU keeps an online softmax per warp and combines eight warps, so
// they differ by the rounding of a different order (and exp: expf against vec_exp, 2 ulp each):
// a few ulps of the largest element. f32 bound 1e-5 of the largest element, as for the forward;
// f64 1e-12.
TEST_P(CudaAttentionDecode, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  const DecodeCase c = GetParam();
  for (const DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const OwnedTensor q = testing::random_normal(dtype, {c.M, c.NH * c.HS}, 71);
    const OwnedTensor kv = testing::random_normal(dtype, {c.T, 2 * c.NKV * c.HS}, 72);
    const OwnedTensor cpu = nan_filled(dtype, q.t.shape, Device::cpu);
    attention_decode(cpu.t, q.t, kv.t, c.NH, c.NKV);
    const OwnedTensor q_gpu = testing::copy_to(q.t, Device::cuda), kv_gpu = testing::copy_to(kv.t, Device::cuda);
    const OwnedTensor gpu = nan_filled(dtype, q.t.shape, Device::cuda);
    attention_decode(gpu.t, q_gpu.t, kv_gpu.t, c.NH, c.NKV);
    EXPECT_LT(normalized_error(testing::copy_to(gpu.t, Device::cpu).t, cpu.t), dtype == DType::f32 ? 1e-5 : 1e-12);
  }
}

// T = 1 (fewer keys than warps), 300 (keys spread unevenly over the warps), a whole prompt
// (M = T), a chunk of queries, HS 80 and 256, and HS 13 (a partial last lane slice).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionDecode,
    ::testing::Values(DecodeCase{"first_step", 1, 1, 4, 2, 64}, DecodeCase{"step_gqa", 1, 300, 6, 2, 64},
                      DecodeCase{"prompt_head_80", 37, 37, 4, 4, 80}, DecodeCase{"chunk_mqa", 5, 130, 8, 1, 128},
                      DecodeCase{"head_256", 2, 50, 2, 1, 256}, DecodeCase{"odd_head", 3, 20, 3, 1, 13}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dt::kernels
