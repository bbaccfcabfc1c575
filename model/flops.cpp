#include "model/flops.h"

namespace dt {

double attention_core_flops(const ModelConfig& m, int seq_len) {
  return 2.0 * m.n_head * m.head_size() * (seq_len + 1.0);
}

double block_flops(const ModelConfig& m, int seq_len) {
  const double c = m.d_model;
  return 2 * c * m.qkv_width() + 2 * c * c + 2 * c * m.ffn_in_width() + 2.0 * m.ffn_hidden() * c +
         attention_core_flops(m, seq_len);
}

double head_flops(const ModelConfig& m) { return 2.0 * m.d_model * m.vocab_size; }

double forward_flops_per_token(const ModelConfig& m, int seq_len) {
  return m.n_layer * block_flops(m, seq_len) + head_flops(m);
}

}  // namespace dt
