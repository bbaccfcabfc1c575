// Generation end to end: greedy decoding of Hugging Face models built by transformers must give
// transformers' own model.generate() tokens; stop tokens, streaming and the capacity check.
#include "train/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "ckpt/hf_checkpoint.h"
#include "model/parameters.h"
#include "tests/hf_testing.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::HfCase;
using testing::sized;
using testing::TempDir;

constexpr int kNewTokens = 20;


std::vector<int32_t> prompt_of(const ModelConfig& c, int count) {
  std::vector<int32_t> ids;
  for (int t = 0; t < count; ++t) ids.push_back(static_cast<int32_t>((t * 37 + 11) % c.vocab_size));
  return ids;
}

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += str(i ? "," : "", ids[i]);
  return s;
}

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  std::string field;
  while (std::getline(in, field, ',')) ids.push_back(static_cast<int32_t>(std::stoi(field)));
  return ids;
}

class GenerateVsTransformers : public ::testing::TestWithParam<HfCase> {};

// Token ids are compared exactly. Both sides compute f32 logits that agree to ~1e-6 of the
// largest (model/inference_test.cpp against our training forward, ckpt/hf_checkpoint_test.cpp
// against transformers), and the largest is ~1.5 here, so ~2e-6 apart. The reference prints the
// smallest gap between the best and second-best logit over its steps: measured 6.8e-5 (gpt2),
// 1.4e-3 (llama) and 1.6e-3 (mixtral), 30 to 800 times that, so rounding cannot flip a choice and
// a difference is a bug (a position, the cache, the grouped-query mapping, an expert's routing).
TEST_P(GenerateVsTransformers, GreedyTokensEqualModelGenerate) {
  const ModelConfig& config = GetParam().model;
  TempDir dir;
  ASSERT_EQ(testing::run_reference_script("hf_reference.py",
                                          str("make ", dir.path().string(), " ", testing::hf_make_args(config))),
            0);
  const std::vector<int32_t> prompt = prompt_of(config, 5);
  ASSERT_EQ(testing::run_reference_script("generate_reference.py", str(dir.path().string(), " ", joined(prompt), " ",
                                                                       kNewTokens, " ", dir.file("ids.txt"))),
            0);
  const std::vector<int32_t> expected = read_ids(dir.file("ids.txt"));
  ASSERT_EQ(expected.size(), static_cast<size_t>(kNewTokens));

  const ParameterLayout layout(config);
  FlatTensors params(layout, MemTag::parameters);
  ckpt::load_hf_safetensors(params, dir.file("model.safetensors"));
  InferenceSession session(params, static_cast<int>(prompt.size()) + kNewTokens);
  std::vector<int32_t> streamed;
  const std::vector<int32_t> ours =
      generate(session, prompt, {.max_new_tokens = kNewTokens, .sampling = {.temperature = 0}},
               [&](int32_t token) { streamed.push_back(token); });
  EXPECT_EQ(ours, expected);
  EXPECT_EQ(streamed, ours);
}

INSTANTIATE_TEST_SUITE_P(
    Generate, GenerateVsTransformers,
    ::testing::Values(HfCase{"gpt2", sized("gpt2-tiny", 97, 64)},
                      // 6 heads over 2 KV heads, untied, Llama 3 rope scaling.
                      HfCase{"llama_gqa_untied_scaled",
                             [] {
                               ModelConfig c = sized("llama-tiny", 97, 128);
                               c.rope_scaling_factor = 8, c.rope_original_max_seq_len = 64;
                               return c;
                             }()},
                      // Mixtral's top 2 of 4 experts, a token's choice the same in the prompt and alone.
                      HfCase{"mixtral", sized("moe-tiny", 97, 64)},
                      // Qwen2-MoE: q, k, v biases, 6 experts (top 2) beside a gated shared expert.
                      HfCase{"qwen2_moe",
                             [] {
                               ModelConfig c = sized("moe-tiny", 97, 64);
                               c.qkv_bias = true, c.moe.experts = 6, c.moe.routing.renormalize = false;
                               c.moe.shared_hidden = 40, c.moe.shared_gate = true;
                               return c;
                             }()}),
    [](const auto& info) { return std::string(info.param.name); });

// A small random model of our own for the tests that need no reference.
struct LocalModel {
  ModelConfig config = [] {
    ModelConfig c = model_preset("llama-tiny");
    c.max_seq_len = 32;
    return c;
  }();
  ParameterLayout layout{config};
  FlatTensors params{layout, MemTag::parameters};
  LocalModel() { init_parameters(params, 7); }
};

TEST(Generate, StopTokenEndsGenerationAndIsNotEmitted) {
  LocalModel m;
  InferenceSession session(m.params, 32);
  const std::vector<int32_t> prompt = prompt_of(m.config, 4);
  const GenerateOptions greedy{.max_new_tokens = 12, .sampling = {.temperature = 0}};
  const std::vector<int32_t> all = generate(session, prompt, greedy);
  ASSERT_EQ(all.size(), 12u);
  // Stopping at the token generated 6th: what came before its first occurrence comes out.
  GenerateOptions stopping = greedy;
  stopping.stop_token = all[5];
  const std::vector<int32_t> expected(all.begin(), std::find(all.begin(), all.end(), all[5]));
  std::vector<int32_t> streamed;
  EXPECT_EQ(generate(session, prompt, stopping, [&](int32_t t) { streamed.push_back(t); }), expected);
  EXPECT_EQ(streamed, expected);
}

TEST(Generate, SampledGenerationIsReproducibleFromTheSeed) {
  LocalModel m;
  InferenceSession session(m.params, 32);
  const std::vector<int32_t> prompt = prompt_of(m.config, 3);
  GenerateOptions options{.max_new_tokens = 25,
                          .sampling = {.temperature = 1.0f, .top_k = 50, .top_p = 0.95f, .seed = 5}};
  const std::vector<int32_t> first = generate(session, prompt, options);
  EXPECT_EQ(generate(session, prompt, options), first);  // generate() empties the session first
  options.sampling.seed = 6;
  EXPECT_NE(generate(session, prompt, options), first);
}

TEST(Generate, CapacityAndBadOptionsFailBeforeAnyTokenIsStreamed) {
  LocalModel m;
  InferenceSession session(m.params, 16);
  const std::vector<int32_t> prompt = prompt_of(m.config, 10);
  int streamed = 0;
  const auto count = [&](int32_t) { ++streamed; };
  // 10 prompt tokens + 6 fed back = 16 positions: the seventh token is sampled, never fed back.
  EXPECT_EQ(generate(session, prompt, {.max_new_tokens = 7, .sampling = {.temperature = 0}}, count).size(), 7u);
  streamed = 0;
  try {
    generate(session, prompt, {.max_new_tokens = 8, .sampling = {.temperature = 0}}, count);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a prompt of 10 tokens and 8 new tokens need 17 positions in the key/value "
                                         "cache, which holds max_tokens = 16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(generate(session, prompt, {.max_new_tokens = 2, .sampling = {.top_p = 2}}, count), Error);
  EXPECT_THROW(generate(session, prompt, {.max_new_tokens = 2, .stop_token = m.config.vocab_size}, count), Error);
  EXPECT_THROW(generate(session, {}, {.max_new_tokens = 2}, count), Error);
  EXPECT_EQ(streamed, 0);
}

}  // namespace
}  // namespace dt
