#include "cli/model_flags.h"

#include "core/error.h"

namespace dt::cli {

void declare_model_flags(Args& args, const std::string& default_preset) {
  std::string presets;
  for (const auto& name : model_preset_names()) presets += str(presets.empty() ? "" : ", ", name);
  args.flag("model", default_preset, str("model preset: ", presets))
      .flag("n-layer", "", "override the preset's number of blocks")
      .flag("d-model", "", "override the preset's channels (must be divisible by n-head)")
      .flag("n-head", "", "override the preset's attention heads")
      .flag("n-kv-head", "", "override the preset's key/value heads (llama; must divide n-head)")
      .flag("ffn-hidden", "", "override the preset's MLP hidden width")
      .flag("vocab-size", "", "override the preset's vocabulary size (tokens)")
      .flag("max-seq-len", "", "override the preset's maximum sequence length (tokens)");
}

ModelConfig model_from_flags(const Args& args, const std::string& preset) {
  ModelConfig c = model_preset(preset.empty() ? args.get("model") : preset);
  auto override_field = [&](const char* flag, int& field) {
    if (args.was_given(flag)) field = static_cast<int>(args.get_int(flag));
  };
  override_field("n-layer", c.n_layer);
  override_field("d-model", c.d_model);
  override_field("n-head", c.n_head);
  override_field("n-kv-head", c.n_kv_head);
  override_field("ffn-hidden", c.ffn_hidden_size);
  override_field("vocab-size", c.vocab_size);
  override_field("max-seq-len", c.max_seq_len);
  validate_model_config(c);
  return c;
}

void declare_run_flags(Args& args) {
  args.flag("precision", "f32", "storage of activations and weights: f32, bf16 or f16 (f32 master weights and gradients)")
      .flag("recompute", "none", "activation recomputation: none, selective (attention core) or full (whole blocks)");
}

DType precision_from_flags(const Args& args) { return precision_from_name(args.get("precision")); }

Recompute recompute_from_flags(const Args& args) { return recompute_from_name(args.get("recompute")); }

}  // namespace dt::cli
