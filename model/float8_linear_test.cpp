// FP8 training on one rank (model/float8_linear.h): delayed scaling's history and scales, which
// layers run in FP8, and how much a recipe's scales move with f32 rounding (the probe that
// tests/layout_cell.cpp's FP8 bounds cite).
#include "model/float8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/equivalence.h"
#include "train/global_batch.h"
#include "train/step.h"

namespace dt {
namespace {

std::vector<float> host(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, t.bytes());
  return v;
}

void set(const Tensor& t, const std::vector<float>& values) { std::memcpy(t.data, values.data(), t.bytes()); }

// Delayed scaling's end of step, Transformer Engine's semantics: the step's amax pushed onto the
// history (newest first, the oldest dropped), the scale made from the history's max (or its
// newest), less the margin, and kept where the history holds no amax; the step amax restarts.
TEST(Float8Training, DelayedScalingScalesFromTheHistoryOfAmaxes) {
  for (const char* compute : {"max", "most_recent"}) {
    const Float8Training fp8{
        .recipe = {.scaling = Float8Scaling::delayed, .amax_history = 3, .amax_compute = compute, .margin = 1}};
    Transformer model(model_preset("gpt2-tiny"), 1, 8, Recompute::none, DType::bf16, Device::cpu, {}, nullptr, {},
                      nullptr, {}, nullptr, &fp8);
    const LinearStates& states = model.linear_states();
    const Tensor amax = states.find(1, "mlp.fc", "fp8_amax"), history = states.find(1, "mlp.fc", "fp8_amax_history");
    const Tensor scale = states.find(1, "mlp.fc", "fp8_scale");
    EXPECT_EQ(host(scale), (std::vector<float>{1, 1, 1}));  // before any amax: 1
    // The input's amax over four steps: 4, 8, 2, 1; the weight's always 0 (no scale: kept);
    // the gradient's 7.
    const float inputs[] = {4, 8, 2, 1};
    for (int step = 0; step < 4; ++step) {
      set(amax, {inputs[step], 0, 7});
      end_step_float8(model, {});
      EXPECT_EQ(host(amax), (std::vector<float>{0, 0, 0}));
    }
    const std::vector<float> h = host(history);
    EXPECT_EQ(std::vector<float>(h.begin(), h.begin() + 3), (std::vector<float>{1, 2, 8}));  // 4 dropped
    const float input_amax = std::string(compute) == "max" ? 8.0f : 1.0f;
    EXPECT_EQ(host(scale), (std::vector<float>{448.0f / input_amax / 2, 1, 57344.0f / 7 / 2})) << compute;
  }
}

TEST(Float8Training, QuantizesTheBlocksProjectionsOnly) {
  const Float8Training fp8{.recipe = {.scaling = Float8Scaling::tensorwise}};
  Transformer model(model_preset("moe-tiny"), 1, 8, Recompute::none, DType::bf16, Device::cpu, {}, nullptr, {},
                    nullptr, {}, nullptr, &fp8);
  for (const char* linear : {"attn.qkv", "attn.proj", "mlp.experts.fc", "mlp.experts.proj"})
    EXPECT_EQ(model.linear_states().of(0, linear).float8(), &fp8) << linear;
  EXPECT_EQ(model.linear_states().of(0, "mlp.router").float8(), nullptr);
  EXPECT_TRUE(model.linear_states().empty());  // tensorwise keeps no state
}

// Three steps of llama-tiny on one rank, from its initial weights and from them with half the
// elements moved by one ulp: the largest relative difference of the gradient norms.
double norm_drift(const Float8Recipe& recipe) {
  const ModelConfig config = model_preset("llama-tiny");
  const Float8Training fp8{.recipe = recipe};
  std::vector<double> norms[2];
  for (int run = 0; run < 2; ++run) {
    Transformer model(config, 2, 16, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr, {}, nullptr,
                      &fp8);
    AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
    init_parameters(model.params(), 7);
    if (run == 1) {
      float* p = model.params().all().ptr<float>();
      uint32_t state = 1;
      for (int64_t i = 0; i < model.params().all().numel(); ++i) {
        state = state * 1664525u + 1013904223u;
        if (state >> 31) p[i] = std::nextafter(p[i], (state >> 30) & 1 ? INFINITY : -INFINITY);
      }
    }
    optimizer.round_weights();
    for (int step = 0; step < 3; ++step) {
      const GlobalBatch batch(8, 16, config.vocab_size, step);
      std::vector<MicroBatch> micro_batches;
      for (int m = 0; m < 4; ++m) micro_batches.push_back(batch.micro_batch(m, 2));
      norms[run].push_back(train_step(model, optimizer, micro_batches, 1e-3f, 1.0f).grad_norm);
    }
  }
  return max_relative_difference(norms[1], norms[0]);
}

// A power-of-two scale does not move with its amax's last bits, so f32 rounding stays f32
// rounding; a scale that is not one turns it into FP8 steps (printed: tests/layout_cell.cpp's
// bounds cite it).
TEST(Float8Training, PowerOfTwoScalesDoNotMoveWithTheAmaxsLastBits) {
  for (const Float8Scaling scaling : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise}) {
    const double pow2 = norm_drift({.scaling = scaling, .pow2_scales = true, .block = 8});
    EXPECT_LT(pow2, 1e-6) << float8_scaling_name(scaling);
    if (scaling == Float8Scaling::blockwise) continue;
    std::printf("%s: one ulp of weight noise moves the gradient norms by %.2e with power-of-two scales, %.2e without\n",
                std::string(float8_scaling_name(scaling)).c_str(), pow2,
                norm_drift({.scaling = scaling, .block = 8}));
  }
}

}  // namespace
}  // namespace dt
