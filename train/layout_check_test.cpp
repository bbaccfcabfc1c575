// What `dtrain check` trains and how it reads a comparison: the small model keeps what the layout
// splits (heads, key/value heads, experts, the tied output) at 8 dimensions a head, with a block
// more than a pipeline's stages; the first divergence is the first step with anything past its
// bound, listing the loss, the norm, then the tensors in the model's order.
#include "train/layout_check.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt {
namespace {

RunConfig llama_run(int tp, int pp, int virtual_stages) {
  RunConfig c;
  c.model = model_preset("llama3.2-1b");
  c.data.seq_len = 256;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 8;
  c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.pp_virtual = virtual_stages;
  if (virtual_stages > 1) c.parallel.pp_schedule = "interleaved";
  return c;
}

TEST(LayoutCheck, TheSmallModelKeepsWhatTheLayoutSplits) {
  const RunConfig config = llama_run(2, 2, 2);
  const RunConfig small = layout_check_config(config, CheckedModel::small);
  const ModelConfig &m = small.model, &configured = config.model;
  EXPECT_EQ(m.family, configured.family);
  EXPECT_EQ(m.n_head, configured.n_head);
  EXPECT_EQ(m.kv_heads(), configured.kv_heads());
  EXPECT_EQ(m.tied_embeddings, configured.tied_embeddings);
  EXPECT_EQ(m.head_size(), 8);
  EXPECT_EQ(m.n_layer, 2 * 2 + 1);  // the interleaved schedule's 4 stages, and one more
  EXPECT_EQ(m.vocab_size, 997);
  // The MLP as wide against d_model as the configured one's (8192 / 2048), in multiples of 8.
  EXPECT_EQ(m.ffn_hidden(), 4 * m.d_model);
  EXPECT_EQ(small.data.seq_len, 16);
  EXPECT_EQ(small.accumulation_steps(), config.accumulation_steps());
  EXPECT_EQ(small.init.seed, kEquivalenceSeed);
  // The configured model as it is.
  EXPECT_EQ(layout_check_config(config, CheckedModel::configured, 3).model.d_model, configured.d_model);
}

TEST(LayoutCheck, TheSmallModelKeepsTheExpertsAndContextParallelismsLongerSequences) {
  RunConfig config = llama_run(1, 1, 1);
  config.model = model_preset("olmoe-1b-7b");
  config.parallel.dp = 2, config.parallel.ep = 2, config.parallel.cp = 2;
  config.train.global_batch_size = 2;
  const RunConfig small = layout_check_config(config, CheckedModel::small);
  EXPECT_EQ(small.model.moe.experts, config.model.moe.experts);
  EXPECT_EQ(small.model.moe.routing.top_k, config.model.moe.routing.top_k);
  EXPECT_EQ(small.model.qk_norm, config.model.qk_norm);
  EXPECT_EQ(small.data.seq_len, 48);  // 24 tokens on each cp rank
  EXPECT_TRUE(run_config_valid(small));
}

TEST(LayoutCheck, TheFirstDivergenceIsTheFirstStepPastABoundWithEverythingPastItThere) {
  LayoutCheck check;
  check.bounds = equivalence_bounds(DType::f32, Float8Scaling::none, 1);
  const auto step = [](double loss, double norm, std::vector<TensorDifference> parameters) {
    return StepComparison{.loss = loss, .reference_loss = 1, .grad_norm = norm, .reference_grad_norm = 1,
                          .parameters = std::move(parameters)};
  };
  check.steps = {step(1, 1, {{"wte", 1e-6}, {"h.0.attn.qkv.weight", 0}}),
                 step(1, 1 + 1e-6, {{"wte", 1e-6}, {"h.0.attn.qkv.weight", 1e-3}, {"lm_head", 5e-4}}),
                 step(1.1, 1.1, {{"wte", 1}})};
  const LayoutCheck first_only{.bounds = check.bounds, .steps = {check.steps[0]}};
  EXPECT_FALSE(first_only.first_divergence());
  const std::optional<Divergence> d = check.first_divergence();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->step, 2);
  // The norm is within its bound after the first step (1e-5); the two tensors past theirs, in order.
  ASSERT_EQ(d->apart.size(), 2u);
  EXPECT_EQ(d->apart[0].value, Apart::Value::parameter);
  EXPECT_EQ(d->apart[0].what, "h.0.attn.qkv.weight");
  EXPECT_EQ(d->apart[1].what, "lm_head");
  EXPECT_DOUBLE_EQ(d->apart[1].bound, 2e-4);
  // At the first step the norm's bound is the first step's.
  check.steps[0].grad_norm = 1 + 1e-6;
  EXPECT_EQ(check.first_divergence()->apart.front().value, Apart::Value::grad_norm);
}

}  // namespace
}  // namespace dt
