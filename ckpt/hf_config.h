// Model descriptions in Hugging Face's config.json, the file beside model.safetensors in a
// transformers model directory (ckpt/hf_checkpoint.h reads and writes the weights).
//
//   gpt2  (model_type "gpt2", GPT2Config):   n_layer, n_embd, n_head, n_inner (null: 4 n_embd),
//         vocab_size, n_positions, layer_norm_epsilon; activation_function must be "gelu_new"
//         (the tanh GELU we compute) and the embeddings tied.
//   llama (model_type "llama", LlamaConfig): num_hidden_layers, hidden_size,
//         num_attention_heads, num_key_value_heads (absent: num_attention_heads),
//         intermediate_size, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
//         tie_word_embeddings (absent: false), rope_scaling null or {rope_type "llama3", factor,
//         low_freq_factor, high_freq_factor, original_max_position_embeddings}; hidden_act must
//         be "silu" and attention_bias and mlp_bias false.
//   qwen2 (model_type "qwen2"): llama's keys, with biases on q, k and v (ModelConfig::qkv_bias);
//         use_sliding_window must be false.
//   mixtral (model_type "mixtral"): llama's keys and num_local_experts, num_experts_per_tok (every
//         block's MLP the experts, softmax-scored and renormalized); sliding_window null and
//         router_jitter_noise 0.
//   qwen2_moe (model_type "qwen2_moe"): qwen2's keys and num_experts, num_experts_per_tok,
//         moe_intermediate_size, shared_expert_intermediate_size (gated), norm_topk_prob,
//         mlp_only_layers (the first blocks, dense, of intermediate_size); decoder_sparse_step 1.
//   olmoe (model_type "olmoe"): llama's keys with RMSNorms over the queries and keys
//         (ModelConfig::qk_norm), and num_experts, num_experts_per_tok, norm_topk_prob (every
//         block's MLP the experts, of intermediate_size, softmax-scored); clip_qkv null.
// A model is written as the one of these that computes it, or refused naming the field none can
// express.
// Whatever the file says that we would compute differently is rejected with the file, the key
// and the value, never ignored.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace dt::ckpt {

// Reads config.json; throws dt::Error naming the file and the key for anything missing,
// mistyped or unsupported. The result is validated (model/config.h).
ModelConfig model_config_from_hf(const std::filesystem::path& config_json);

// The config.json transformers needs to load a model of this description (AutoConfig,
// AutoModelForCausalLM), for exporting our weights with save_hf_safetensors.
nlohmann::json hf_config_json(const ModelConfig& config);

}  // namespace dt::ckpt
