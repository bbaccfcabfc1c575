#include "optim/grad_clip.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "optim/adamw.h"

namespace dt {
namespace {

// With every element of the flat buffer (padding rows and alignment gaps included) set to 1,
// the squared norm is exactly the published parameter count: the tied embedding counts once
// and padding not at all.
TEST(GradClip, GlobalNormCountsEveryParameterOnce) {
  Transformer model(model_preset("gpt2-tiny"), 1, 8);
  const AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  const Tensor all = model.grads().all();
  std::fill_n(all.ptr<float>(), all.numel(), 1.0f);
  EXPECT_DOUBLE_EQ(optimizer.global_grad_norm(), std::sqrt(static_cast<double>(model.layout().num_parameters())));
}

TEST(GradClip, CoefficientAsPyTorch) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0f), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(1e9, 0.0f), 1.0f);  // disabled
}

TEST(AdamW, WeightDecayOnMatricesOnlyAndEmbeddingsWhenAsked) {
  Transformer model(model_preset("gpt2-tiny"), 1, 8);
  const ParameterLayout& layout = model.layout();
  const AdamW plain(layout, OptimizerParts::whole(model), {}),
      with_embeddings(layout, OptimizerParts::whole(model), {.decay_embeddings = true});
  EXPECT_TRUE(plain.decays(layout.find("h.0.mlp.fc.weight")));
  EXPECT_FALSE(plain.decays(layout.find("h.0.mlp.fc.bias")));
  EXPECT_FALSE(plain.decays(layout.find("h.1.ln_2.weight")));
  EXPECT_FALSE(plain.decays(layout.find("wte")));
  EXPECT_FALSE(plain.decays(layout.find("wpe")));
  EXPECT_TRUE(with_embeddings.decays(layout.find("wte")));
}

}  // namespace
}  // namespace dt
