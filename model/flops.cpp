#include "model/flops.h"

#include <map>

#include "model/block_declaration.h"

namespace dt {

namespace {

// A linear layer's forward per token: a multiply-add per weight, an expert's by the top_k
// experts a token goes to. (FLOP counts are integers below 2^53: exact in any order.)
double linear_flops(const ModelConfig& m, const LinearDeclaration& linear) {
  const double uses = linear.per_expert ? static_cast<double>(m.moe.routing.top_k) : 1.0;
  return 2.0 * uses * static_cast<double>(linear.in_features(m)) * static_cast<double>(linear.out_features(m));
}

// The blocks' forward (or, with `mlp_output` false, up to the MLP's activation) per token, the
// layers of one declaration counted together: n blocks alike cost n times one.
double blocks_flops(const ModelConfig& m, int seq_len, bool mlp_output) {
  std::map<const BlockDeclaration*, int> alike;
  for (int l = 0; l < m.n_layer; ++l) ++alike[&declare_block(m, l)];
  double flops = 0;
  for (const auto& [block, count] : alike) {
    double one = attention_core_flops(m, seq_len);
    for (const LinearDeclaration* linear : block->linears())
      if (mlp_output || !(linear->residual && linear->name.starts_with("mlp."))) one += linear_flops(m, *linear);
    flops += count * one;
  }
  return flops;
}

}  // namespace

double attention_core_flops(const ModelConfig& m, int seq_len) {
  return 2.0 * m.n_head * m.head_size() * (seq_len + 1.0);
}

double block_flops(const ModelConfig& m, int layer, int seq_len) {
  double flops = 0;
  for (const LinearDeclaration* linear : declare_block(m, layer).linears()) flops += linear_flops(m, *linear);
  return flops + attention_core_flops(m, seq_len);
}

double head_flops(const ModelConfig& m) { return 2.0 * m.d_model * m.vocab_size; }

double forward_flops_per_token(const ModelConfig& m, int seq_len) {
  return blocks_flops(m, seq_len, true) + head_flops(m);
}

StepFlops training_flops(const ModelConfig& m, int seq_len, int64_t tokens, Recompute recompute) {
  const double n = static_cast<double>(tokens);
  StepFlops f;
  f.model = 3 * forward_flops_per_token(m, seq_len) * n;
  double repeated = 0;
  if (recompute == Recompute::selective) repeated = m.n_layer * attention_core_flops(m, seq_len);
  // Full recomputation reruns each block up to the MLP's activation: backward needs neither
  // the MLP's output projection nor the residual after it (the next block's input is kept).
  if (recompute == Recompute::full) repeated = blocks_flops(m, seq_len, false);
  f.hardware = f.model + repeated * n;
  return f;
}

}  // namespace dt
