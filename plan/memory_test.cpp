// plan_memory, the prediction a GPU run is checked against before it allocates, and what a CPU
// run of the same shape really allocates, tag by tag, against the sizes worked out by hand from
// the model's shape (tests/gpt2_sizes.h): the plan and the constructors share their sizing code,
// so only an expectation from outside both can catch a size they both get wrong.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "model/transformer.h"
#include "optim/adamw.h"
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

}  // namespace
}  // namespace dt
