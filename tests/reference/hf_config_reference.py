"""Hugging Face transformers as the reference for dtrain's config.json reader and writer
(ckpt/hf_config.h).

usage:
  hf_config_reference.py write DIR FAMILY KEY=VALUE...   writes DIR/config.json with
        GPT2Config, LlamaConfig, Qwen2Config, MixtralConfig, Qwen2MoeConfig or OlmoeConfig(**keys).save_pretrained (values parsed as JSON; rope_scaling
        given as a JSON object)
  hf_config_reference.py read DIR OUT   loads DIR with AutoConfig.from_pretrained and writes
        the fields dtrain reads, as transformers resolved them, to OUT as JSON
"""
import json
import sys

from transformers import AutoConfig, GPT2Config, LlamaConfig, MixtralConfig, OlmoeConfig, Qwen2Config, Qwen2MoeConfig

FIELDS = {
    "gpt2": ["model_type", "n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions",
             "layer_norm_epsilon", "activation_function", "tie_word_embeddings"],
    "llama": ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "rope_scaling", "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias"],
    "mixtral": ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                "tie_word_embeddings", "hidden_act", "num_local_experts", "num_experts_per_tok", "sliding_window",
                "router_jitter_noise"],
    "qwen2": ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "tie_word_embeddings", "hidden_act", "use_sliding_window"],
    "qwen2_moe": ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                  "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                  "tie_word_embeddings", "hidden_act", "use_sliding_window", "num_experts", "num_experts_per_tok",
                  "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                  "decoder_sparse_step", "mlp_only_layers"],
    "olmoe": ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "tie_word_embeddings", "hidden_act", "num_experts", "num_experts_per_tok", "norm_topk_prob",
              "clip_qkv"],
}
CONFIGS = {"gpt2": GPT2Config, "llama": LlamaConfig, "mixtral": MixtralConfig, "qwen2": Qwen2Config,
           "qwen2_moe": Qwen2MoeConfig, "olmoe": OlmoeConfig}


def write(directory, family, keys):
    values = {k: json.loads(v) for k, v in keys.items()}
    config = CONFIGS[family](**values)
    config.save_pretrained(directory)


def read(directory, out):
    config = AutoConfig.from_pretrained(directory)
    with open(out, "w") as f:
        json.dump({k: getattr(config, k) for k in FIELDS[config.model_type]}, f)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], dict(arg.split("=", 1) for arg in sys.argv[4:]))
    else:
        read(sys.argv[2], sys.argv[3])
