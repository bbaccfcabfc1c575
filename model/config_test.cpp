#include "model/config.h"

#include <gtest/gtest.h>

#include "core/allocator.h"
#include "model/transformer.h"
#include "model/parameters.h"

namespace dt {
namespace {

// The published counts, without vocabulary padding.
TEST(ModelConfig, PresetParameterCountsArePublished) {
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-124m")).num_parameters(), 124'439'808);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-355m")).num_parameters(), 354'823'168);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-774m")).num_parameters(), 774'030'080);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-1558m")).num_parameters(), 1'557'611'200);
  EXPECT_EQ(ParameterLayout(model_preset("llama3.2-1b")).num_parameters(), 1'235'814'400);
  EXPECT_EQ(ParameterLayout(model_preset("llama3.2-3b")).num_parameters(), 3'212'749'824);
  EXPECT_EQ(ParameterLayout(model_preset("llama3-8b")).num_parameters(), 8'030'261'248);
  EXPECT_EQ(ParameterLayout(model_preset("llama3-70b")).num_parameters(), 70'553'706'496);
  EXPECT_EQ(ParameterLayout(model_preset("llama3.1-405b")).num_parameters(), 405'853'388'800);
}

TEST(ModelConfig, LlamaLayoutHasFusedGroupedQkvAndGatedMlpWithoutBiases) {
  const ParameterLayout layout(model_preset("llama3-8b"));
  EXPECT_EQ(layout.find("h.0.attn.qkv.weight").shape, Shape({4096 + 2 * 1024, 4096}));  // 32 q + 2 x 8 kv heads
  EXPECT_EQ(layout.find("h.0.mlp.fc.weight").shape, Shape({2 * 14336, 4096}));          // gate and up
  EXPECT_EQ(layout.find("h.0.mlp.proj.weight").shape, Shape({4096, 14336}));
  EXPECT_EQ(layout.find("lm_head").shape, Shape({128256, 4096}));  // untied
  for (const ParamInfo& p : layout.params()) EXPECT_EQ(p.name.find("bias"), std::string::npos) << p.name;
  EXPECT_THROW(ParameterLayout(model_preset("llama3.2-1b")).find("lm_head"), Error);  // tied
}

TEST(ModelConfig, VocabularyPaddingIsStoredButNotShown) {
  const ModelConfig c = model_preset("gpt2-124m");
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  const ParameterLayout layout(c);
  const ParamInfo& wte = layout.find("wte");
  EXPECT_EQ(wte.shape, Shape({50257, 768}));
  EXPECT_EQ(wte.stored_rows, 50304);
  EXPECT_GT(layout.total_elements(), layout.num_parameters());
}

TEST(ModelConfig, DescribingAModelAllocatesNothing) {
  reset_peak_memory(Device::cpu);
  const size_t before = memory_stats(Device::cpu).total_current_bytes;
  for (const char* name : {"gpt2-1558m", "llama3-70b", "llama3.1-405b"}) {
    const ParameterLayout layout(model_preset(name));
    EXPECT_GE(layout.total_elements(), layout.num_parameters()) << name;
  }
  EXPECT_EQ(memory_stats(Device::cpu).total_peak_bytes, before);
}

std::string error_of(const ModelConfig& c) {
  try {
    validate_model_config(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, InvalidDescriptionsNameFieldValueAndRange) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.d_model = 50;  // 3 heads
  EXPECT_NE(error_of(c).find("model.d_model = 50: must be divisible by n_head = 3"), std::string::npos) << error_of(c);
  c = model_preset("gpt2-tiny");
  c.n_layer = 0;
  EXPECT_NE(error_of(c).find("model.n_layer = 0: must be at least 1"), std::string::npos) << error_of(c);
  c = model_preset("gpt2-tiny");
  c.vocab_size = -5;
  c.max_seq_len = -1;
  const std::string both = error_of(c);  // every problem reported at once
  EXPECT_NE(both.find("model.vocab_size = -5"), std::string::npos) << both;
  EXPECT_NE(both.find("model.max_seq_len = -1"), std::string::npos) << both;
}

TEST(ModelConfig, InvalidLlamaDescriptionsNameFieldValueAndRange) {
  ModelConfig c = model_preset("llama-tiny");  // d_model 48, 6 heads
  c.n_kv_head = 4;
  EXPECT_NE(error_of(c).find("model.n_kv_head = 4: must divide n_head = 6"), std::string::npos) << error_of(c);
  c = model_preset("llama-tiny");
  c.n_head = 16;  // head size 3
  EXPECT_NE(error_of(c).find("model.d_model = 48: gives head size d_model / n_head = 3, but rotary embedding needs an "
                             "even head size"),
            std::string::npos)
      << error_of(c);
  c = model_preset("llama-tiny");
  c.rope_scaling_factor = 0.5;
  EXPECT_NE(error_of(c).find("model.rope_scaling_factor = 0.5: must be 0 (no scaling) or at least 1"), std::string::npos)
      << error_of(c);
  c = model_preset("gpt2-tiny");
  c.n_kv_head = 1;
  EXPECT_NE(error_of(c).find("model.n_kv_head = 1: must equal n_head (or be 0) for gpt2"), std::string::npos)
      << error_of(c);
}

TEST(ModelConfig, UnknownPresetListsValidOnes) {
  try {
    model_preset("gpt2-125m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model preset 'gpt2-125m'; valid presets are gpt2-124m"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, InvalidDescriptionStopsBeforeAllocating) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.n_head = 5;
  reset_peak_memory(Device::cpu);
  EXPECT_THROW(Transformer(c, 2, 8), Error);
  EXPECT_EQ(memory_stats(Device::cpu).total_peak_bytes, memory_stats(Device::cpu).total_current_bytes);
  EXPECT_THROW(Transformer(model_preset("gpt2-tiny"), 2, 65), Error);  // seq_len above max_seq_len
  EXPECT_THROW(Transformer(model_preset("gpt2-tiny"), 0, 8), Error);
}

}  // namespace
}  // namespace dt
