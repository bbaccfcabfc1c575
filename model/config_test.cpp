#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>

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
  // Mixtral 8x7B: 46.7B parameters, 12.9B of them active per token (Mistral AI's figures).
  const ParameterLayout mixtral(model_preset("mixtral-8x7b"));
  EXPECT_EQ(mixtral.num_parameters(), 46'702'792'704);
  EXPECT_EQ(mixtral.active_parameters(), 12'879'925'248);
  // Qwen1.5-MoE-A2.7B: 14.3B parameters in total, 2.7B activated (Qwen's model card), the q, k, v
  // biases and the shared expert with its gate among them.
  const ParameterLayout qwen(model_preset("qwen1.5-moe-a2.7b"));
  EXPECT_EQ(qwen.num_parameters(), 14'315'784'192);
  EXPECT_EQ(qwen.active_parameters(), 2'689'173'504);
  EXPECT_EQ(ParameterLayout(model_preset("llama3-8b")).active_parameters(), 8'030'261'248);  // dense: all
}

// A mixture-of-experts block holds a router (E, C), every expert's gate and up projections
// (E, 2 F_e, C) and down projections (E, C, F_e), and a shared expert split over tensor-parallel
// ranks like a dense MLP; blocks before first_dense_layers keep the dense MLP.
// ceil(factor · N · k / E) rows per expert; the experts' rows are N · k, or E capacities when fewer.
TEST(ModelConfig, AnExpertsCapacityIsTheFactorTimesItsShareOfTheAssignments) {
  MoeConfig m = model_preset("moe-tiny").moe;  // top 2 of 4
  EXPECT_EQ(m.capacity(37), 0);                 // dropless
  EXPECT_EQ(m.expert_rows(37), 74);
  m.capacity_factor = 1.25f;                    // 1.25 · 37 · 2 / 4 = 23.125
  EXPECT_EQ(m.capacity(37), 24);
  EXPECT_EQ(m.expert_rows(37), 74);             // 4 · 24 = 96 > 74: no fewer rows than dropless
  m.capacity_factor = 0.5f;                     // 9.25
  EXPECT_EQ(m.capacity(37), 10);
  EXPECT_EQ(m.expert_rows(37), 40);
}

// Under expert parallelism a rank's experts receive at most every rank's rows for them: each row
// at most min(top_k, the rank's experts) times, or within a capacity each rank's capacities.
TEST(ModelConfig, ARanksExpertsReceiveAtMostEveryRanksRowsOrCapacities) {
  MoeConfig m = model_preset("moe-tiny").moe;  // top 2 of 4
  EXPECT_EQ(m.received_rows(37, 4, 1), m.expert_rows(37));  // one rank: its own
  EXPECT_EQ(m.received_rows(37, 2, 3), 3 * 37 * 2);
  EXPECT_EQ(m.received_rows(37, 1, 4), 4 * 37);             // one expert a rank: each row once
  m.capacity_factor = 0.5f;                                  // capacity 10
  EXPECT_EQ(m.received_rows(37, 4, 1), m.expert_rows(37));
  EXPECT_EQ(m.received_rows(37, 2, 3), 3 * 2 * 10);
}

TEST(ModelConfig, ExpertBlocksHoldRouterExpertsAndSharedExpert) {
  ModelConfig c = model_preset("moe-tiny");  // d_model 48, 4 experts of 32
  c.n_layer = 3;
  c.moe.first_dense_layers = 1;
  c.moe.shared_hidden = 40;
  c.moe.shared_gate = true;
  for (const int tp : {1, 2}) {
    const ParameterLayout layout(c, kParamAlignment, {tp - 1, tp});
    EXPECT_EQ(layout.find("h.0.mlp.fc.weight").shape, Shape({2 * 32 / tp, 48}));  // dense: ffn_hidden 32
    EXPECT_THROW(layout.find("h.0.mlp.router.weight"), Error);
    for (const std::string h : {"h.1.", "h.2."}) {
      EXPECT_THROW(layout.find(h + "mlp.fc.weight"), Error);
      EXPECT_EQ(layout.find(h + "mlp.router.weight").shape, Shape({4, 48}));
      const ParamInfo& fc = layout.find(h + "mlp.experts.fc.weight");
      EXPECT_EQ(fc.shape, Shape({4, 64, 48}));
      EXPECT_TRUE(fc.is_expert && fc.is_matrix);
      EXPECT_EQ(fc.slice.pieces.front().owned, tp == 1) << "rank " << tp - 1 << " of " << tp << ": the first owns";
      EXPECT_EQ(layout.find(h + "mlp.experts.proj.weight").shape, Shape({4, 48, 32}));
      EXPECT_EQ(layout.find(h + "mlp.shared.fc.weight").shape, Shape({2 * 40 / tp, 48}));
      EXPECT_EQ(layout.find(h + "mlp.shared.proj.weight").shape, Shape({48, 40 / tp}));
      EXPECT_EQ(layout.find(h + "mlp.shared_gate.weight").shape, Shape({1, 48}));
    }
  }
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
  c = model_preset("gpt2-tiny");
  c.qkv_bias = true;
  EXPECT_NE(error_of(c).find("model.qkv_bias = true: must be false for gpt2, whose layers all have biases"),
            std::string::npos)
      << error_of(c);
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

TEST(ModelConfig, InvalidExpertDescriptionsNameFieldValueAndRange) {
  const auto error_with = [](auto change) {
    ModelConfig c = model_preset("moe-tiny");
    change(c);
    return error_of(c);
  };
  const auto expect_error = [](const std::string& error, const std::string& expected) {
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  };
  expect_error(error_with([](ModelConfig& c) { c.moe.routing.top_k = 5; }),
               "model.moe_top_k = 5: must be in [1, moe_experts = 4]");
  expect_error(error_with([](ModelConfig& c) { c.moe.experts = 1; }),
               "model.moe_experts = 1: must be 0 (a dense MLP) or in [2, 4096]");
  expect_error(error_with([](ModelConfig& c) { c.moe.expert_hidden = 0; }), "model.moe_expert_hidden = 0");
  expect_error(error_with([](ModelConfig& c) { c.moe.routing.route_scale = 0; }),
               "model.moe_route_scale = 0: must be finite and above 0");
  expect_error(error_with([](ModelConfig& c) { c.moe.shared_gate = true; }),
               "model.moe_shared_gate = true: gates the shared expert, so needs moe_shared_hidden > 0");
  expect_error(error_with([](ModelConfig& c) { c.moe.bias_update_rate = -0.001f; }),
               "model.moe_bias_update_rate = -0.001: must be in [0, 1] (0: no balancing bias");
  expect_error(error_with([](ModelConfig& c) { c.moe.aux_loss_coef = 1.5f; }),
               "model.moe_aux_loss_coef = 1.5: must be in [0, 1] (0: no load-balancing loss");
  expect_error(error_with([](ModelConfig& c) { c.moe.capacity_factor = -1; }),
               "model.moe_capacity_factor = -1: must be 0 (dropless: no token dropped) or in (0, 64]");
  expect_error(error_with([](ModelConfig& c) { c.moe.z_loss_coef = std::nanf(""); }),
               "model.moe_z_loss_coef = nan: must be in [0, 1] (0: no router z-loss");
  expect_error(error_with([](ModelConfig& c) { c.moe.first_dense_layers = 2; }),
               "model.moe_first_dense_layers = 2: must be in [0, n_layer = 2)");
  ModelConfig gpt2 = model_preset("gpt2-tiny");
  gpt2.moe = model_preset("moe-tiny").moe;
  expect_error(error_of(gpt2), "model.moe_experts = 4: needs SwiGLU experts, which the gpt2 family's MLP is not");
}

}  // namespace
}  // namespace dt
