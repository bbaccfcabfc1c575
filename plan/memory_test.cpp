// plan_memory, the prediction a GPU run is checked against before it allocates, and what a CPU
// run of the same shape really allocates, tag by tag, against the sizes worked out by hand from
// the model's shape (tests/gpt2_sizes.h): the plan and the constructors share their sizing code,
// so only an expectation from outside both can catch a size they both get wrong.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/data_parallel.h"
#include "plan/memory.h"
#include "tests/gpt2_sizes.h"

namespace dt {
namespace {

TEST(TrainingBytes, AreWhatTheModelsShapeGivesByHand) {
  // gpt2-tiny (model/config.cpp): 997 tokens stored as 1,024 rows, C = 48, 3 heads, 2 blocks,
  // 64 positions. gpt2: no rope table beside the estimate.
  const ModelConfig config = model_preset("gpt2-tiny");
  const testing::Gpt2Shape shape{.layers = 2, .width = 48, .heads = 3, .stored_vocab = 1024, .positions = 64};
  const auto psi = static_cast<size_t>(testing::gpt2_stored_elements(shape));
  ASSERT_EQ(psi, 108'864u);  // the sum written out: 1,024·48 + 64·48 + 2·28,272 + 96
  constexpr int kBatch = 4, kSeqLen = 32;
  for (const DType precision : {DType::f32, DType::bf16})
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const MemoryStats before = memory_stats(Device::cpu);
      Transformer model(config, kBatch, kSeqLen, recompute, precision);
      const AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
      const MemoryStats after = memory_stats(Device::cpu);
      const auto held = [&](MemTag tag) { return after.current(tag) - before.current(tag); };
      const bool sixteen_bit = precision != DType::f32;
      const size_t w = dtype_size(precision);
      // The weights forward reads (f32, or the 16-bit copy); f32 gradients; AdamW's two f32
      // moments, and in 16-bit the f32 master weights, counted with them as the ZeRO paper does.
      const size_t parameters = w * psi, gradients = 4 * psi, optimizer_state = (sixteen_bit ? 12 : 8) * psi;
      const auto activations = static_cast<size_t>(testing::gpt2_saved_activation_bytes(
          shape, kBatch * kSeqLen, static_cast<int64_t>(w), recompute == Recompute::full));
      const auto scratch =
          static_cast<size_t>(testing::gpt2_backward_scratch_bytes(shape, kBatch * kSeqLen, static_cast<int64_t>(w)));
      const std::string what = str(dtype_name(precision), " recompute ", recompute_name(recompute));
      EXPECT_EQ(held(MemTag::parameters), parameters) << what;
      EXPECT_EQ(held(MemTag::gradients), gradients) << what;
      EXPECT_EQ(held(MemTag::optimizer_state), optimizer_state) << what;
      EXPECT_EQ(held(MemTag::activations), activations) << what;
      EXPECT_EQ(held(MemTag::workspace), scratch) << what;
      EXPECT_EQ(after.total_current_bytes - before.total_current_bytes,
                parameters + gradients + optimizer_state + activations + scratch)
          << what << ": a tag not counted above";
      const MemoryPlan plan = plan_memory(config, kBatch, kSeqLen, recompute, precision, 1, 0);
      const auto planned = [&](MemTag tag) { return plan.bytes[static_cast<int>(tag)]; };
      EXPECT_EQ(planned(MemTag::parameters), parameters) << what;
      EXPECT_EQ(planned(MemTag::gradients), gradients) << what;
      EXPECT_EQ(planned(MemTag::optimizer_state), optimizer_state) << what;
      EXPECT_EQ(planned(MemTag::activations), activations) << what;
      EXPECT_EQ(planned(MemTag::workspace), scratch) << what;
      EXPECT_EQ(plan.total(), parameters + gradients + optimizer_state + activations + scratch) << what;
    }
}

// The ZeRO paper's accounting (Rajbhandari et al. 2020, its figure 1): Ψ parameters in mixed
// precision hold 2Ψ bytes of fp16 weights, 2Ψ of fp16 gradients and KΨ = 12Ψ of fp32 master
// weights and Adam's moments; over N ranks stage 1 shards the 12Ψ, stage 2 the gradients too,
// stage 3 everything. For Ψ = 7.5B on 64 ranks that is the published 120, 31.4, 16.6 and 1.9 GB.
// dtrain's bf16 keeps its gradients in f32 (4Ψ, for accumulation over micro-batches) and, at
// stage 1, the reduce-scatter's f32 shard beside them; with those two differences the planner
// must give the paper's formula exactly, tag by tag, for a 7.46B GPT-2 on 64 ranks.
TEST(TrainingBytes, TheZeroPapersModelStateWithFp32Gradients) {
  const auto zero_paper = [](double psi, double ranks, int stage, double gradient_bytes) {
    const double weights = 2 * psi, gradients = gradient_bytes * psi, optimizer = 12 * psi;
    if (stage == 0) return weights + gradients + optimizer;
    if (stage == 1) return weights + gradients + optimizer / ranks;
    if (stage == 2) return weights + (gradients + optimizer) / ranks;
    return (weights + gradients + optimizer) / ranks;
  };
  // Published to a tenth of a GB: the formula must round to them (within 0.05; 1.875 is 1.9).
  const double published[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NEAR(zero_paper(7.5e9, 64, stage, 2) / 1e9, published[stage], 0.05) << "stage " << stage;

  ModelConfig config = model_preset("gpt2-124m");
  config.n_layer = 36, config.d_model = 4096, config.n_head = 32;
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryPlan plan = plan_memory(config, 1, 1024, Recompute::full, DType::bf16, 64, stage);
    // Ψ as the flat buffers hold it: ZeRO pads each unit to 64 equal parts.
    const double psi = static_cast<double>(
        ParameterLayout(config, DataParallel::storage(64, stage).unit_multiple).total_elements());
    const auto tag = [&](MemTag t) { return static_cast<double>(plan.bytes[static_cast<int>(t)]); };
    const double state = tag(MemTag::parameters) + tag(MemTag::gradients) + tag(MemTag::optimizer_state);
    const double reduce_scatter_shard = stage == 1 ? 4 * psi / 64 : 0;
    EXPECT_DOUBLE_EQ(state, zero_paper(psi, 64, stage, 4) + reduce_scatter_shard) << "stage " << stage;
  }
}

}  // namespace
}  // namespace dt
