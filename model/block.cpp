#include "model/block.h"

#include "kernels/add.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace dt {

namespace k = kernels;

void norm_forward(const ModelConfig& config, const FlatTensors& weights, const std::string& name, Tensor out,
                  Tensor mean, Tensor rstd, Tensor inp) {
  const Tensor weight = weights.stored(name + ".weight");
  if (config.family == ModelFamily::gpt2)
    k::layernorm_forward(out, mean, rstd, inp, weight, family_bias(config, weights, name), config.norm_eps);
  else
    k::rmsnorm_forward(out, rstd, inp, weight, config.norm_eps);
}

void add_norm_forward(const ModelConfig& config, const FlatTensors& weights, const std::string& name, Tensor res,
                      Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b) {
  const Tensor weight = weights.stored(name + ".weight");
  if (config.family == ModelFamily::gpt2)
    k::add_layernorm_forward(res, out, mean, rstd, a, b, weight, family_bias(config, weights, name), config.norm_eps);
  else
    k::add_rmsnorm_forward(res, out, rstd, a, b, weight, config.norm_eps);
}

Tensor family_bias(const ModelConfig& config, const FlatTensors& tensors, const std::string& name) {
  return config.family == ModelFamily::gpt2 ? tensors.stored(name + ".bias") : Tensor{};
}

const char* output_weight_name(const ModelConfig& config) { return config.tied_embeddings ? "wte" : "lm_head"; }

RopeTables make_rope_tables(const ModelConfig& config, int rows) {
  const int64_t half = config.head_size() / 2;
  RopeTables tables;
  tables.buffer = Buffer(static_cast<size_t>(2 * rows * half) * sizeof(float), MemTag::workspace);
  tables.cos = tables.buffer.view(DType::f32, {rows, half});
  tables.sin = tables.buffer.view(DType::f32, {rows, half}, static_cast<size_t>(rows * half) * sizeof(float));
  const k::RopeScaling scaling{.factor = config.rope_scaling_factor,
                               .low_freq_factor = config.rope_low_freq_factor,
                               .high_freq_factor = config.rope_high_freq_factor,
                               .original_max_seq_len = static_cast<double>(config.rope_original_max_seq_len)};
  k::rope_table(tables.cos, tables.sin, k::rope_inverse_frequencies(config.head_size(), config.rope_theta, scaling));
  return tables;
}

void block_forward(const ModelConfig& config, const FlatTensors& weights, int layer, Tensor x,
                   const BlockActivations& a, const AttentionCore& attention) {
  const std::string h = str("h.", layer, ".");
  auto w = [&](std::string_view name) { return weights.stored(h + std::string(name) + ".weight"); };
  auto b = [&](std::string_view name) { return family_bias(config, weights, h + std::string(name)); };

  norm_forward(config, weights, h + "ln_1", a.ln1, a.ln1_mean, a.ln1_rstd, x);
  k::linear_forward(a.qkv, a.ln1, w("attn.qkv"), b("attn.qkv"));
  attention(a.qkv, a.atty);
  k::linear_forward(a.proj_out, a.atty, w("attn.proj"), b("attn.proj"));
  add_norm_forward(config, weights, h + "ln_2", a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.proj_out);

  k::linear_forward(a.fch, a.ln2, w("mlp.fc"), b("mlp.fc"));
  if (config.family == ModelFamily::gpt2)
    k::gelu_forward(a.fch_act, a.fch);
  else
    k::swiglu_forward(a.fch_act, a.fch);
  k::linear_forward(a.proj_out, a.fch_act, w("mlp.proj"), b("mlp.proj"));
  k::add_forward(a.res3, a.res2, a.proj_out);
}

}  // namespace dt
