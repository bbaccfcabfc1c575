#include "model/block_declaration.h"

#include "core/error.h"
#include "model/tensor_shard.h"

namespace dt {

int64_t span_width(const ModelConfig& c, Span span) {
  switch (span) {
    case Span::query_heads:
      return int64_t{c.n_head} * c.head_size();
    case Span::kv_heads:
      return int64_t{c.kv_heads()} * c.head_size();
    case Span::ffn:
      return c.ffn_hidden();
  }
  return 0;
}

int64_t span_width(const ShardDims& d, Span span) {
  switch (span) {
    case Span::query_heads:
      return d.heads.n_head() * d.head_size;
    case Span::kv_heads:
      return d.heads.n_kv_head() * d.head_size;
    case Span::ffn:
      return d.ffn.size();
  }
  return 0;
}

namespace {

// The widths of `spans` added, from the model's sizes or a rank's.
template <typename Sizes>
int64_t spans_width(const std::vector<Span>& spans, const Sizes& sizes) {
  int64_t width = 0;
  for (const Span s : spans) width += span_width(sizes, s);
  return width;
}

}  // namespace

int64_t LinearDeclaration::split_width(const ModelConfig& config) const { return spans_width(spans, config); }

int64_t LinearDeclaration::in_features(const ModelConfig& config) const {
  return style == LinearStyle::row ? split_width(config) : config.d_model;
}

int64_t LinearDeclaration::out_features(const ModelConfig& config) const {
  return style == LinearStyle::column ? split_width(config) : config.d_model;
}

int64_t LinearDeclaration::in_features(const ModelConfig& config, const ShardDims& dims) const {
  return style == LinearStyle::row ? spans_width(spans, dims) : config.d_model;
}

int64_t LinearDeclaration::out_features(const ModelConfig& config, const ShardDims& dims) const {
  return style == LinearStyle::column ? spans_width(spans, dims) : config.d_model;
}

int64_t ActivationDeclaration::width_of(const ModelConfig& config, const ShardDims& dims) const {
  switch (width) {
    case ActivationWidth::model:
      return config.d_model;
    case ActivationWidth::norm_mean:
      return config.traits().norm == NormKind::layernorm ? 1 : 0;
    case ActivationWidth::one:
      return 1;
    case ActivationWidth::qkv:
      return dims.qkv_width();
    case ActivationWidth::attention:
      return dims.attention_width();
    case ActivationWidth::heads:
      return dims.heads.n_head();
    case ActivationWidth::ffn_in:
      return dims.ffn_in_width(config);
    case ActivationWidth::ffn:
      return dims.ffn_hidden();
  }
  return 0;
}

const LinearDeclaration& BlockDeclaration::linear(std::string_view name) const {
  for (const auto& layer : layers)
    if (const auto* l = std::get_if<LinearDeclaration>(&layer); l != nullptr && l->name == name) return *l;
  check_failed("linear layer declared", str("no linear layer '", name, "' in the block's declaration"), __func__,
               __FILE__, __LINE__);
}

std::vector<const LinearDeclaration*> BlockDeclaration::linears() const {
  std::vector<const LinearDeclaration*> all;
  for (const auto& layer : layers)
    if (const auto* l = std::get_if<LinearDeclaration>(&layer)) all.push_back(l);
  return all;
}

const ActivationDeclaration& BlockDeclaration::activation(BlockActivation id) const {
  return activations.at(static_cast<size_t>(id));
}

namespace {

// Every family's activations: the norms' outputs and statistics and the residual stream on this
// rank's rows, the linear layers' outputs and attention's on all of them. Full recomputation
// reruns the block up to the MLP's activation; selective, the attention core (its output and
// log-sum-exp). A block's output is the next one's input: always kept.
std::vector<ActivationDeclaration> block_activations() {
  using A = BlockActivation;
  using W = ActivationWidth;
  constexpr ActivationRows all = ActivationRows::all, part = ActivationRows::local;
  constexpr Recompute full = Recompute::full, core = Recompute::selective;
  return {{A::ln1, W::model, part, false, full},      {A::ln1_mean, W::norm_mean, part, true, full},
          {A::ln1_rstd, W::one, part, true, full},    {A::qkv, W::qkv, all, false, full},
          {A::atty, W::attention, all, false, core},  {A::lse, W::heads, all, true, core},
          {A::res2, W::model, part, false, full},     {A::ln2, W::model, part, false, full},
          {A::ln2_mean, W::norm_mean, part, true, full}, {A::ln2_rstd, W::one, part, true, full},
          {A::fch, W::ffn_in, all, false, full},      {A::fch_act, W::ffn, all, false, full},
          {A::res3, W::model, part, false, Recompute::none}};
}

BlockDeclaration declare(ModelFamily family) {
  const FamilyTraits traits = family_traits(family);
  const bool gpt2 = family == ModelFamily::gpt2;
  const bool swiglu = traits.mlp == MlpKind::swiglu;
  using S = Span;
  BlockDeclaration b{.layers = {}, .activations = block_activations(), .hf = {}};
  // GPT-2's Conv1D layers are one tensor each; Llama's fused ones are several: q, k and v
  // stacked by rows in attn.qkv, gate over up in mlp.fc.
  const std::vector<HfTensor> qkv = gpt2 ? std::vector<HfTensor>{{"attn.c_attn", 3}}
                                         : std::vector<HfTensor>{{"self_attn.q_proj", 1},
                                                                 {"self_attn.k_proj", 1},
                                                                 {"self_attn.v_proj", 1}};
  const std::vector<HfTensor> fc = gpt2 ? std::vector<HfTensor>{{"mlp.c_fc", 1}}
                                        : std::vector<HfTensor>{{"mlp.gate_proj", 1}, {"mlp.up_proj", 1}};
  b.layers = {
      NormDeclaration{"ln_1", gpt2 ? "ln_1" : "input_layernorm"},
      LinearDeclaration{"attn.qkv", LinearStyle::column, {S::query_heads, S::kv_heads, S::kv_heads}, false, qkv},
      LinearDeclaration{"attn.proj", LinearStyle::row, {S::query_heads}, true,
                        {{gpt2 ? "attn.c_proj" : "self_attn.o_proj", 1}}},
      NormDeclaration{"ln_2", gpt2 ? "ln_2" : "post_attention_layernorm"},
      LinearDeclaration{"mlp.fc", LinearStyle::column,
                        swiglu ? std::vector<Span>{S::ffn, S::ffn} : std::vector<Span>{S::ffn}, false, fc},
      LinearDeclaration{"mlp.proj", LinearStyle::row, {S::ffn}, true, {{gpt2 ? "mlp.c_proj" : "mlp.down_proj", 1}}},
  };
  b.hf = gpt2 ? HfNames{.block_prefix = "transformer.h.", .wte = "transformer.wte.weight",
                        .wpe = "transformer.wpe.weight", .ln_f = "transformer.ln_f", .lm_head = "lm_head.weight"}
              : HfNames{.block_prefix = "model.layers.", .wte = "model.embed_tokens.weight", .wpe = "",
                        .ln_f = "model.norm", .lm_head = "lm_head.weight"};
  return b;
}

}  // namespace

const BlockDeclaration& declare_block(const ModelConfig& config) {
  static const BlockDeclaration gpt2 = declare(ModelFamily::gpt2), llama = declare(ModelFamily::llama);
  return config.family == ModelFamily::gpt2 ? gpt2 : llama;
}

}  // namespace dt
