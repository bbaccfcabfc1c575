// Training on a GPU against training on the CPU: the same model, data and steps. Skipped, with
// the reason, where no GPU can be used.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/device.h"
#include "tests/byte_text.h"
#include "tests/cuda_testing.h"
#include "train/batch_buffers.h"
#include "train/step.h"

namespace dt {
namespace {

using testing::ByteText;
using testing::kByteVocabSize;

constexpr int kBatch = 4, kSeq = 32;

struct TrainingRun {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;  // after the last step, f32, on the host
};

// `steps` steps of `preset` (byte vocabulary) on the GPL's text, on `device`; in FP8 where `fp8`
// is given.
TrainingRun train(const char* preset, Device device, DType precision, int steps, const Float8Training* fp8 = nullptr) {
  ModelConfig config = model_preset(preset);
  config.vocab_size = kByteVocabSize;
  const ByteText text("/usr/share/common-licenses/GPL-3", kSeq);
  Transformer model(config, kBatch, kSeq, Recompute::none, precision, device, {}, nullptr, {}, nullptr, {}, nullptr,
                    fp8);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  init_parameters(model.params(), 3);
  optimizer.round_weights();
  BatchBuffers batch(1, kBatch, kSeq, device);
  TrainingRun run;
  for (int step = 0; step < steps; ++step) {
    text.fill(batch.host(0).tokens, batch.host(0).targets, int64_t{step} * kBatch);
    batch.upload();
    const StepStats stats = train_step(model, optimizer, batch.on_device(), 2e-3f, 1.0f);
    run.losses.push_back(stats.loss);
    run.grad_norms.push_back(stats.grad_norm);
  }
  run.params = host_values<float>(model.params().all());
  return run;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// The largest |a - b| over the largest |b|.
double normalized_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

class CudaTraining : public ::testing::TestWithParam<const char*> {};

// fp32 on both sides: the kernels sum in other orders (cuBLASLt's tiles, warp reductions), so
// results differ by rounding, amplified a little by three steps of Adam, whose update is of
// size lr whatever the gradient's size: bounds as in model/pytorch_equivalence_test.cpp.
TEST_P(CudaTraining, ThreeStepsMatchTheCpuInF32) {
  DT_SKIP_WITHOUT_CUDA();
  const TrainingRun cpu = train(GetParam(), Device::cpu, DType::f32, 3), gpu = train(GetParam(), Device::cuda, DType::f32, 3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_LE(relative(gpu.losses[s], cpu.losses[s]), 1e-5) << "step " << s + 1;
    EXPECT_LE(relative(gpu.grad_norms[s], cpu.grad_norms[s]), 1e-4) << "step " << s + 1;
  }
  EXPECT_LE(normalized_difference(gpu.params, cpu.params), 1e-4);
}

// The deterministic kernels (no floating-point atomics) repeat a run bit for bit: what makes a
// resumed GPU run equal the uninterrupted one.
TEST_P(CudaTraining, RepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  const TrainingRun a = train(GetParam(), Device::cuda, DType::bf16, 3), b = train(GetParam(), Device::cuda, DType::bf16, 3);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

// 50 steps in bf16 on the GPU track 50 in f32 on the GPU, within the loose bounds that
// train/mixed_precision_test.cpp keeps for gpt2-tiny's chaotic trajectory (10% a step, 2% for the
// last 10) and the CPU's first-loss bound before it was measured (8u), for every family (the
// experts' choices flip with rounding too): a GPU's kernels sum in other orders, and nothing has
// been measured on one yet to tighten them.
TEST_P(CudaTraining, Bf16TracksF32OverFiftySteps) {
  DT_SKIP_WITHOUT_CUDA();
  const TrainingRun f32 = train(GetParam(), Device::cuda, DType::f32, 50), bf16 = train(GetParam(), Device::cuda, DType::bf16, 50);
  double worst = 0, last_f32 = 0, last_bf16 = 0;
  for (int s = 0; s < 50; ++s) {
    worst = std::max(worst, relative(bf16.losses[s], f32.losses[s]));
    if (s >= 40) last_f32 += f32.losses[s] / 10, last_bf16 += bf16.losses[s] / 10;
  }
  std::printf("  %s on the GPU, bf16 vs f32: worst step %.2e, last 10 steps' mean %.2e\n", GetParam(), worst,
              relative(last_bf16, last_f32));
  EXPECT_LE(relative(bf16.losses[0], f32.losses[0]), 8.0 / 256);
  EXPECT_LE(worst, 0.10);
  EXPECT_LE(relative(last_bf16, last_f32), 0.02);
  EXPECT_LT(bf16.losses.back(), bf16.losses.front() - 1.0);
}

// FP8 training on the GPU (cuBLASLt's FP8 GEMMs for whole-tensor scales, exact bf16 dequantization
// for tiles) against the CPU's emulation, each recipe, the experts' grouped products included
// (tiles of 16: the test models' widths are multiples of 16). The bf16 activations around the
// GEMMs differ by a GPU's summation orders, and a tensorwise or delayed scale that is not a power
// of two turns such an ulp into FP8 steps (tests/layout_cell.cpp), so the bounds are the layout
// matrix's bf16 ones; nothing has been measured on a GPU yet to tighten them.
TEST_P(CudaTraining, Fp8MatchesTheCpuEmulation) {
  DT_SKIP_WITHOUT_CUDA();
  for (const Float8Scaling scaling : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise}) {
    SCOPED_TRACE(float8_scaling_name(scaling));
    const Float8Training fp8{.recipe = {.scaling = scaling, .block = 16}};
    const TrainingRun cpu = train(GetParam(), Device::cpu, DType::bf16, 3, &fp8);
    const TrainingRun gpu = train(GetParam(), Device::cuda, DType::bf16, 3, &fp8);
    for (int s = 0; s < 3; ++s) {
      EXPECT_LE(relative(gpu.losses[s], cpu.losses[s]), 1e-3) << "step " << s + 1;
      EXPECT_LE(relative(gpu.grad_norms[s], cpu.grad_norms[s]), 1e-2) << "step " << s + 1;
    }
    EXPECT_LE(normalized_difference(gpu.params, cpu.params), 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaTraining, ::testing::Values("gpt2-tiny", "llama-tiny", "moe-tiny", "olmoe-tiny"),
                         [](const auto& info) {
                           const std::string preset = info.param;
                           return preset.substr(0, preset.find('-'));
                         });

}  // namespace
}  // namespace dt
