#include "parallel/zero_policy.h"

#include <gtest/gtest.h>

namespace dt {
namespace {

using Gather = ZeroPolicy::Gather;
using Reduction = ZeroPolicy::Reduction;

// Each stage as the ZeRO paper and DeepSpeed describe it: what is sharded, how the gradients are
// summed and when, when the weights are gathered, and whether a pipeline schedule can run it.
TEST(ZeroPolicy, EachStageShardsOneThingMore) {
  struct Expected {
    bool optimizer_state, gradients, weights;
    Reduction reduction;
    bool every_micro_batch;
    Gather gather;
    bool pipeline;
  };
  const Expected expected[] = {
      {false, false, false, Reduction::all_reduce_buckets, false, Gather::never, true},
      {true, false, false, Reduction::reduce_scatter_units, false, Gather::after_update, true},
      {true, true, false, Reduction::reduce_scatter_units, true, Gather::after_update, false},
      {true, true, true, Reduction::reduce_scatter_units, true, Gather::before_each_pass, false},
  };
  for (int stage = 0; stage <= ZeroPolicy::kHighestStage; ++stage) {
    const ZeroPolicy z = ZeroPolicy::of(stage, DType::f32, 4);
    const Expected& e = expected[stage];
    EXPECT_EQ(z.shards_optimizer_state, e.optimizer_state) << stage;
    EXPECT_EQ(z.shards_gradients, e.gradients) << stage;
    EXPECT_EQ(z.shards_weights, e.weights) << stage;
    EXPECT_EQ(z.reduction(), e.reduction) << stage;
    EXPECT_EQ(z.reduces_every_micro_batch(), e.every_micro_batch) << stage;
    EXPECT_EQ(z.gathers_weights(), e.gather) << stage;
    EXPECT_EQ(z.allows_pipeline(), e.pipeline) << stage;
    EXPECT_EQ(z.pipeline_conflict().empty(), e.pipeline) << stage;
  }
  EXPECT_FALSE(ZeroPolicy::exists(-1));
  EXPECT_FALSE(ZeroPolicy::exists(ZeroPolicy::kHighestStage + 1));
  EXPECT_EQ(ZeroPolicy::stages_allowing_pipeline(), "0 or 1");
  EXPECT_EQ(ZeroPolicy::of(3, DType::bf16, 2).pipeline_conflict(),
            "ZeRO stage 3 reduces and gathers during every micro-batch's pass, which a pipeline schedule "
            "interleaves across micro-batches");
}

// Stage 0 over one rank reduces nothing; the sharded stages reduce-scatter even there, into the
// shard the update reads.
TEST(ZeroPolicy, ReducesOverSeveralRanksOrIntoTheShard) {
  EXPECT_FALSE(ZeroPolicy::of(0, DType::f32, 1).reduces());
  EXPECT_TRUE(ZeroPolicy::of(0, DType::f32, 2).reduces());
  EXPECT_TRUE(ZeroPolicy::of(1, DType::f32, 1).reduces());
}

// The f32 parameters are sharded where the weights are, and with 16-bit weights (the master
// weights, optimizer state) at every stage above 0; the buffers and the storage follow.
TEST(ZeroPolicy, ShardBuffersAndStorage) {
  using Role = ZeroPolicy::ShardRole;
  const auto roles = [](const ZeroPolicy& z) {
    std::vector<std::tuple<Role, MemTag, DType>> out;
    for (const ZeroPolicy::ShardBuffer& b : z.shard_buffers()) out.emplace_back(b.role, b.tag, b.dtype);
    return out;
  };
  using V = std::vector<std::tuple<Role, MemTag, DType>>;
  const auto grads = std::tuple(Role::gradients, MemTag::gradients, DType::f32);
  EXPECT_EQ(roles(ZeroPolicy::of(0, DType::bf16, 2)), V{});
  EXPECT_EQ(roles(ZeroPolicy::of(2, DType::f32, 2)), V{grads});
  EXPECT_EQ(roles(ZeroPolicy::of(1, DType::bf16, 2)),
            (V{grads, {Role::f32_parameters, MemTag::optimizer_state, DType::f32}}));
  EXPECT_EQ(roles(ZeroPolicy::of(3, DType::f32, 2)), (V{grads, {Role::f32_parameters, MemTag::parameters, DType::f32}}));
  EXPECT_EQ(roles(ZeroPolicy::of(3, DType::bf16, 2)),
            (V{grads, {Role::f32_parameters, MemTag::optimizer_state, DType::f32},
               {Role::weights, MemTag::parameters, DType::bf16}}));

  const ParameterStorage whole = ZeroPolicy::of(0, DType::bf16, 4).storage();
  EXPECT_EQ(whole.unit_multiple, kParamAlignment);
  EXPECT_TRUE(whole.master_weights);
  const ParameterStorage two = ZeroPolicy::of(2, DType::bf16, 4).storage();
  EXPECT_EQ(two.unit_multiple, 4 * kParamAlignment);
  EXPECT_EQ(two.grads, Storage::per_unit);
  EXPECT_EQ(two.weights, Storage::whole);
  EXPECT_FALSE(two.master_weights);
  EXPECT_EQ(ZeroPolicy::of(3, DType::bf16, 4).storage().weights, Storage::per_unit);
}

}  // namespace
}  // namespace dt
