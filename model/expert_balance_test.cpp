#include "model/expert_balance.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "tests/gradcheck.h"

namespace dt {
namespace {

using testing::OwnedTensor;
using testing::zeros;

constexpr int kB = 2, kT = 16;

std::vector<float> bias_of(const Transformer& model, int layer) {
  const Tensor bias = model.linear_states().find(layer, "mlp.router", "expert_bias");
  std::vector<float> values(static_cast<size_t>(bias.numel()));
  copy_bytes(values.data(), Device::cpu, bias.data, bias.device, bias.bytes());
  return values;
}

// Each forward counts its assignments once (a block rerun by full recomputation does not count
// again); a step whose update was skipped leaves the bias alone; an applied one moves each
// expert's by the rate toward the mean load; every step starts a new count.
TEST(ExpertBalance, TheBiasMovesByTheRateTowardTheMeanLoadAfterAnAppliedStep) {
  ModelConfig config = model_preset("moe-tiny");  // 2 expert blocks, top 2 of 4
  config.moe.bias_update_rate = 0.25f;
  Transformer model(config, kB, kT, Recompute::full);
  init_parameters(model.params(), 3);
  OwnedTensor tokens = zeros(DType::i32, {kB, kT}), targets = zeros(DType::i32, {kB, kT});
  const ElementRng rng(5, "balance");
  for (int64_t i = 0; i < kB * kT; ++i) {
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i) * config.vocab_size);
    targets.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i + 1) * config.vocab_size);
  }
  const int64_t assignments = int64_t{kB} * kT * config.moe.routing.top_k;

  model.forward_backward(tokens.t, targets.t, 1.0f);
  std::vector<ExpertStats> loads = end_step_expert_balance(model, nullptr, /*applied=*/false, kB * kT);
  ASSERT_EQ(loads.size(), 2u);
  for (const ExpertStats& load : loads)
    EXPECT_EQ(std::accumulate(load.assignments.begin(), load.assignments.end(), 0.0), assignments) << load.layer;
  EXPECT_EQ(bias_of(model, 0), std::vector<float>(4, 0.0f)) << "a skipped step moves no bias";
  EXPECT_EQ(model.stages()[0]->expert_record(1).loads, std::vector<int64_t>(4, 0)) << "the count starts again";

  model.forward_backward(tokens.t, targets.t, 1.0f);
  loads = end_step_expert_balance(model, nullptr, /*applied=*/true, kB * kT);
  bool moved = false;
  for (const ExpertStats& load : loads) {
    const double mean = static_cast<double>(assignments) / 4;
    const std::vector<float> bias = bias_of(model, load.layer);
    double busiest = 0;
    for (size_t e = 0; e < 4; ++e) {
      const double n = load.assignments[e];
      EXPECT_EQ(bias[e], n < mean ? 0.25f : n > mean ? -0.25f : 0.0f) << "block " << load.layer << " expert " << e;
      moved = moved || bias[e] != 0;
      busiest = std::max(busiest, n);
    }
    EXPECT_EQ(load.imbalance(), busiest / mean);
  }
  EXPECT_TRUE(moved) << "the loads were all equal: pick other tokens so the test sees a move";
}

// The bias is declared only where the model balances by it, and a checkpoint names it by block.
TEST(ExpertBalance, TheBiasIsARouterStateOfEveryExpertBlock) {
  ModelConfig config = model_preset("moe-tiny");
  EXPECT_TRUE(with_model_states(config, {}).empty());
  config.moe.bias_update_rate = 0.001f;
  const std::vector<LinearStateDeclaration> declared = with_model_states(config, {});
  ASSERT_EQ(declared.size(), 1u);
  EXPECT_EQ(declared[0].name, "expert_bias");
  EXPECT_EQ(declared[0].count, 4);
  EXPECT_EQ(declared[0].linears, std::vector<std::string>{"mlp.router"});
  const Transformer model(config, 1, 8);
  EXPECT_EQ(model.linear_states().model_names(),
            (std::vector<std::string>{"h.0.mlp.router.expert_bias", "h.1.mlp.router.expert_bias"}));
}

}  // namespace
}  // namespace dt
