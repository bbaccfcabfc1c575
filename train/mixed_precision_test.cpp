// Mixed-precision training against fp32 training of the same model on the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "tests/byte_text.h"
#include "train/step.h"

namespace dt {
namespace {

using testing::ByteText;
using testing::kByteVocabSize;

constexpr int kBatch = 4, kSeq = 32, kSteps = 50;

struct TrainingRun {
  std::vector<double> losses;  // of applied steps, by step
  std::vector<bool> applied;
  int64_t skipped = 0;
};

// kSteps steps of `preset` (with the byte vocabulary) on the GPL's text, which every Debian
// system ships and which never changes under the test (this repository's files do).
TrainingRun train(const char* preset, DType precision, std::optional<LossScalerConfig> scaler_config = std::nullopt) {
  ModelConfig config = model_preset(preset);
  config.vocab_size = kByteVocabSize;
  const ByteText text("/usr/share/common-licenses/GPL-3", kSeq);
  Transformer model(config, kBatch, kSeq, Recompute::none, precision);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  init_parameters(model.params(), 3);
  optimizer.round_weights();
  std::optional<LossScaler> scaler;
  if (scaler_config) scaler.emplace(*scaler_config);
  Buffer tokens(kBatch * kSeq * sizeof(int32_t), MemTag::workspace), targets(kBatch * kSeq * sizeof(int32_t), MemTag::workspace);
  const MicroBatch mb[] = {{tokens.view(DType::i32, {kBatch, kSeq}), targets.view(DType::i32, {kBatch, kSeq})}};
  TrainingRun run;
  for (int step = 0; step < kSteps; ++step) {
    text.fill(mb[0].tokens, mb[0].targets, int64_t{step} * kBatch);
    const StepStats stats = train_step(model, optimizer, mb, 2e-3f, 1.0f, scaler ? &*scaler : nullptr, step + 1);
    run.losses.push_back(stats.loss);
    run.applied.push_back(stats.applied);
  }
  run.skipped = scaler ? scaler->skipped_steps() : 0;
  return run;
}

struct Tracking {
  const char* preset;
  DType precision;
  double unit;  // u: the storage's relative rounding, 2^-8 (bf16) or 2^-11 (f16)
  // Bounds on the relative difference from f32 of every step's loss, and of the last 10 steps'
  // mean loss (see below).
  double worst_step, last_10;
};

void PrintTo(const Tracking& t, std::ostream* os) { *os << t.preset << " " << dtype_name(t.precision); }

class MixedPrecision : public ::testing::TestWithParam<Tracking> {};

double relative(double a, double b) { return std::fabs(a - b) / b; }

// The first loss comes from the same weights, so it differs from f32 by the forward's rounding
// alone. At initialization the logits are small (|z| ~ 0.1), so rounding them to u/2 moves each
// token's loss by ~0.1u, ~0.02u of the loss (~5.4), and the mean over 128 tokens averages that
// out further: measured at most 0.011u (llama fp16; 0.0041u gpt2 bf16), the same with bf16
// products on oneDNN and widened to f32. Bound: 0.05u.
constexpr double kFirstLossBound = 0.05;  // × u

// Training then follows another trajectory: every rounding perturbs every update, and small
// networks amplify perturbations whatever their size. What must hold is that it tracks f32:
// every step's loss and the mean of the last 10 within a bound per model (Tracking). Where
// gpt2-tiny's trajectory lands is chaos, not rounding alone: the same roundings summed in
// another order start another trajectory, so its figures move with the CPU's kernels. gpt2-tiny,
// bf16, worst step / last-10 mean: 3.4% / 0.47% with bf16 products on oneDNN's AMX kernels (a
// Xeon); 4.9% / 1.2% on oneDNN's AVX-512 BF16 kernels (an AMD EPYC); 5.1% / 1.2% there with
// products widened to f32 for OpenBLAS's AVX2 sgemm (ONEDNN_MAX_CPU_ISA=AVX2
// OPENBLAS_CORETYPE=Haswell); on an AVX2 CPU, 4.4% / 1.25% with OpenBLAS's own threading and 7.0%
// / 1.5% with the thread-independent tiles of kernels/cpu/linear.cpp. gpt2-tiny, fp16: 2.4% /
// 0.50% on the EPYC, both ways. Bounds 10% / 2%: 1.4x and 1.3x the worst seen, all a chaotic
// quantity allows. llama-tiny does not amplify so: worst step / last-10 mean at most 6.9e-4 /
// 2.0e-4 in bf16 and 8.8e-5 / 1.6e-5 in fp16 on the EPYC both ways, below 1e-3 on the AVX2 CPU.
// Bounds 5e-3 / 1e-3: 5x the worst seen.
TEST_P(MixedPrecision, TracksTheF32RunOverFiftySteps) {
  const Tracking& t = GetParam();
  const TrainingRun reference = train(t.preset, DType::f32);
  const TrainingRun mixed = train(t.preset, t.precision);
  double worst = 0, last_mixed = 0, last_reference = 0;
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_TRUE(mixed.applied[s]) << "step " << s + 1;
    worst = std::max(worst, relative(mixed.losses[s], reference.losses[s]));
    if (s >= kSteps - 10) last_mixed += mixed.losses[s] / 10, last_reference += reference.losses[s] / 10;
  }
  const double first = relative(mixed.losses[0], reference.losses[0]);
  std::printf("  %s %s vs f32: first loss %.4fu apart; worst step %.2e; last 10 steps' mean %.2e; loss %.3f -> %.3f\n",
              t.preset, std::string(dtype_name(t.precision)).c_str(), first / t.unit, worst,
              relative(last_mixed, last_reference), mixed.losses.front(), mixed.losses.back());
  EXPECT_LE(first, kFirstLossBound * t.unit);
  EXPECT_LE(worst, t.worst_step);
  EXPECT_LE(relative(last_mixed, last_reference), t.last_10);
  EXPECT_LT(mixed.losses.back(), mixed.losses.front() - 1.0);  // it trains
}

INSTANTIATE_TEST_SUITE_P(
    Runs, MixedPrecision,
    ::testing::Values(Tracking{"gpt2-tiny", DType::bf16, 1.0 / 256, 0.10, 0.02},
                      Tracking{"gpt2-tiny", DType::f16, 1.0 / 2048, 0.10, 0.02},
                      Tracking{"llama-tiny", DType::bf16, 1.0 / 256, 5e-3, 1e-3},
                      Tracking{"llama-tiny", DType::f16, 1.0 / 2048, 5e-3, 1e-3}),
    [](const auto& info) {
      return std::string(info.param.preset).substr(0, std::string(info.param.preset).find('-')) + "_" +
             std::string(dtype_name(info.param.precision));
    });

// A scale far too large overflows fp16 gradients at once; the scaler must skip those steps,
// halve its way down, and then train. Near the largest scale that fits it may overflow again
// now and then, as dynamic loss scaling does; those steps are skipped too.
TEST(MixedPrecision, Fp16WithAFarTooLargeLossScaleSkipsRecoversAndTrains) {
  const TrainingRun run =
      train("gpt2-tiny", DType::f16, LossScalerConfig{.initial_scale = 1e9f, .growth_interval = 1000});
  int first_applied = 0;
  while (first_applied < kSteps && !run.applied[first_applied]) ++first_applied;
  std::printf("  fp16 from scale 1e9: first step applied %d, %lld of %d steps skipped\n", first_applied + 1,
              static_cast<long long>(run.skipped), kSteps);
  EXPECT_GE(first_applied, 3) << "a scale of 1e9 should overflow fp16 gradients";
  ASSERT_LT(first_applied, 20) << "the scaler never recovered";
  // Each overflow halves the scale, so overflows after recovery are few.
  EXPECT_LE(run.skipped, first_applied + 10);
  double last_applied_loss = 0;
  for (int s = 0; s < kSteps; ++s)
    if (run.applied[s]) last_applied_loss = run.losses[s];
  EXPECT_LT(last_applied_loss, run.losses[first_applied] - 1.0);
}

}  // namespace
}  // namespace dt
