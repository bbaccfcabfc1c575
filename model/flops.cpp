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

StepFlops training_flops(const ModelConfig& m, int seq_len, int64_t tokens, Recompute recompute) {
  const double n = static_cast<double>(tokens);
  StepFlops f;
  f.model = 3 * forward_flops_per_token(m, seq_len) * n;
  double repeated = 0;
  if (recompute == Recompute::selective) repeated = m.n_layer * attention_core_flops(m, seq_len);
  // Full recomputation reruns each block up to the MLP's activation: backward needs neither
  // the MLP's output projection nor the residual after it (the next block's input is kept).
  if (recompute == Recompute::full) repeated = m.n_layer * (block_flops(m, seq_len) - 2.0 * m.ffn_hidden() * m.d_model);
  f.hardware = f.model + repeated * n;
  return f;
}

}  // namespace dt
