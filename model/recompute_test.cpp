// Recomputation trades memory for time and must not change a single bit of the gradients.
#include <gtest/gtest.h>

#include <cstring>

#include "core/allocator.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "tests/gradcheck.h"

namespace dt {
namespace {

using testing::OwnedTensor;
using testing::zeros;

constexpr Recompute kPolicies[] = {Recompute::none, Recompute::selective, Recompute::full};

class RecomputeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RecomputeTest, GradientsAndLossesAreBitwiseEqualUnderEveryPolicy) {
  const ModelConfig config = model_preset(GetParam());
  constexpr int B = 2, T = 19;
  OwnedTensor tokens = zeros(DType::i32, {B, T}), targets = zeros(DType::i32, {B, T});
  const ElementRng rng(5, "recompute");
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i) * config.vocab_size);
    targets.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i + 1) * config.vocab_size);
  }
  std::vector<float> reference_grads;
  double reference_loss = 0;
  for (Recompute policy : kPolicies) {
    Transformer model(config, B, T, policy);
    init_parameters(model.params(), 9);
    model.grads().zero();
    // Two micro-batches, so a recomputed block also overwrites state the second pass reads.
    double loss = model.forward_backward(tokens.t, targets.t, 0.5f);
    loss += model.forward_backward(tokens.t, targets.t, 0.5f);
    const Tensor g = model.grads().all();
    if (policy == Recompute::none) {
      reference_grads.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
      reference_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << recompute_name(policy);
    EXPECT_EQ(std::memcmp(g.data, reference_grads.data(), g.bytes()), 0) << recompute_name(policy);
  }
}

TEST_P(RecomputeTest, EachPolicyKeepsLessThanTheOneBefore) {
  const ModelConfig config = model_preset(GetParam());
  size_t previous = SIZE_MAX;
  for (Recompute policy : kPolicies) {
    const size_t before = memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)];
    const Transformer model(config, 4, 32, policy);
    const size_t bytes = memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)] - before;
    EXPECT_LT(bytes, previous) << recompute_name(policy);
    previous = bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RecomputeTest, ::testing::Values("gpt2-tiny", "llama-tiny", "moe-tiny", "olmoe-tiny"),
                         [](const auto& info) { return std::string(info.param).substr(0, std::string(info.param).find('-')); });

TEST(Recompute, UnknownPolicyNamesTheValidOnes) {
  EXPECT_EQ(recompute_from_name("selective"), Recompute::selective);
  try {
    recompute_from_name("partial");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown recomputation policy 'partial'; valid policies are none, selective, full"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace dt
