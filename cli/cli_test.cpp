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
        Mistake{"misspelt_command", "dat prepare --out x", 2,
                "unknown command 'dat prepare' (did you mean 'dtrain data prepare'?)"},
        Mistake{"misspelt_flag", "bench step --modle gpt2-tiny", 1, "unknown flag --modle (did you mean --model?)"},
        Mistake{"flag_without_value", "bench step --steps", 1, "flag --steps needs a value"},
        Mistake{"non_integer_value", "bench step --steps abc", 1, "--steps = 'abc' is not an integer"},
        Mistake{"unknown_preset", "model info gpt2-125m", 1, "unknown model preset 'gpt2-125m'; valid presets are"},
        Mistake{"heads_do_not_divide", "bench step --model gpt2-tiny --d-model 50", 1,
                "model.d_model = 50: must be divisible by n_head = 3"},
        Mistake{"zero_layers", "bench step --model gpt2-tiny --n-layer 0", 1, "model.n_layer = 0: must be at least 1"},
        Mistake{"negative_size", "model info gpt2-tiny --vocab-size -3", 1, "model.vocab_size = -3"},
        Mistake{"sequence_beyond_model", "bench step --model gpt2-tiny --seq 100", 1,
                "sequence length 100 must be in [1, model.max_seq_len = 64]"},
        Mistake{"unknown_recompute", "bench step --model gpt2-tiny --recompute partial", 1,
                "unknown recomputation policy 'partial'; valid policies are none, selective, full"},
        Mistake{"unknown_precision", "bench step --model gpt2-tiny --precision fp8", 1,
                "unknown precision 'fp8'; valid precisions are f32, bf16"},
        Mistake{"fp8_without_bf16", "bench step --model gpt2-tiny --seq 64 --fp8 tensorwise", 1,
                "bench step: --fp8 tensorwise quantizes bf16 activations and weights; add --precision bf16"},
        Mistake{"unknown_fp8_recipe", "bench step --model gpt2-tiny --precision bf16 --fp8 current", 1,
                "unknown FP8 recipe 'current'; train.fp8 is none, tensorwise, delayed or blockwise"},
        Mistake{"model_info_two_presets", "model info gpt2-tiny --model llama-tiny", 1,
                "model info: give one preset, either as a word or as --model"},
        Mistake{"inspect_without_checkpoint", "ckpt inspect", 1, "ckpt inspect: give one checkpoint directory"},
        Mistake{"train_without_config", "train", 1, "train: no configuration file given"},
        Mistake{"train_missing_config", "train /no/such/run.toml", 1,
                "cannot read run configuration '/no/such/run.toml': no such file or not readable"},
        Mistake{"generate_without_model", "generate --prompt hi", 1, "--checkpoint"},
        Mistake{"export_without_output", "export --checkpoint /no/such/dir", 1, "--hf OUT"},
        Mistake{"eval_without_data", "eval --checkpoint /no/such/dir", 1, "eval: give the shards with --data DIR"}),
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


// cuBLASLt is opened only when a GEMM runs on the GPU (kernels/cuda/cublaslt_library.h): loading
// it costs a process about 210 MB of resident memory. The dynamic loader's log of the files it
// opens shows a CPU command load the other libraries, and not it.
TEST(Cli, ACpuCommandDoesNotLoadCuBlasLt) {
  const auto result = testing::run_dtrain("model info --model gpt2-tiny", "LD_DEBUG=files ");
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("file=libopenblas"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("libcublasLt"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace dt
