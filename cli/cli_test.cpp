// The dtrain command as a user meets it: exit status and the message for each mistake.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

struct Mistake {
  const char* name;
  const char* args;
  int status;
  const char* message;
};

class CliMistake : public ::testing::TestWithParam<Mistake> {};

TEST_P(CliMistake, ExitsNonZeroWithAnActionableMessage) {
  const Mistake& m = GetParam();
  const auto result = run_dtrain(m.args);
  EXPECT_EQ(result.status, m.status) << result.output;
  EXPECT_NE(result.output.find(m.message), std::string::npos) << result.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cli, CliMistake,
    ::testing::Values(
        Mistake{"unknown_command", "frobnicate", 2, "unknown command 'frobnicate'"},
        Mistake{"misspelt_flag", "train --modle gpt2-tiny", 1, "unknown flag --modle (did you mean --model?)"},
        Mistake{"flag_without_value", "train --steps", 1, "flag --steps needs a value"},
        Mistake{"non_integer_value", "train --steps abc", 1, "--steps = 'abc' is not an integer"},
        Mistake{"unknown_preset", "model info gpt2-125m", 1, "unknown model preset 'gpt2-125m'; valid presets are"},
        Mistake{"heads_do_not_divide", "train --model gpt2-tiny --d-model 50", 1,
                "model.d_model = 50: must be divisible by n_head = 3"},
        Mistake{"zero_layers", "bench step --model gpt2-tiny --n-layer 0", 1, "model.n_layer = 0: must be at least 1"},
        Mistake{"negative_size", "model info gpt2-tiny --vocab-size -3", 1, "model.vocab_size = -3"},
        Mistake{"sequence_beyond_model", "train --model gpt2-tiny --seq 100", 1,
                "sequence length 100 must be in [1, model.max_seq_len = 64]"},
        Mistake{"missing_text", "train --model gpt2-tiny --text /no/such/file", 1,
                "cannot open text file '/no/such/file'; check the path given to --text"},
        Mistake{"bad_optimizer", "train --model gpt2-tiny --beta2 1 --eps 0", 1,
                "invalid AdamW settings:\n  beta2 = 1: must be in [0, 1)\n  eps = 0: must be finite and above 0"},
        Mistake{"bad_boolean", "train --model gpt2-tiny --decay-embeddings yes", 1,
                "--decay-embeddings = 'yes' must be true or false"},
        Mistake{"bad_loss_scale", "train --model gpt2-tiny --loss-scale -4", 1,
                "invalid loss scaler settings:\n  initial_scale = -4: must be finite and above 0"},
        Mistake{"unknown_recompute", "train --model gpt2-tiny --recompute partial", 1,
                "unknown recomputation policy 'partial'; valid policies are none, selective, full"},
        Mistake{"unknown_precision", "train --model gpt2-tiny --precision fp8", 1,
                "unknown precision 'fp8'; valid precisions are f32, bf16"},
        Mistake{"fp16_diverges",
                "train --model gpt2-tiny --batch 2 --seq 16 --warmup 1 --steps 10 --precision f16 --loss-scale 1e9 "
                "--loss-scale-min 1e8",
                1,
                "training diverged at step 4: gradients were not finite even with the loss scale at 1.25e+08"},
        Mistake{"bad_schedule", "train --model gpt2-tiny --steps 5 --warmup 9", 1,
                "warmup_steps = 9: must be in [0, steps = 5]"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Cli, ModelInfoPrintsThePublishedParameterCounts) {
  EXPECT_NE(run_dtrain("model info gpt2-124m").output.find("parameters: 124439808"), std::string::npos);
  EXPECT_NE(run_dtrain("model info gpt2-1558m").output.find("parameters: 1557611200"), std::string::npos);
}

// The benchmarks' figures are not asserted (they depend on the machine), but the commands run.
TEST(Cli, BenchmarksRunOnATinyShape) {
  for (const char* args : {"bench gemm --model gpt2-tiny --batch 1 --seq 8 --reps 1",
                           "bench step --model llama-tiny --batch 1 --seq 8 --steps 1 --warmup 0 --recompute full"}) {
    const auto result = run_dtrain(args);
    EXPECT_EQ(result.status, 0) << args << "\n" << result.output;
    EXPECT_NE(result.output.find("\nresult "), std::string::npos) << args << "\n" << result.output;
  }
}

TEST(Cli, CkptInspectPrintsTheManifestAndCatchesACorruptTensor) {
  testing::TempDir dir;
  const auto weights = testing::random_normal(DType::f32, {4, 3}, 1);
  const auto step = ckpt::save_checkpoint(
      dir.path(), {.step = 7, .model = {{"family", "llama"}}, .state = {}, .tensors = {{"param.w", weights.t}}}, 2);
  auto result = run_dtrain(str("ckpt inspect ", dir.path().string()));  // the root: its latest step
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("step 7, format version 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("param.w"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("all 1 checksums verified"), std::string::npos) << result.output;
  {
    std::fstream file(step / "tensors.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('\x7f');
  }
  result = run_dtrain(str("ckpt inspect ", step.string()));
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_NE(result.output.find("tensor 'param.w' fails its checksum"), std::string::npos) << result.output;
}

TEST(Cli, TrainPrintsAFallingLossEveryStepAndRecordsMetrics) {
  testing::TempDir run;
  const auto result = run_dtrain(str("train --model gpt2-tiny --text ", DTRAIN_SOURCE_DIR,
                                     "/README.md --steps 4 --warmup 1 --batch 2 --seq 16 --run-dir ", run.file("run")));
  ASSERT_EQ(result.status, 0) << result.output;
  std::vector<double> losses;
  for (size_t at = 0; (at = result.output.find("/4 | loss ", at)) != std::string::npos; at += 10)
    losses.push_back(std::stod(result.output.substr(at + 10)));
  ASSERT_EQ(losses.size(), 4u) << result.output;
  EXPECT_LT(losses.back(), losses.front()) << result.output;
  EXPECT_NE(result.output.find("memory: parameters"), std::string::npos) << result.output;

  // metrics.jsonl: one object per step with every documented field.
  std::ifstream metrics(run.file("run/metrics.jsonl"));
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    for (const char* key : {"\"step\":", "\"loss\":", "\"lr\":", "\"grad_norm\":", "\"tokens\":32", "\"tokens_per_s\":",
                            "\"step_ms\":", "\"mfu\":", "\"loss_scale\":", "\"skipped\":false", "\"peak_bytes\":{\"parameters\":"})
      EXPECT_NE(line.find(key), std::string::npos) << key << " missing from " << line;
  }
  EXPECT_EQ(lines, 4);
  // The TensorBoard events hold the same losses.
  std::string events;
  for (const auto& entry : std::filesystem::directory_iterator(run.file("run")))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) events = entry.path().string();
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(testing::run_reference_script("tensorboard_reader.py", events + " " + run.file("scalars.txt")), 0);
  std::ifstream scalars(run.file("scalars.txt"));
  int loss_points = 0;
  while (std::getline(scalars, line)) loss_points += line.starts_with("train/loss ");
  EXPECT_EQ(loss_points, 4);
}

}  // namespace
}  // namespace dt
