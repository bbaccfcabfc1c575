// FLOP counts against the closed forms people quote for each family.
#include "train/throughput.h"

#include <gtest/gtest.h>

namespace dt {
namespace {

// GPT-2: the matrices of a block hold 12 C^2 weights, so a training token costs
// 6 (12 L C^2 + C V) for the products and 6 L C (T + 1) for causal attention.
TEST(Throughput, Gpt2CountsMatchTheClosedForm) {
  const ModelConfig m = model_preset("gpt2-124m");
  const double L = m.n_layer, C = m.d_model, V = m.vocab_size, T = 1024;
  const double per_token = 6 * (12 * L * C * C + C * V) + 6 * L * C * (T + 1);
  const StepFlops f = training_flops(m, 1024, 8 * 1024, Recompute::none);
  EXPECT_DOUBLE_EQ(f.model, per_token * 8 * 1024);
  EXPECT_DOUBLE_EQ(f.hardware, f.model);
}

// Llama: grouped-query k and v are n_kv_head / n_head of q's width, and SwiGLU has three
// F x C matrices. Recomputation adds the attention core (selective) or the block up to the MLP's
// activation (full: not the output projection, F x C).
TEST(Throughput, LlamaCountsGroupedQueryAttentionSwiGluAndRecomputation) {
  const ModelConfig m = model_preset("llama3.2-1b");
  const double L = m.n_layer, C = m.d_model, V = m.vocab_size, F = m.ffn_hidden(), T = 2048;
  const double kv = C * m.kv_heads() / m.n_head;
  const double block_products = 2 * (C * (C + 2 * kv) + C * C + 3 * C * F);
  const double attention = 2 * C * (T + 1);
  const double forward = L * (block_products + attention) + 2 * C * V;
  const StepFlops none = training_flops(m, 2048, 1, Recompute::none);
  EXPECT_DOUBLE_EQ(none.model, 3 * forward);
  EXPECT_DOUBLE_EQ(training_flops(m, 2048, 1, Recompute::selective).hardware, 3 * forward + L * attention);
  EXPECT_DOUBLE_EQ(training_flops(m, 2048, 1, Recompute::full).hardware, 3 * forward + L * (block_products - 2 * F * C + attention));
  EXPECT_DOUBLE_EQ(training_flops(m, 2048, 1, Recompute::full).model, none.model);
}

}  // namespace
}  // namespace dt
