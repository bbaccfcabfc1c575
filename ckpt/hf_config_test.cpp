// config.json against transformers itself (tests/reference/hf_config_reference.py): configs that
// transformers wrote read back as the model they describe, and the configs we write load in
// transformers with the same sizes.
#include "ckpt/hf_config.h"

#include <gtest/gtest.h>

#include <functional>

#include <fstream>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

// Every field that shapes the model or what it computes.
void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.ffn_hidden(), b.ffn_hidden());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.moe.experts, b.moe.experts);
  EXPECT_EQ(a.moe.expert_hidden, b.moe.expert_hidden);
  EXPECT_EQ(a.moe.routing.score, b.moe.routing.score);
  EXPECT_EQ(a.moe.routing.top_k, b.moe.routing.top_k);
  EXPECT_EQ(a.moe.routing.renormalize, b.moe.routing.renormalize);
  EXPECT_EQ(a.moe.routing.route_scale, b.moe.routing.route_scale);
  EXPECT_EQ(a.moe.shared_hidden, b.moe.shared_hidden);
  EXPECT_EQ(a.moe.shared_gate, b.moe.shared_gate);
  EXPECT_EQ(a.moe.first_dense_layers, b.moe.first_dense_layers);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  if (a.family == ModelFamily::llama) {
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_scaling_factor, b.rope_scaling_factor);
    if (a.rope_scaling_factor > 0) {
      EXPECT_EQ(a.rope_low_freq_factor, b.rope_low_freq_factor);
      EXPECT_EQ(a.rope_high_freq_factor, b.rope_high_freq_factor);
      EXPECT_EQ(a.rope_original_max_seq_len, b.rope_original_max_seq_len);
    }
  }
}

// The model a config.json describes that transformers wrote from `family_and_keys` ("llama
// num_hidden_layers=2 ...": its config class's keyword arguments).
ModelConfig read_written_by_transformers(const std::string& family_and_keys) {
  testing::TempDir dir;
  EXPECT_EQ(testing::run_reference_script("hf_config_reference.py",
                                          str("write ", dir.path().string(), " ", family_and_keys)),
            0);
  return ckpt::model_config_from_hf(dir.path() / "config.json");
}

TEST(HfConfig, ReadsAGpt2ConfigWrittenByTransformers) {
  const ModelConfig c = read_written_by_transformers("gpt2 n_layer=3 n_embd=96 n_head=4 vocab_size=997 n_positions=128");
  expect_same_model(c, {.family = ModelFamily::gpt2, .n_layer = 3, .d_model = 96, .n_head = 4, .vocab_size = 997,
                        .max_seq_len = 128, .norm_eps = 1e-5f});
  EXPECT_EQ(c.ffn_hidden(), 4 * 96);  // n_inner null
}

TEST(HfConfig, ReadsALlamaConfigWrittenByTransformers) {
  expect_same_model(
      read_written_by_transformers(
          "llama num_hidden_layers=2 hidden_size=64 num_attention_heads=8 num_key_value_heads=2 "
          "intermediate_size=160 vocab_size=1000 max_position_embeddings=512 rms_norm_eps=1e-05 "
          "rope_theta=500000.0 tie_word_embeddings=true "
          "'rope_scaling={\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":2.0,"
          "\"high_freq_factor\":6.0,\"original_max_position_embeddings\":128}'"),
      {.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 8, .n_kv_head = 2,
       .ffn_hidden_size = 160, .vocab_size = 1000, .max_seq_len = 512, .tied_embeddings = true,
       .norm_eps = 1e-5f, .rope_theta = 500000, .rope_scaling_factor = 8, .rope_low_freq_factor = 2,
       .rope_high_freq_factor = 6, .rope_original_max_seq_len = 128});
}

TEST(HfConfig, ReadsAMixtralConfigWrittenByTransformers) {
  ModelConfig expected{.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 8, .n_kv_head = 2,
                       .ffn_hidden_size = 96, .vocab_size = 1000, .max_seq_len = 512, .tied_embeddings = false,
                       .norm_eps = 1e-5f, .rope_theta = 1e6};
  expected.moe = {.experts = 6, .expert_hidden = 96, .routing = {.top_k = 3}};
  expect_same_model(read_written_by_transformers(
                        "mixtral num_hidden_layers=2 hidden_size=64 num_attention_heads=8 num_key_value_heads=2 "
                        "intermediate_size=96 vocab_size=1000 max_position_embeddings=512 rms_norm_eps=1e-05 "
                        "rope_theta=1000000.0 num_local_experts=6 num_experts_per_tok=3"),
                    expected);
}

TEST(HfConfig, ReadsAnOlmoeConfigWrittenByTransformers) {
  ModelConfig expected{.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 8, .n_kv_head = 8,
                       .ffn_hidden_size = 48, .vocab_size = 1000, .max_seq_len = 512, .tied_embeddings = false,
                       .qk_norm = true, .norm_eps = 1e-5f, .rope_theta = 10000};
  expected.moe = {.experts = 6, .expert_hidden = 48, .routing = {.top_k = 3, .renormalize = false}};
  expect_same_model(read_written_by_transformers(
                        "olmoe num_hidden_layers=2 hidden_size=64 num_attention_heads=8 num_key_value_heads=8 "
                        "intermediate_size=48 vocab_size=1000 max_position_embeddings=512 rms_norm_eps=1e-05 "
                        "rope_theta=10000.0 num_experts=6 num_experts_per_tok=3 norm_topk_prob=false"),
                    expected);
}

// What we write, transformers reads with the same sizes; and we read it back unchanged.
TEST(HfConfig, WrittenConfigsLoadInTransformers) {
  for (const char* preset :
       {"gpt2-124m", "gpt2-tiny", "llama3.2-1b", "llama-tiny", "llama3-8b", "moe-tiny", "mixtral-8x7b", "qwen1.5-moe-a2.7b",
        "olmoe-1b-7b"}) {
    SCOPED_TRACE(preset);
    const ModelConfig c = model_preset(preset);
    testing::TempDir dir;
    std::ofstream(dir.path() / "config.json") << ckpt::hf_config_json(c).dump(2);
    expect_same_model(ckpt::model_config_from_hf(dir.path() / "config.json"), c);
    ASSERT_EQ(testing::run_reference_script("hf_config_reference.py",
                                            str("read ", dir.path().string(), " ", dir.file("seen.json"))),
              0);
    nlohmann::json seen;
    std::ifstream(dir.path() / "seen.json") >> seen;
    if (c.family == ModelFamily::gpt2) {
      EXPECT_EQ(seen["n_layer"], c.n_layer);
      EXPECT_EQ(seen["n_embd"], c.d_model);
      EXPECT_EQ(seen["n_head"], c.n_head);
      EXPECT_TRUE(seen["n_inner"].is_null());
      EXPECT_EQ(seen["vocab_size"], c.vocab_size);
      EXPECT_EQ(seen["n_positions"], c.max_seq_len);
      EXPECT_EQ(seen["layer_norm_epsilon"], 1e-5);
      EXPECT_EQ(seen["activation_function"], "gelu_new");
      EXPECT_EQ(seen["tie_word_embeddings"], true);
    } else {
      EXPECT_EQ(seen["num_hidden_layers"], c.n_layer);
      EXPECT_EQ(seen["hidden_size"], c.d_model);
      EXPECT_EQ(seen["num_attention_heads"], c.n_head);
      EXPECT_EQ(seen["num_key_value_heads"], c.n_kv_head);
      EXPECT_EQ(seen["intermediate_size"], c.ffn_hidden_size);
      EXPECT_EQ(seen["vocab_size"], c.vocab_size);
      EXPECT_EQ(seen["max_position_embeddings"], c.max_seq_len);
      // Written as the shortest decimal of the f32 value (Qwen's 1e-06, the others' 1e-05), read exactly.
      EXPECT_EQ(seen["rms_norm_eps"], c.norm_eps == 1e-6f ? 1e-6 : 1e-5);
      EXPECT_EQ(seen["rope_theta"], c.rope_theta);
      EXPECT_EQ(seen["tie_word_embeddings"], c.tied_embeddings);
      if (c.moe.shared_hidden > 0) {
        EXPECT_EQ(seen["model_type"], "qwen2_moe");
        EXPECT_EQ(seen["num_experts"], c.moe.experts);
        EXPECT_EQ(seen["num_experts_per_tok"], c.moe.routing.top_k);
        EXPECT_EQ(seen["moe_intermediate_size"], c.moe.expert_hidden);
        EXPECT_EQ(seen["shared_expert_intermediate_size"], c.moe.shared_hidden);
        EXPECT_EQ(seen["norm_topk_prob"], c.moe.routing.renormalize);
        EXPECT_EQ(seen["mlp_only_layers"].size(), static_cast<size_t>(c.moe.first_dense_layers));
        EXPECT_EQ(seen["use_sliding_window"], false);
      } else if (c.qk_norm) {
        EXPECT_EQ(seen["model_type"], "olmoe");
        EXPECT_EQ(seen["num_experts"], c.moe.experts);
        EXPECT_EQ(seen["num_experts_per_tok"], c.moe.routing.top_k);
        EXPECT_EQ(seen["norm_topk_prob"], c.moe.routing.renormalize);
        EXPECT_TRUE(seen["clip_qkv"].is_null());
      } else if (c.moe.experts > 0) {
        EXPECT_EQ(seen["model_type"], "mixtral");
        EXPECT_EQ(seen["num_local_experts"], c.moe.experts);
        EXPECT_EQ(seen["num_experts_per_tok"], c.moe.routing.top_k);
        EXPECT_TRUE(seen["sliding_window"].is_null());
        EXPECT_EQ(seen["router_jitter_noise"], 0.0);
      } else if (c.rope_scaling_factor > 0) {
        EXPECT_EQ(seen["rope_scaling"]["rope_type"], "llama3");
        EXPECT_EQ(seen["rope_scaling"]["factor"], c.rope_scaling_factor);
        EXPECT_EQ(seen["rope_scaling"]["original_max_position_embeddings"], c.rope_original_max_seq_len);
      } else {
        EXPECT_TRUE(seen["rope_scaling"].is_null());
      }
    }
  }
}

void expect_rejected(const nlohmann::json& config, const std::string& message) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "config.json") << config.dump();
  try {
    ckpt::model_config_from_hf(dir.path() / "config.json");
    ADD_FAILURE() << "accepted " << config.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.file("config.json")), std::string::npos) << e.what();
  }
}

TEST(HfConfig, RejectsWhatWeWouldComputeDifferently) {
  nlohmann::json gpt2 = ckpt::hf_config_json(model_preset("gpt2-tiny"));
  gpt2["activation_function"] = "gelu";
  expect_rejected(gpt2, "activation_function = \"gelu\": dtrain computes only \"gelu_new\"");
  nlohmann::json llama = ckpt::hf_config_json(model_preset("llama-tiny"));
  llama["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_rejected(llama, "only rope_type \"llama3\"");
  llama = ckpt::hf_config_json(model_preset("llama-tiny"));
  llama.erase("hidden_size");
  expect_rejected(llama, "hidden_size is missing");
  llama = ckpt::hf_config_json(model_preset("llama-tiny"));
  llama["num_hidden_layers"] = "2";
  expect_rejected(llama, "num_hidden_layers = \"2\": expected an integer");
  llama["model_type"] = "mistral";
  expect_rejected(llama, "model_type = \"mistral\": dtrain reads \"gpt2\", \"llama\", \"qwen2\", \"mixtral\", "
                         "\"qwen2_moe\" and \"olmoe\" models");
  nlohmann::json olmoe = ckpt::hf_config_json(model_preset("olmoe-1b-7b"));
  olmoe["clip_qkv"] = 8.0;
  expect_rejected(olmoe, "clip_qkv = 8.0: dtrain does not clip q, k and v");
  nlohmann::json mixtral = ckpt::hf_config_json(model_preset("moe-tiny"));
  mixtral["sliding_window"] = 4096;
  expect_rejected(mixtral, "sliding_window = 4096: dtrain's attention is over the whole sequence");
  mixtral = ckpt::hf_config_json(model_preset("moe-tiny"));
  mixtral["router_jitter_noise"] = 0.01;
  expect_rejected(mixtral, "router_jitter_noise = 0.01: dtrain computes only 0.0");
  nlohmann::json qwen = ckpt::hf_config_json(model_preset("qwen1.5-moe-a2.7b"));
  qwen["mlp_only_layers"] = {0, 2};
  expect_rejected(qwen, "mlp_only_layers = [0,2]: dtrain's dense blocks are the first ones, [0, 1, ...]");
  qwen = ckpt::hf_config_json(model_preset("qwen1.5-moe-a2.7b"));
  qwen["decoder_sparse_step"] = 2;
  expect_rejected(qwen, "decoder_sparse_step = 2: dtrain's expert blocks are every block after the dense ones");
  qwen["model_type"] = "qwen2", qwen["use_sliding_window"] = true;
  expect_rejected(qwen, "use_sliding_window = true: dtrain's attention is over the whole sequence");
}

// A model the architecture it would be written as cannot express is not written: Mixtral without
// a shared expert, Qwen2-MoE with one, Qwen2 with q, k, v biases, OLMoE with query and key norms;
// the field is named.
TEST(HfConfig, AModelItsArchitectureCannotExpressIsNotWritten) {
  const auto refusal = [](const std::function<void(ModelConfig&)>& change, const char* preset) {
    ModelConfig c = model_preset(preset);
    change(c);
    try {
      ckpt::hf_config_json(c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("written");
  };
  const std::pair<std::string, std::string> cases[] = {
      {refusal([](ModelConfig& c) { c.moe.routing.score = kernels::MoeScore::sigmoid; }, "moe-tiny"),
       "model.moe_score = \"sigmoid\" is not what Hugging Face's mixtral computes"},
      {refusal([](ModelConfig& c) { c.qkv_bias = true; }, "moe-tiny"),
       "model.qkv_bias = true is not what Hugging Face's mixtral computes"},
      {refusal([](ModelConfig& c) { c.moe.shared_gate = false; }, "qwen1.5-moe-a2.7b"),
       "model.moe_shared_gate = false is not what Hugging Face's qwen2_moe computes"},
      {refusal([](ModelConfig& c) { c.qkv_bias = false; }, "qwen1.5-moe-a2.7b"),
       "model.qkv_bias = false is not what Hugging Face's qwen2_moe computes"},
      {refusal([](ModelConfig& c) { c.qkv_bias = true; }, "llama3.2-1b"),
       "model.rope_scaling_factor = 32 is not what Hugging Face's qwen2 computes"},
      {refusal([](ModelConfig& c) { c.qk_norm = true; }, "llama-tiny"),
       "model.qk_norm = true is not what Hugging Face's llama computes"},
      {refusal([](ModelConfig& c) { c.qk_norm = true; }, "qwen1.5-moe-a2.7b"),
       "model.qk_norm = true is not what Hugging Face's qwen2_moe computes"},
      {refusal([](ModelConfig& c) { c.moe.first_dense_layers = 1; }, "olmoe-1b-7b"),
       "model.moe_first_dense_layers = 1 is not what Hugging Face's olmoe computes"}};
  for (const auto& [message, expected] : cases)
    EXPECT_NE(message.find(str("this model has no Hugging Face configuration: ", expected)), std::string::npos)
        << message;
}

TEST(HfConfig, ReadsAQwen2MoeConfigWrittenByTransformers) {
  ModelConfig expected{.family = ModelFamily::llama, .n_layer = 3, .d_model = 64, .n_head = 8, .n_kv_head = 2,
                       .ffn_hidden_size = 96, .vocab_size = 1000, .max_seq_len = 512, .tied_embeddings = false,
                       .qkv_bias = true, .norm_eps = 1e-6f, .rope_theta = 1e6};
  expected.moe = {.experts = 6, .expert_hidden = 32, .routing = {.top_k = 3, .renormalize = true},
                  .shared_hidden = 80, .shared_gate = true, .first_dense_layers = 1};
  expect_same_model(read_written_by_transformers(
                        "qwen2_moe num_hidden_layers=3 hidden_size=64 num_attention_heads=8 num_key_value_heads=2 "
                        "intermediate_size=96 vocab_size=1000 max_position_embeddings=512 rms_norm_eps=1e-06 "
                        "rope_theta=1000000.0 num_experts=6 num_experts_per_tok=3 moe_intermediate_size=32 "
                        "shared_expert_intermediate_size=80 norm_topk_prob=true mlp_only_layers=[0]"),
                    expected);
}

}  // namespace
}  // namespace dt
