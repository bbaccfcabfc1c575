#include "tests/reference_io.h"

#include <cstdio>

#include "core/error.h"

namespace dt::testing {

void set_numeric_metadata(ckpt::SafetensorsWriter& writer, std::initializer_list<std::pair<const char*, double>> values) {
  for (const auto& [key, value] : values) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", value);  // round-trips exactly
    writer.set_metadata(key, text);
  }
}

void set_model_metadata(ckpt::SafetensorsWriter& writer, const ModelConfig& c) {
  set_numeric_metadata(writer, {{"n_layer", c.n_layer},
                                {"d_model", c.d_model},
                                {"n_head", c.n_head},
                                {"n_kv_head", c.kv_heads()},
                                {"ffn_hidden", c.ffn_hidden()},
                                {"vocab_size", c.vocab_size},
                                {"max_seq_len", c.max_seq_len},
                                {"tied", c.tied_embeddings},
                                {"qkv_bias", c.qkv_bias},
                                {"qk_norm", c.qk_norm},
                                {"norm_eps", c.norm_eps},
                                {"rope_theta", c.rope_theta},
                                {"rope_scaling_factor", c.rope_scaling_factor},
                                {"rope_low_freq_factor", c.rope_low_freq_factor},
                                {"rope_high_freq_factor", c.rope_high_freq_factor},
                                {"rope_original_max_seq_len", c.rope_original_max_seq_len},
                                {"moe_experts", c.moe.experts},
                                {"moe_expert_hidden", c.moe.expert_hidden},
                                {"moe_top_k", c.moe.routing.top_k},
                                {"moe_sigmoid", c.moe.routing.score == kernels::MoeScore::sigmoid},
                                {"moe_renormalize", c.moe.routing.renormalize},
                                {"moe_route_scale", c.moe.routing.route_scale},
                                {"moe_first_dense_layers", c.moe.first_dense_layers},
                                {"moe_shared_hidden", c.moe.shared_hidden},
                                {"moe_shared_gate", c.moe.shared_gate},
                                {"moe_bias_update_rate", c.moe.bias_update_rate},
                                {"moe_aux_loss_coef", c.moe.aux_loss_coef},
                                {"moe_z_loss_coef", c.moe.z_loss_coef},
                                {"moe_capacity_factor", c.moe.capacity_factor}});
  writer.set_metadata("family", std::string(model_family_name(c.family)));
}

void set_training_metadata(ckpt::SafetensorsWriter& writer, const ReferenceTraining& t) {
  set_numeric_metadata(writer, {{"steps", t.steps},
                                {"micro_batches", t.micro_batches},
                                {"lr", t.lr},
                                {"beta1", t.adamw.beta1},
                                {"beta2", t.adamw.beta2},
                                {"eps", t.adamw.eps},
                                {"weight_decay", t.adamw.weight_decay},
                                {"max_grad_norm", t.max_grad_norm}});
}

MicroBatchInputs add_micro_batches(ckpt::SafetensorsWriter& writer, const ReferenceTraining& t, Shape shape,
                                   const std::function<void(int step, int k, Tensor tokens, Tensor targets)>& fill) {
  MicroBatchInputs inputs;
  for (int s = 0; s < t.steps; ++s)
    for (int k = 0; k < t.micro_batches; ++k) {
      inputs.tokens.push_back(zeros(DType::i32, shape));
      inputs.targets.push_back(zeros(DType::i32, shape));
      fill(s, k, inputs.tokens.back().t, inputs.targets.back().t);
      writer.add(str("s", s, ".mb", k, ".tokens"), inputs.tokens.back().t);
      writer.add(str("s", s, ".mb", k, ".targets"), inputs.targets.back().t);
    }
  return inputs;
}

}  // namespace dt::testing
