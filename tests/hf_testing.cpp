#include "tests/hf_testing.h"

#include "core/error.h"

namespace dt::testing {

void PrintTo(const HfCase& c, std::ostream* os) { *os << c.name; }

ModelConfig sized(const char* preset, int vocab_size, int max_seq_len) {
  ModelConfig c = model_preset(preset);
  c.vocab_size = vocab_size;
  c.max_seq_len = max_seq_len;
  return c;
}

std::string hf_make_args(const ModelConfig& c) {
  const std::string family = c.moe.shared_hidden > 0 ? "qwen2_moe"
                             : c.qk_norm             ? "olmoe"
                             : c.moe.experts > 0     ? "mixtral"
                             : c.qkv_bias            ? "qwen2"
                                                     : std::string(model_family_name(c.family));
  return str(family, " experts=", c.moe.experts, " top_k=", c.moe.routing.top_k, " expert_hidden=", c.moe.expert_hidden,
             " shared_hidden=", c.moe.shared_hidden, " renormalize=", c.moe.routing.renormalize ? 1 : 0,
             " first_dense_layers=", c.moe.first_dense_layers, " n_layer=", c.n_layer, " d_model=", c.d_model, " n_head=", c.n_head,
             " n_kv_head=", c.kv_heads(), " ffn_hidden=", c.ffn_hidden(), " vocab_size=", c.vocab_size,
             " max_seq_len=", c.max_seq_len, " tied=", c.tied_embeddings ? 1 : 0, " rope_theta=", c.rope_theta,
             " rope_scaling_factor=", c.rope_scaling_factor, " rope_original_max_seq_len=", c.rope_original_max_seq_len);
}

std::string hf_token_list(int vocab_size, int seq) {
  std::string tokens;
  for (int t = 0; t < seq; ++t) tokens += str(t ? "," : "", (t * 37 + 11) % vocab_size);
  return tokens;
}

OwnedTensor hf_test_logits(Transformer& model, int seq) {
  OwnedTensor tokens = zeros(DType::i32, {1, seq});
  for (int t = 0; t < seq; ++t) tokens.ptr<int32_t>()[t] = (t * 37 + 11) % model.config().vocab_size;
  model.forward(tokens.t, Tensor{});
  OwnedTensor logits = zeros(DType::f32, {1, seq, model.config().vocab_size});
  model.copy_logits(logits.t);
  return logits;
}

}  // namespace dt::testing
