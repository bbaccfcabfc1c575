// llama.cpp runs what `dtrain export --gguf` writes (ckpt/gguf_export.h; docs/training.md,
// "Quantization"): a small GPT-2 and a small Llama, trained here on the GPL's text with a BPE
// tokenizer of their own, exported at f16, Q8_0 and Q4_0, loaded by llama.cpp itself
// (llama-cpp-python, tests/reference/llama_cpp_greedy.py) with nothing but the file. llama.cpp
// tokenizes the prompt as our tokenizer does, picks the same greedy tokens as `dtrain generate`
// on the same weights (`--quantize`), and its logits are ours within a bound stated below.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "data/tokenizer.h"
#include "model/inference.h"
#include "model/quantized_weights.h"
#include "tests/testing.h"
#include "train/training_checkpoint.h"

namespace dt {
namespace {

// Where scripts/setup.sh --tests installs llama-cpp-python.
constexpr const char* kLlamaCppPython = "/opt/dtrain-llama-cpp/bin/python";
constexpr const char* kPrompt = "The licenses for most software";
constexpr int kGreedyTokens = 12;

class LlamaCppCli : public ::testing::Test {
 protected:
  // The tokenizer and shards, and both models trained: once for the suite.
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir_->file("gpl.txt")) << text;
    run_ok(str("tokenizer train --vocab-size 320 --out ", dir_->file("tokenizer.json"), " ", dir_->file("gpl.txt")));
    run_ok(str("data prepare --tokenizer ", dir_->file("tokenizer.json"), " --out ", dir_->file("data"),
               " --val-fraction 0.05 ", dir_->file("gpl.txt")));
    const std::string common = str("vocab_size = 320\nmax_seq_len = 64\n[data]\ndir = \"", dir_->file("data"),
                                   "\"\nseq_len = 32\n[train]\nsteps = 300\nmicro_batch_size = 8\nglobal_batch_size = 8\n"
                                   "[optim]\nlr = 3e-3\nwarmup_steps = 10\n[log]\nprogress = \"plain\"\nevery = 100\n");
    std::ofstream(dir_->file("gpt2.toml")) << "[model]\nfamily = \"gpt2\"\nn_layer = 2\nd_model = 64\nn_head = 2\n" << common;
    std::ofstream(dir_->file("llama.toml")) << "[model]\nfamily = \"llama\"\nn_layer = 2\nd_model = 64\nn_head = 4\n"
                                               "n_kv_head = 2\nffn_hidden_size = 128\ntied_embeddings = false\n"
                                               "rope_theta = 10000.0\n"
                                            << common;
    for (const char* family : {"gpt2", "llama"})
      run_ok(str("train ", dir_->file(str(family, ".toml")), " log.run_dir=", dir_->file(family)));
  }
  static void TearDownTestSuite() { delete dir_; }

  static void run_ok(const std::string& args) {
    const testing::CommandResult r = testing::run_dtrain(args);
    ASSERT_EQ(r.status, 0) << args << "\n" << r.output;
  }
  static std::filesystem::path checkpoints(const std::string& family) { return dir_->path() / family / "checkpoints"; }

  static testing::TempDir* dir_;
};
testing::TempDir* LlamaCppCli::dir_ = nullptr;

struct LlamaCppRun {
  std::vector<int32_t> prompt, tokens;
  std::vector<std::vector<double>> logits;
};

LlamaCppRun run_llama_cpp(const std::filesystem::path& gguf, const std::filesystem::path& out) {
  const testing::CommandResult r =
      testing::run_command(str(kLlamaCppPython, " ", DTRAIN_SOURCE_DIR, "/tests/reference/llama_cpp_greedy.py ",
                               gguf.string(), " '", kPrompt, "' ", kGreedyTokens, " ", out.string()));
  EXPECT_EQ(r.status, 0) << r.output << "\n(scripts/setup.sh --tests installs llama-cpp-python)";
  const nlohmann::json j = nlohmann::json::parse(testing::file_bytes(out));
  return {j["prompt_tokens"].get<std::vector<int32_t>>(), j["tokens"].get<std::vector<int32_t>>(),
          j["logits"].get<std::vector<std::vector<double>>>()};
}

// How far llama.cpp's logits may be from ours, relative to the largest logit's magnitude. llama.cpp
// rounds what it multiplies: an f16 file's products take the activations in f16 (an 11-bit
// significand, relative error up to 2^-11 per element), a Q8_0 or Q4_0 file's take them quantized
// to Q8_0 (8 bits per block of 32: up to 1/254 of the block's largest), and the quantized files
// hold the embeddings in f16; GPT-2's GELU is a table of f16 values. Measured (the test prints
// it): f16 1.9e-4 (gpt2) and 4.7e-4 (llama) of the largest logit; Q8_0 2.1e-3 and 5.8e-3; Q4_0
// 2.5e-3 and 4.7e-3. The bounds are about three times the largest of each kind.
double logit_bound(const std::string& type) { return type == "f16" ? 1.5e-3 : 1.5e-2; }

class LlamaCppRuns : public LlamaCppCli, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(LlamaCppRuns, TheSameTokensAndLogitsWithinTheBound) {
  const auto [family, type] = GetParam();
  const std::filesystem::path gguf = dir_->path() / str(family, "-", type, ".gguf");
  run_ok(str("export --checkpoint ", checkpoints(family).string(), " --gguf ", gguf.string(), " --quantize ", type,
             " --tokenizer ", dir_->file("tokenizer.json")));
  const LlamaCppRun llama = run_llama_cpp(gguf, dir_->path() / str(family, "-", type, ".json"));

  // llama.cpp's tokenizer, from the file, gives our ids.
  const Tokenizer tokenizer = Tokenizer::load(dir_->file("tokenizer.json"));
  EXPECT_EQ(llama.prompt, tokenizer.encode(kPrompt));

  // Our weights as the file holds them (f16's rounding is left to the bound), run one token at a
  // time along llama.cpp's choices.
  const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(checkpoints(family)));
  const ParameterLayout layout(model_config_of(checkpoint));
  FlatTensors params(layout, MemTag::parameters);
  load_checkpoint_parameters(checkpoint, params);
  if (type != "f16") fake_quantize_weights(params, kernels::parse_weight_format(type));
  InferenceSession session(params, 64);
  std::span<const float> ours = session.prefill(llama.prompt);
  double largest_difference = 0;
  size_t compared = 0;
  for (size_t i = 0; i < llama.tokens.size(); ++i, ++compared) {
    double scale = 0, difference = 0;
    for (size_t v = 0; v < ours.size(); ++v) {
      scale = std::max(scale, std::fabs(static_cast<double>(ours[v])));
      difference = std::max(difference, std::fabs(ours[v] - llama.logits[i][v]));
    }
    largest_difference = std::max(largest_difference, difference / scale);
    // Our greedy choice. Logits apart by at most `difference` can pick differently only where our
    // two best are closer than twice that: there the sequences may part, and are compared no
    // further.
    std::vector<float> sorted(ours.begin(), ours.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    const int32_t choice = static_cast<int32_t>(std::max_element(ours.begin(), ours.end()) - ours.begin());
    if (sorted[0] - sorted[1] < 2 * difference) break;
    EXPECT_EQ(llama.tokens[i], choice) << "token " << i;
    ours = session.next(llama.tokens[i]);
  }
  std::printf("%s %s: %zu of %d greedy tokens compared, largest logit difference %.2e of the largest logit\n",
              family.c_str(), type.c_str(), compared, kGreedyTokens, largest_difference);
  // A third at least: the small models' choices are sometimes close (measured: 6 to 12 of 12).
  EXPECT_GE(compared, 4u) << "the greedy choices are too close to compare";
  EXPECT_LE(largest_difference, logit_bound(type));

  // `dtrain generate` on the same weights writes llama.cpp's text.
  if (type == "f16") return;  // generate runs f32, not f16
  const testing::CommandResult generated = testing::run_dtrain(
      str("generate --checkpoint ", checkpoints(family).string(), " --tokenizer ", dir_->file("tokenizer.json"),
          " --quantize ", type, " --temperature 0 --stop none --max-tokens ", compared, " --prompt '", kPrompt, "'"));
  ASSERT_EQ(generated.status, 0) << generated.output;
  const std::vector<int32_t> picked(llama.tokens.begin(), llama.tokens.begin() + static_cast<long>(compared));
  EXPECT_NE(generated.output.find(kPrompt + tokenizer.decode(picked)), std::string::npos) << generated.output;
}

INSTANTIATE_TEST_SUITE_P(Files, LlamaCppRuns,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::Values("f16", "q8_0", "q4_0")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace dt
