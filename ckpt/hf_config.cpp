#include "ckpt/hf_config.h"

#include <charconv>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace dt::ckpt {

namespace {

using nlohmann::json;

// Reads keys of one config.json, naming the file and the key in every complaint.
class HfKeys {
 public:
  HfKeys(const std::filesystem::path& file, const json& root) : file_(file.string()), root_(root) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw Error(str("Hugging Face config '", file_, "': ", key, what));
  }
  bool has(std::string_view key) const { return root_.contains(key) && !root_.at(std::string(key)).is_null(); }
  const json& at(std::string_view key) const {
    if (!has(key)) fail(key, " is missing; this is not a complete transformers config.json");
    return root_.at(std::string(key));
  }
  int integer(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(key, str(" = ", v.dump(), ": expected an integer"));
    return v.get<int>();
  }
  double number(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, str(" = ", v.dump(), ": expected a number"));
    return v.get<double>();
  }
  bool boolean(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) fail(key, str(" = ", v.dump(), ": expected true or false"));
    return v.get<bool>();
  }
  // Keys that change what the model computes: anything but `supported` is rejected.
  void require_value(std::string_view key, const json& supported, std::string_view meaning) const {
    if (has(key) && at(key) != supported)
      fail(key, str(" = ", at(key).dump(), ": dtrain computes only ", supported.dump(), " (", meaning, ")"));
  }

 private:
  std::string file_;
  const json& root_;
};

ModelConfig gpt2_from_hf(const HfKeys& k) {
  k.require_value("activation_function", "gelu_new", "GELU with the tanh approximation");
  k.require_value("scale_attn_weights", true, "attention scores divided by sqrt(head size)");
  k.require_value("scale_attn_by_inverse_layer_idx", false, "no per-layer score scaling");
  if (!k.boolean("tie_word_embeddings", true))
    k.fail("tie_word_embeddings", " = false: gpt2 models tie the output projection to wte");
  return {.family = ModelFamily::gpt2,
          .n_layer = k.integer("n_layer"),
          .d_model = k.integer("n_embd"),
          .n_head = k.integer("n_head"),
          .ffn_hidden_size = k.has("n_inner") ? k.integer("n_inner") : 0,
          .vocab_size = k.integer("vocab_size"),
          .max_seq_len = k.integer("n_positions"),
          .tied_embeddings = true,
          .norm_eps = static_cast<float>(k.number("layer_norm_epsilon"))};
}

ModelConfig llama_from_hf(const HfKeys& k) {
  k.require_value("hidden_act", "silu", "the SwiGLU MLP");
  k.require_value("attention_bias", false, "attention projections without biases");
  k.require_value("mlp_bias", false, "MLP projections without biases");
  ModelConfig c{.family = ModelFamily::llama,
                .n_layer = k.integer("num_hidden_layers"),
                .d_model = k.integer("hidden_size"),
                .n_head = k.integer("num_attention_heads"),
                .ffn_hidden_size = k.integer("intermediate_size"),
                .vocab_size = k.integer("vocab_size"),
                .max_seq_len = k.integer("max_position_embeddings"),
                .tied_embeddings = k.boolean("tie_word_embeddings", false),
                .norm_eps = static_cast<float>(k.number("rms_norm_eps")),
                .rope_theta = k.has("rope_theta") ? k.number("rope_theta") : 10000.0};
  c.n_kv_head = k.has("num_key_value_heads") ? k.integer("num_key_value_heads") : c.n_head;
  if (k.has("head_dim") && c.n_head > 0 && k.integer("head_dim") * c.n_head != c.d_model)
    k.fail("head_dim", str(" = ", k.integer("head_dim"), ": dtrain needs head_dim = hidden_size / num_attention_heads = ",
                           c.d_model / c.n_head));
  if (k.has("rope_scaling")) {
    const json& s = k.at("rope_scaling");
    const std::string type = s.value("rope_type", s.value("type", std::string()));
    if (type != "llama3")
      k.fail("rope_scaling", str(" = ", s.dump(), ": only rope_type \"llama3\" (Llama 3.1 and 3.2) is supported"));
    const auto field = [&](std::string_view name) {
      if (!s.contains(name) || !s.at(std::string(name)).is_number())
        k.fail("rope_scaling", str(".", name, " is missing or not a number"));
      return s.at(std::string(name)).get<double>();
    };
    c.rope_scaling_factor = field("factor");
    c.rope_low_freq_factor = field("low_freq_factor");
    c.rope_high_freq_factor = field("high_freq_factor");
    c.rope_original_max_seq_len = static_cast<int>(field("original_max_position_embeddings"));
  }
  return c;
}

// Mixtral: Llama's block with every MLP a mixture of SwiGLU experts of intermediate_size, the top
// num_experts_per_tok of num_local_experts by softmax score, renormalized.
ModelConfig mixtral_from_hf(const HfKeys& k) {
  if (k.has("sliding_window"))
    k.fail("sliding_window", str(" = ", k.at("sliding_window").dump(), ": dtrain's attention is over the whole "
                                 "sequence (null)"));
  k.require_value("router_jitter_noise", 0.0, "the router's inputs not perturbed in training");
  ModelConfig c = llama_from_hf(k);
  c.moe = {.experts = k.integer("num_local_experts"),
           .expert_hidden = c.ffn_hidden_size,
           .routing = {.score = kernels::MoeScore::softmax, .top_k = k.integer("num_experts_per_tok"),
                       .renormalize = true, .route_scale = 1}};
  return c;
}

// OLMoE: Llama's block with RMSNorms over the queries and keys (all heads' columns), every MLP the
// top num_experts_per_tok of num_experts SwiGLU experts of intermediate_size by softmax score,
// renormalized where norm_topk_prob; q, k and v never clipped.
ModelConfig olmoe_from_hf(const HfKeys& k) {
  if (k.has("clip_qkv"))
    k.fail("clip_qkv", str(" = ", k.at("clip_qkv").dump(), ": dtrain does not clip q, k and v (null)"));
  ModelConfig c = llama_from_hf(k);
  c.qk_norm = true;
  c.moe = {.experts = k.integer("num_experts"),
           .expert_hidden = c.ffn_hidden_size,
           .routing = {.score = kernels::MoeScore::softmax, .top_k = k.integer("num_experts_per_tok"),
                       .renormalize = k.boolean("norm_topk_prob", false), .route_scale = 1}};
  return c;
}

// Qwen2: Llama's block with biases on q, k and v, attention over the whole sequence.
ModelConfig qwen2_from_hf(const HfKeys& k) {
  if (k.boolean("use_sliding_window", false))
    k.fail("use_sliding_window", " = true: dtrain's attention is over the whole sequence (false)");
  ModelConfig c = llama_from_hf(k);
  c.qkv_bias = true;
  return c;
}

// Qwen2-MoE: Qwen2's attention; each MLP after the dense ones of mlp_only_layers (a prefix of the
// blocks, of intermediate_size) the top num_experts_per_tok of num_experts SwiGLU experts of
// moe_intermediate_size by softmax score, renormalized where norm_topk_prob, beside a shared
// expert of shared_expert_intermediate_size through its sigmoid gate.
ModelConfig qwen2_moe_from_hf(const HfKeys& k) {
  if (k.has("decoder_sparse_step") && k.integer("decoder_sparse_step") != 1)
    k.fail("decoder_sparse_step", str(" = ", k.integer("decoder_sparse_step"), ": dtrain's expert blocks are every "
                                      "block after the dense ones (1)"));
  ModelConfig c = qwen2_from_hf(k);
  int dense = 0;
  if (k.has("mlp_only_layers")) {
    const json& layers = k.at("mlp_only_layers");
    for (const json& l : layers)
      if (!l.is_number_integer() || l.get<int>() != dense++)
        k.fail("mlp_only_layers", str(" = ", layers.dump(), ": dtrain's dense blocks are the first ones, [0, 1, ...]"));
  }
  c.moe = {.experts = k.integer("num_experts"),
           .expert_hidden = k.integer("moe_intermediate_size"),
           .routing = {.score = kernels::MoeScore::softmax, .top_k = k.integer("num_experts_per_tok"),
                       .renormalize = k.boolean("norm_topk_prob", false), .route_scale = 1},
           .shared_hidden = k.integer("shared_expert_intermediate_size"),
           .shared_gate = true,
           .first_dense_layers = dense};
  return c;
}

// The Hugging Face architecture a model is written as ("gpt2", "llama", "qwen2", "mixtral",
// "qwen2_moe", "olmoe"), and the first of its fields that architecture cannot express, as
// "model.key = value", or "" where none.
struct HfArchitecture {
  std::string model_type, outside;
};

HfArchitecture hf_architecture(const ModelConfig& c) {
  if (c.family == ModelFamily::gpt2) return {"gpt2", ""};
  const MoeConfig& m = c.moe;
  const auto first = [](std::initializer_list<std::pair<bool, std::string>> checks) {
    for (const auto& [outside, field] : checks)
      if (outside) return field;
    return std::string();
  };
  const std::pair<bool, std::string> qk_norm = {c.qk_norm, "model.qk_norm = true"};
  if (m.experts == 0) {
    if (!c.qkv_bias) return {"llama", first({qk_norm})};
    return {"qwen2", first({qk_norm, {c.rope_scaling_factor > 0,
                                      str("model.rope_scaling_factor = ", c.rope_scaling_factor)}})};
  }
  const std::pair<bool, std::string> routing[] = {
      {m.routing.score != kernels::MoeScore::softmax, "model.moe_score = \"sigmoid\""},
      {m.routing.route_scale != 1, str("model.moe_route_scale = ", m.routing.route_scale)},
      {c.rope_scaling_factor > 0, str("model.rope_scaling_factor = ", c.rope_scaling_factor)}};
  const std::string shared = first({routing[0], routing[1], routing[2]});
  const std::pair<bool, std::string> experts_width = {
      c.ffn_hidden() != m.expert_hidden,
      str("model.ffn_hidden_size = ", c.ffn_hidden(), " (its intermediate_size is the experts' ", m.expert_hidden, ")")};
  if (c.qk_norm && m.shared_hidden == 0)
    return {"olmoe", !shared.empty() ? shared
                                     : first({{m.first_dense_layers != 0,
                                               str("model.moe_first_dense_layers = ", m.first_dense_layers)},
                                              {c.qkv_bias, "model.qkv_bias = true"}, experts_width})};
  if (m.shared_hidden > 0)
    return {"qwen2_moe", !shared.empty() ? shared
                                         : first({{!m.shared_gate, "model.moe_shared_gate = false"},
                                                  {!c.qkv_bias, "model.qkv_bias = false"}, qk_norm})};
  return {"mixtral",
          !shared.empty()
              ? shared
              : first({{m.first_dense_layers != 0, str("model.moe_first_dense_layers = ", m.first_dense_layers)},
                       {!m.routing.renormalize, "model.moe_renormalize = false"},
                       {c.qkv_bias, "model.qkv_bias = true"}, experts_width})};
}

// A float field written as the shortest decimal that reads back as the same float: 1e-05, not
// 9.999999747378752e-06.
double shortest_decimal(float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  *result.ptr = '\0';
  return std::strtod(buffer, nullptr);
}

}  // namespace

ModelConfig model_config_from_hf(const std::filesystem::path& config_json) {
  std::ifstream in(config_json);
  if (!in)
    throw Error(str("cannot open Hugging Face config '", config_json.string(),
                    "'; a transformers model directory holds config.json beside model.safetensors"));
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(str("Hugging Face config '", config_json.string(), "' is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) throw Error(str("Hugging Face config '", config_json.string(), "' is not a JSON object"));
  const HfKeys keys(config_json, root);
  const json& type = keys.at("model_type");
  ModelConfig config;
  if (type == "gpt2")
    config = gpt2_from_hf(keys);
  else if (type == "llama")
    config = llama_from_hf(keys);
  else if (type == "mixtral")
    config = mixtral_from_hf(keys);
  else if (type == "qwen2")
    config = qwen2_from_hf(keys);
  else if (type == "qwen2_moe")
    config = qwen2_moe_from_hf(keys);
  else if (type == "olmoe")
    config = olmoe_from_hf(keys);
  else
    keys.fail("model_type", str(" = ", type.dump(), ": dtrain reads \"gpt2\", \"llama\", \"qwen2\", \"mixtral\", "
                                "\"qwen2_moe\" and \"olmoe\" models"));
  with_context(str("Hugging Face config '", config_json.string(), "'"), [&] { validate_model_config(config); });
  return config;
}

json hf_config_json(const ModelConfig& c) {
  validate_model_config(c);
  const HfArchitecture architecture = hf_architecture(c);
  if (!architecture.outside.empty())
    throw ConfigError(str("this model has no Hugging Face configuration: ", architecture.outside,
                          " is not what Hugging Face's ", architecture.model_type,
                          " computes, the architecture dtrain would write it as; keep it as a dtrain checkpoint"));
  json j;
  if (c.family == ModelFamily::gpt2) {
    j = {{"model_type", "gpt2"},
         {"architectures", {"GPT2LMHeadModel"}},
         {"n_layer", c.n_layer},
         {"n_embd", c.d_model},
         {"n_head", c.n_head},
         {"n_inner", c.ffn_hidden_size > 0 ? json(c.ffn_hidden_size) : json(nullptr)},
         {"vocab_size", c.vocab_size},
         {"n_positions", c.max_seq_len},
         {"n_ctx", c.max_seq_len},
         {"layer_norm_epsilon", shortest_decimal(c.norm_eps)},
         {"activation_function", "gelu_new"},
         {"tie_word_embeddings", true}};
  } else {
    j = {{"model_type", "llama"},
         {"architectures", {"LlamaForCausalLM"}},
         {"num_hidden_layers", c.n_layer},
         {"hidden_size", c.d_model},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.kv_heads()},
         {"intermediate_size", c.ffn_hidden()},
         {"vocab_size", c.vocab_size},
         {"max_position_embeddings", c.max_seq_len},
         {"rms_norm_eps", shortest_decimal(c.norm_eps)},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", nullptr},
         {"tie_word_embeddings", c.tied_embeddings},
         {"hidden_act", "silu"},
         {"attention_bias", false},
         {"mlp_bias", false}};
    if (architecture.model_type != "llama") j.erase("rope_scaling"), j.erase("attention_bias"), j.erase("mlp_bias");
    if (architecture.model_type == "mixtral") {
      j["model_type"] = "mixtral", j["architectures"] = {"MixtralForCausalLM"};
      j["num_local_experts"] = c.moe.experts, j["num_experts_per_tok"] = c.moe.routing.top_k;
      j["sliding_window"] = nullptr, j["router_jitter_noise"] = 0.0;
    }
    if (architecture.model_type == "qwen2" || architecture.model_type == "qwen2_moe") {
      j["model_type"] = "qwen2", j["architectures"] = {"Qwen2ForCausalLM"};
      j["use_sliding_window"] = false, j["sliding_window"] = nullptr;
    }
    if (architecture.model_type == "olmoe") {
      j["model_type"] = "olmoe", j["architectures"] = {"OlmoeForCausalLM"};
      j["num_experts"] = c.moe.experts, j["num_experts_per_tok"] = c.moe.routing.top_k;
      j["norm_topk_prob"] = c.moe.routing.renormalize, j["clip_qkv"] = nullptr, j["output_router_logits"] = false;
    }
    if (architecture.model_type == "qwen2_moe") {
      j["model_type"] = "qwen2_moe", j["architectures"] = {"Qwen2MoeForCausalLM"};
      j["num_experts"] = c.moe.experts, j["num_experts_per_tok"] = c.moe.routing.top_k;
      j["moe_intermediate_size"] = c.moe.expert_hidden;
      j["shared_expert_intermediate_size"] = c.moe.shared_hidden;
      j["norm_topk_prob"] = c.moe.routing.renormalize, j["decoder_sparse_step"] = 1;
      std::vector<int> dense(static_cast<size_t>(c.moe.first_dense_layers));
      for (int l = 0; l < c.moe.first_dense_layers; ++l) dense[static_cast<size_t>(l)] = l;
      j["mlp_only_layers"] = dense, j["output_router_logits"] = false;
    }
    if (c.rope_scaling_factor > 0)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling_factor},
                           {"low_freq_factor", c.rope_low_freq_factor},
                           {"high_freq_factor", c.rope_high_freq_factor},
                           {"original_max_position_embeddings", c.rope_original_max_seq_len}};
  }
  j["torch_dtype"] = "float32";  // save_hf_safetensors writes F32
  return j;
}

}  // namespace dt::ckpt
