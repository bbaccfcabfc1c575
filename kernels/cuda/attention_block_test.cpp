// attention_block_forward and attention_block_backward on the GPU against the CPU ops, on the
// same inputs, through the public ops: a diagonal block and a full block merged into it, then
// both blocks' backward shares, in f32 and bf16, for grouped-query heads.
#include <gtest/gtest.h>

#include "kernels/attention_block.h"
#include "tests/cuda_testing.h"
#include "tests/gradcheck.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;

TEST(CudaAttentionBlock, MergedBlocksAndTheirGradientsMatchTheCpu) {
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
    // Run on `device`: returns out, lse, dq, dkv0, dkv1 on the host.
    const auto run = [&](Device device) {
      const auto on = [&](const OwnedTensor& t) { return testing::copy_to(t.t, device); };
      const OwnedTensor gq = on(q), g0 = on(kv0), g1 = on(kv1), gdout = on(dout);
      const OwnedTensor out = testing::copy_to(testing::zeros(acc, {B, T, NH * HS}).t, device);
      const OwnedTensor lse = testing::copy_to(testing::zeros(acc, {B, NH, T}).t, device);
      attention_block_forward(out.t, lse.t, gq.t, g1.t, heads, BlockMask::causal, true);
      attention_block_forward(out.t, lse.t, gq.t, g0.t, heads, BlockMask::full, false);
      // The backward reads out in the storage type; any values serve to compare the devices.
      const OwnedTensor out_s = on(testing::random_values(dtype, {B, T, NH * HS}, 5));
      const OwnedTensor dq = testing::copy_to(testing::zeros(acc, {B, T, NH * HS}).t, device);
      const OwnedTensor d0 = testing::copy_to(testing::zeros(acc, kv0.t.shape).t, device);
      const OwnedTensor d1 = testing::copy_to(testing::zeros(acc, kv1.t.shape).t, device);
      attention_block_backward(dq.t, d1.t, gdout.t, gq.t, g1.t, out_s.t, lse.t, heads, BlockMask::causal);
      attention_block_backward(dq.t, d0.t, gdout.t, gq.t, g0.t, out_s.t, lse.t, heads, BlockMask::full);
      std::vector<OwnedTensor> results;
      for (const OwnedTensor* t : {&out, &lse, &dq, &d0, &d1}) results.push_back(testing::to_host(t->t));
      return results;
    };
    const std::vector<OwnedTensor> cpu = run(Device::cpu), gpu = run(Device::cuda);
    // The same math in another order of threads' sums: f32 rounding.
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(testing::max_error(gpu[i].t, cpu[i].t), 1e-4) << i;
  }
}

}  // namespace
}  // namespace dt::kernels
