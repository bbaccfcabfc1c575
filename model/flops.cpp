#include "model/flops.h"

#include "model/block_declaration.h"

namespace dt {

namespace {

// A linear layer's forward per token: a multiply-add per weight.
double linear_flops(const ModelConfig& m, const LinearDeclaration& linear) {
  return 2.0 * static_cast<double>(linear.in_features(m)) * static_cast<double>(linear.out_features(m));
}

}  // namespace

double attention_core_flops(const ModelConfig& m, int seq_len) {
  return 2.0 * m.n_head * m.head_size() * (seq_len + 1.0);
}

double block_flops(const ModelConfig& m, int seq_len) {
  double flops = 0;
  for (const LinearDeclaration* linear : declare_block(m).linears()) flops += linear_flops(m, *linear);
  return flops + attention_core_flops(m, seq_len);
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
  if (recompute == Recompute::full)
    repeated = m.n_layer * (block_flops(m, seq_len) - linear_flops(m, declare_block(m).linear("mlp.proj")));
  f.hardware = f.model + repeated * n;
  return f;
}

}  // namespace dt
