"""Hugging Face transformers as the reference for dtrain's Hugging Face names and layouts.

usage:
  hf_reference.py make DIR FAMILY KEY=VALUE...   builds a randomly initialised GPT2LMHeadModel,
        LlamaForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM or OlmoeForCausalLM
        from the sizes
        given (n_layer, d_model, n_head, n_kv_head, ffn_hidden, vocab_size, max_seq_len, tied,
        rope_theta, rope_scaling_factor, rope_original_max_seq_len; the experts' experts, top_k,
        expert_hidden, and Qwen2-MoE's shared_hidden, renormalize and first_dense_layers) and saves
        it with save_pretrained to DIR (config.json and model.safetensors, with Hugging Face's own
        names and layouts)
  hf_reference.py logits DIR WEIGHTS TOKENS OUT  loads DIR's config with the weights file
        WEIGHTS (safetensors, Hugging Face names), runs the token ids TOKENS (comma-separated, one
        sequence) and writes the logits (1, T, V) to OUT as "logits"
  hf_reference.py pretrained DIR TOKENS OUT [TEXT IDS]  loads DIR as a user would, with
        AutoModelForCausalLM.from_pretrained (config.json, model.safetensors, generation_config.json),
        and writes the logits of TOKENS to OUT; with TEXT, also loads AutoTokenizer.from_pretrained(DIR)
        and writes the ids it encodes TEXT's contents to, comma-separated, to IDS
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM)

import safetensors_io


def make(directory, family, sizes):
    s = {k: float(v) for k, v in sizes.items()}
    if family == "gpt2":
        config = GPT2Config(n_layer=int(s["n_layer"]), n_embd=int(s["d_model"]), n_head=int(s["n_head"]),
                            vocab_size=int(s["vocab_size"]), n_positions=int(s["max_seq_len"]),
                            layer_norm_epsilon=1e-5, activation_function="gelu_new")
        model = GPT2LMHeadModel(config)
    elif family == "mixtral":
        config = MixtralConfig(hidden_size=int(s["d_model"]), intermediate_size=int(s["ffn_hidden"]),
                               num_hidden_layers=int(s["n_layer"]), num_attention_heads=int(s["n_head"]),
                               num_key_value_heads=int(s["n_kv_head"]), vocab_size=int(s["vocab_size"]),
                               max_position_embeddings=int(s["max_seq_len"]), rms_norm_eps=1e-5,
                               rope_theta=s["rope_theta"], tie_word_embeddings=s["tied"] == 1,
                               num_local_experts=int(s["experts"]), num_experts_per_tok=int(s["top_k"]))
        model = MixtralForCausalLM(config)
    elif family == "olmoe":
        config = OlmoeConfig(hidden_size=int(s["d_model"]), intermediate_size=int(s["expert_hidden"]),
                             num_hidden_layers=int(s["n_layer"]), num_attention_heads=int(s["n_head"]),
                             num_key_value_heads=int(s["n_kv_head"]), vocab_size=int(s["vocab_size"]),
                             max_position_embeddings=int(s["max_seq_len"]), rms_norm_eps=1e-5,
                             rope_theta=s["rope_theta"], tie_word_embeddings=s["tied"] == 1,
                             num_experts=int(s["experts"]), num_experts_per_tok=int(s["top_k"]),
                             norm_topk_prob=s["renormalize"] == 1)
        model = OlmoeForCausalLM(config)
    elif family in ("qwen2", "qwen2_moe"):
        common = dict(hidden_size=int(s["d_model"]), intermediate_size=int(s["ffn_hidden"]),
                      num_hidden_layers=int(s["n_layer"]), num_attention_heads=int(s["n_head"]),
                      num_key_value_heads=int(s["n_kv_head"]), vocab_size=int(s["vocab_size"]),
                      max_position_embeddings=int(s["max_seq_len"]), rms_norm_eps=1e-5,
                      rope_theta=s["rope_theta"], tie_word_embeddings=s["tied"] == 1, use_sliding_window=False)
        if family == "qwen2":
            model = Qwen2ForCausalLM(Qwen2Config(**common))
        else:
            config = Qwen2MoeConfig(**common, num_experts=int(s["experts"]), num_experts_per_tok=int(s["top_k"]),
                                    moe_intermediate_size=int(s["expert_hidden"]),
                                    shared_expert_intermediate_size=int(s["shared_hidden"]),
                                    norm_topk_prob=s["renormalize"] == 1, decoder_sparse_step=1,
                                    mlp_only_layers=list(range(int(s["first_dense_layers"]))))
            model = Qwen2MoeForCausalLM(config)
    else:
        scaling = None
        if s["rope_scaling_factor"] > 0:
            scaling = {"rope_type": "llama3", "factor": s["rope_scaling_factor"], "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0,
                       "original_max_position_embeddings": int(s["rope_original_max_seq_len"])}
        config = LlamaConfig(hidden_size=int(s["d_model"]), intermediate_size=int(s["ffn_hidden"]),
                             num_hidden_layers=int(s["n_layer"]), num_attention_heads=int(s["n_head"]),
                             num_key_value_heads=int(s["n_kv_head"]), vocab_size=int(s["vocab_size"]),
                             max_position_embeddings=int(s["max_seq_len"]), rms_norm_eps=1e-5,
                             rope_theta=s["rope_theta"], tie_word_embeddings=s["tied"] == 1, rope_scaling=scaling)
        model = LlamaForCausalLM(config)
    # The default initialisation leaves biases and norms at 0 and 1; perturb every tensor so
    # that a misplaced one cannot go unnoticed.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(directory, safe_serialization=True)


def logits(directory, weights, tokens, out):
    config = AutoConfig.from_pretrained(directory)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    missing, unexpected = model.load_state_dict(load_file(weights), strict=False)
    # Tied output embeddings are not stored; anything else missing or unexpected is a mismatch.
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    assert not missing and not unexpected, (missing, unexpected)
    model.tie_weights()
    model.eval()
    ids = torch.tensor([[int(t) for t in tokens.split(",")]])
    with torch.no_grad():
        safetensors_io.save(out, {"logits": model(ids).logits.float()})


def pretrained(directory, tokens, out, text=None, ids_out=None):
    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([[int(t) for t in tokens.split(",")]])
    with torch.no_grad():
        safetensors_io.save(out, {"logits": model(ids).logits.float()})
    if text is not None:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        with open(text, encoding="utf-8", errors="surrogateescape") as f:
            encoded = tokenizer(f.read())["input_ids"]
        with open(ids_out, "w") as f:
            f.write(",".join(str(i) for i in encoded))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], dict(arg.split("=", 1) for arg in sys.argv[4:]))
    elif sys.argv[1] == "pretrained":
        pretrained(*sys.argv[2:])
    else:
        logits(*sys.argv[2:6])
