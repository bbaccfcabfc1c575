#include "model/config.h"

#include <gtest/gtest.h>

#include "core/allocator.h"
#include "model/gpt2.h"
#include "model/parameters.h"

namespace dt {
namespace {

// The published counts (tied input/output embedding, no padding).
TEST(ModelConfig, PresetParameterCountsArePublished) {
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-124m")).num_parameters(), 124'439'808);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-355m")).num_parameters(), 354'823'168);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-774m")).num_parameters(), 774'030'080);
  EXPECT_EQ(ParameterLayout(model_preset("gpt2-1558m")).num_parameters(), 1'557'611'200);
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
  const size_t before = memory_stats(Device::cpu).total_current_bytes;
  const ParameterLayout layout(model_preset("gpt2-1558m"));
  EXPECT_EQ(memory_stats(Device::cpu).total_current_bytes, before);
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
  EXPECT_THROW(GPT2(c, 2, 8), Error);
  EXPECT_EQ(memory_stats(Device::cpu).total_peak_bytes, memory_stats(Device::cpu).total_current_bytes);
  EXPECT_THROW(GPT2(model_preset("gpt2-tiny"), 2, 65), Error);  // seq_len above max_seq_len
  EXPECT_THROW(GPT2(model_preset("gpt2-tiny"), 0, 8), Error);
}

}  // namespace
}  // namespace dt
