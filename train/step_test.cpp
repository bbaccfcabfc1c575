#include "train/step.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/cross_entropy.h"

namespace dt {
namespace {

// 8 sequences; the first 4 have most targets ignored, the last 4 almost none.
void fill_batch(Tensor tokens, Tensor targets, int vocab_size) {
  const ElementRng rng(3, "step_test");
  const int64_t T = tokens.dim(1);
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    const double ignore_share = i / T < 4 ? 0.8 : 0.05;
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(3 * i) * vocab_size);
    targets.ptr<int32_t>()[i] = rng.uniform(3 * i + 1) < ignore_share
                                    ? kernels::kIgnoreIndex
                                    : static_cast<int32_t>(rng.uniform(3 * i + 2) * vocab_size);
  }
}

// The 8 x 16 batch of fill_batch, owned.
struct Batch {
  static constexpr int T = 16;
  Buffer token_memory{8 * T * sizeof(int32_t), MemTag::workspace}, target_memory{8 * T * sizeof(int32_t), MemTag::workspace};
  Tensor tokens = token_memory.view(DType::i32, {8, T}), targets = target_memory.view(DType::i32, {8, T});
  explicit Batch(const ModelConfig& config) { fill_batch(tokens, targets, config.vocab_size); }
};

// The trap: averaging each micro-batch's own mean weighs a token in a sparsely-labelled
// micro-batch more than one in a dense micro-batch. The global-batch mean must not depend on
// how the batch is split.
TEST(TrainStep, TwoMicroBatchesOfFourEqualOneBatchOfEight) {
  const ModelConfig config = model_preset("gpt2-tiny");
  constexpr int T = Batch::T;
  const Batch batch(config);
  const Tensor tokens = batch.tokens, targets = batch.targets;

  Transformer whole(config, 8, T), split(config, 4, T);
  init_parameters(whole.params(), 5);
  init_parameters(split.params(), 5);
  AdamW whole_opt(whole.layout(), OptimizerParts::whole(whole), {}), split_opt(split.layout(), OptimizerParts::whole(split), {});
  const MicroBatch one[] = {{tokens, targets}};
  const MicroBatch two[] = {{tokens.slice_rows(0, 4), targets.slice_rows(0, 4)},
                            {tokens.slice_rows(4, 4), targets.slice_rows(4, 4)}};
  for (int step = 0; step < 2; ++step) {
    const StepStats a = train_step(whole, whole_opt, one, 1e-3f, 1.0f);
    const StepStats b = train_step(split, split_opt, two, 1e-3f, 1.0f);
    EXPECT_EQ(a.targets, b.targets);
    // Same sums in a different grouping: equal to fp32 rounding (relative 1e-6).
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm);
  }
  double max_diff = 0, max_abs = 0;
  const Tensor pa = whole.params().all(), pb = split.params().all();
  for (int64_t i = 0; i < pa.numel(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(pa.ptr<float>()[i] - pb.ptr<float>()[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(pa.ptr<float>()[i])));
  }
  // Adam's update is ~lr per element; gradients agree to ~1e-6 relative, so parameters agree
  // far below lr = 1e-3. A per-micro-batch mean would differ by O(lr).
  EXPECT_LT(max_diff / max_abs, 1e-5);
}

// A power-of-two loss scale commutes with every rounding in backward and in the unscaling, so
// a scaled step must give exactly the unscaled one: this checks that gradients are unscaled
// before clipping and before AdamW, and nowhere twice.
TEST(TrainStep, APowerOfTwoLossScaleGivesBitwiseTheUnscaledStep) {
  const ModelConfig config = model_preset("gpt2-tiny");
  constexpr int T = Batch::T;
  const Batch batch(config);
  const Tensor tokens = batch.tokens, targets = batch.targets;
  const MicroBatch mb[] = {{tokens, targets}};
  Transformer plain(config, 8, T), scaled(config, 8, T);
  init_parameters(plain.params(), 5);
  init_parameters(scaled.params(), 5);
  AdamW plain_opt(plain.layout(), OptimizerParts::whole(plain), {}), scaled_opt(scaled.layout(), OptimizerParts::whole(scaled), {});
  LossScaler scaler({.initial_scale = 1024, .growth_interval = 1000});
  for (int step = 1; step <= 2; ++step) {
    // Clipping is active (max norm 0.1), so its coefficient must come from the unscaled norm.
    const StepStats a = train_step(plain, plain_opt, mb, 1e-3f, 0.1f);
    const StepStats b = train_step(scaled, scaled_opt, mb, 1e-3f, 0.1f, &scaler, step);
    EXPECT_EQ(b.loss_scale, 1024);
    EXPECT_EQ(a.grad_norm, b.grad_norm);
    EXPECT_LT(a.grad_scale, 1);
  }
  EXPECT_EQ(std::memcmp(plain.params().all().data, scaled.params().all().data, plain.params().all().bytes()), 0);
}

TEST(TrainStep, ANonFiniteGradientSkipsTheUpdateAndNamesTheTensor) {
  const ModelConfig config = model_preset("gpt2-tiny");
  constexpr int T = Batch::T;
  const Batch batch(config);
  const Tensor tokens = batch.tokens, targets = batch.targets;
  const MicroBatch mb[] = {{tokens, targets}};
  Transformer model(config, 8, T);
  init_parameters(model.params(), 5);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  LossScaler scaler({.initial_scale = 256});
  const std::vector<float> before(model.params().all().ptr<float>(),
                                  model.params().all().ptr<float>() + model.params().all().numel());
  StepStats stats = accumulate_gradients(model, mb, scaler.scale());
  // Block 0's MLP and block 1's first norm overflowed; backward reaches block 1 first.
  model.grads().unpadded("h.0.mlp.fc.bias").ptr<float>()[3] = INFINITY;
  model.grads().unpadded("h.1.ln_1.weight").ptr<float>()[0] = NAN;
  apply_update(optimizer, 1e-3f, 1.0f, stats, &scaler, 7);
  EXPECT_FALSE(stats.applied);
  EXPECT_EQ(stats.nonfinite, "h.1.ln_1.weight");
  EXPECT_EQ(optimizer.steps_taken(), 0);
  EXPECT_EQ(scaler.scale(), 128);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(std::memcmp(model.params().all().data, before.data(), before.size() * sizeof(float)), 0);
  // Without a scaler (fp32, bf16) the step is skipped all the same.
  stats = accumulate_gradients(model, mb);
  model.grads().unpadded("wte").ptr<float>()[0] = NAN;
  apply_update(optimizer, 1e-3f, 1.0f, stats);
  EXPECT_FALSE(stats.applied);
  EXPECT_EQ(stats.nonfinite, "wte");
  EXPECT_EQ(std::memcmp(model.params().all().data, before.data(), before.size() * sizeof(float)), 0);
}

// Every kernel's reductions are fixed by the sizes alone, so a run repeats bit for bit whatever
// the number of threads it is given (a resumed run on another machine included).
TEST(TrainStep, StepsHaveTheSameBitsForAnyThreadCount) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig config = model_preset(preset);
    const Batch batch(config);
    const MicroBatch mb[] = {{batch.tokens, batch.targets}};
    std::vector<std::vector<float>> params;
    const int saved = omp_get_max_threads();
    for (const int threads : {1, 3}) {
      omp_set_num_threads(threads);
      Transformer model(config, 8, Batch::T);
      init_parameters(model.params(), 5);
      AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
      for (int step = 0; step < 2; ++step) train_step(model, optimizer, mb, 1e-3f, 0.5f);
      const Tensor all = model.params().all();
      params.emplace_back(all.ptr<float>(), all.ptr<float>() + all.numel());
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0) << preset;
  }
}

TEST(TrainStep, AllTargetsIgnoredIsAnError) {
  const ModelConfig config = model_preset("gpt2-tiny");
  Transformer model(config, 1, 4);
  AdamW opt(model.layout(), OptimizerParts::whole(model), {});
  Buffer tok(4 * sizeof(int32_t), MemTag::workspace), tgt(4 * sizeof(int32_t), MemTag::workspace);
  const Tensor tokens = tok.view(DType::i32, {1, 4}), targets = tgt.view(DType::i32, {1, 4});
  for (int i = 0; i < 4; ++i) targets.ptr<int32_t>()[i] = kernels::kIgnoreIndex;
  const MicroBatch mb[] = {{tokens, targets}};
  EXPECT_THROW(train_step(model, opt, mb, 1e-3f, 1.0f), Error);
}

TEST(TrainStep, TokenOutsideVocabularyNamesPositionAndVocabulary) {
  Transformer model(model_preset("gpt2-tiny"), 1, 4);
  Buffer tok(4 * sizeof(int32_t), MemTag::workspace), tgt(4 * sizeof(int32_t), MemTag::workspace);
  const Tensor tokens = tok.view(DType::i32, {1, 4}), targets = tgt.view(DType::i32, {1, 4});
  tokens.ptr<int32_t>()[2] = 997;
  try {
    model.forward(tokens, targets);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 997 at (0, 2) is outside the vocabulary [0, 997)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dt
