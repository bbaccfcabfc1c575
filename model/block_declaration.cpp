#include "model/block_declaration.h"

#include <algorithm>
#include <array>

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
    case Span::shared_ffn:
      return c.moe.shared_hidden;
    case Span::experts:
      return c.moe.experts;
    case Span::expert_ffn:
      return c.moe.expert_hidden;
    case Span::one:
      return 1;
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
    case Span::shared_ffn:
      return d.shared_ffn.size();
    case Span::experts:
      return d.experts;
    case Span::expert_ffn:
      return d.expert_hidden;
    case Span::one:
      return 1;
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

bool LinearDeclaration::has_bias(const ModelConfig& config) const {
  return config.traits().biases || (config.qkv_bias && name == "attn.qkv");
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
    case ActivationWidth::query:
      return span_width(dims, Span::query_heads);
    case ActivationWidth::key:
      return span_width(dims, Span::kv_heads);
    case ActivationWidth::attention:
      return dims.attention_width();
    case ActivationWidth::heads:
      return dims.heads.n_head();
    case ActivationWidth::ffn_in:
      return dims.ffn_in_width(config);
    case ActivationWidth::ffn:
      return dims.ffn_hidden();
    case ActivationWidth::experts:
      return dims.experts;
    case ActivationWidth::top_k:
      return config.moe.routing.top_k;
    case ActivationWidth::expert_ffn_in:
      return 2 * dims.expert_hidden;
    case ActivationWidth::expert_ffn:
      return dims.expert_hidden;
    case ActivationWidth::shared_ffn_in:
      return 2 * dims.shared_ffn.size();
    case ActivationWidth::shared_ffn:
      return dims.shared_ffn.size();
    case ActivationWidth::aux_loss_experts:
      return config.moe.aux_loss_coef > 0 ? dims.experts : 0;
    case ActivationWidth::z_loss_experts:
      return config.moe.z_loss_coef > 0 ? dims.experts : 0;
  }
  return 0;
}

int64_t ActivationDeclaration::rows_of(const ModelConfig& config, const ShardDims& dims, int64_t all_rows,
                                       int64_t local_rows, int64_t sequences) const {
  switch (rows) {
    case ActivationRows::all:
      return all_rows;
    case ActivationRows::local:
      return local_rows;
    case ActivationRows::assignments:
      return config.moe.expert_rows(all_rows);
    case ActivationRows::received:
      return config.moe.received_rows(all_rows, dims.local_experts.size(), dims.expert_ranks);
    case ActivationRows::sequences:
      return sequences;
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
  for (const ActivationDeclaration& a : activations)
    if (a.id == id) return a;
  check_failed("activation declared", str("no activation ", static_cast<int>(id), " in the block's declaration"),
               __func__, __FILE__, __LINE__);
}

namespace {

// Every family's activations: the norms' outputs and statistics and the residual stream on this
// rank's rows, the linear layers' outputs and attention's on all of them. Full recomputation
// reruns the block up to the MLP's activation; selective, the attention core (its output and
// log-sum-exp). A block's output is the next one's input: always kept. An expert block routes
// all rows (under tensor parallelism every rank of the group the same, model/moe_mlp.h); its
// shared expert's output and gate are on this rank's rows. Its experts' outputs are kept under
// full recomputation too: the combine's backward reads them, where a dense block's backward
// reads nothing its output projection makes. The query and key norms' inputs (qkv's query and
// key columns, in rows of their own) and statistics are on all rows, rebuilt under full
// recomputation.
std::vector<ActivationDeclaration> block_activations(bool qk_norm, bool experts, bool shared, bool gated) {
  using A = BlockActivation;
  using W = ActivationWidth;
  constexpr ActivationRows all = ActivationRows::all, part = ActivationRows::local,
                           assigned = ActivationRows::assignments, received = ActivationRows::received,
                           sequences = ActivationRows::sequences;
  constexpr ActivationType P = ActivationType::precision, F = ActivationType::f32, I = ActivationType::i32;
  constexpr Recompute full = Recompute::full, core = Recompute::selective;
  std::vector<ActivationDeclaration> a = {
      {A::ln1, W::model, part, P, full},       {A::ln1_mean, W::norm_mean, part, F, full},
      {A::ln1_rstd, W::one, part, F, full},    {A::qkv, W::qkv, all, P, full}};
  if (qk_norm)
    for (const ActivationDeclaration& d : std::initializer_list<ActivationDeclaration>{
             {A::q_in, W::query, all, P, full}, {A::k_in, W::key, all, P, full},
             {A::q_rstd, W::one, all, F, full}, {A::k_rstd, W::one, all, F, full}})
      a.push_back(d);
  for (const ActivationDeclaration& d : std::initializer_list<ActivationDeclaration>{
           {A::atty, W::attention, all, P, core},   {A::lse, W::heads, all, F, core},
           {A::res2, W::model, part, P, full},      {A::ln2, W::model, part, P, full},
           {A::ln2_mean, W::norm_mean, part, F, full}, {A::ln2_rstd, W::one, part, F, full}})
    a.push_back(d);
  if (!experts) {
    a.push_back({A::fch, W::ffn_in, all, P, full});
    a.push_back({A::fch_act, W::ffn, all, P, full});
  }
  a.push_back({A::res3, W::model, part, P, Recompute::none});
  if (!experts) return a;
  for (const ActivationDeclaration& d : std::initializer_list<ActivationDeclaration>{
           {A::route_scores, W::experts, all, F, full},  {A::route_experts, W::top_k, all, I, full},
           {A::route_weights, W::top_k, all, F, full},   {A::route_rows, W::top_k, all, I, full},
           {A::expert_in, W::model, received, P, full},   {A::expert_fch, W::expert_ffn_in, received, P, full},
           {A::expert_act, W::expert_ffn, received, P, full}, {A::expert_out, W::model, assigned, P, Recompute::none}})
    a.push_back(d);
  // The shared expert's output is kept under full recomputation too: its gate's backward reads it.
  if (shared) {
    a.push_back({A::shared_fch, W::shared_ffn_in, all, P, full});
    a.push_back({A::shared_act, W::shared_ffn, all, P, full});
    a.push_back({A::shared_out, W::model, part, P, Recompute::none});
  }
  if (gated) a.push_back({A::shared_gate, W::one, part, F, full});
  a.push_back({A::route_counts, W::aux_loss_experts, sequences, F, full});
  a.push_back({A::route_logits, W::z_loss_experts, all, F, full});
  return a;
}

// What a block's MLP is: dense, or experts with optionally a shared expert, optionally gated.
enum class MlpShape { dense, experts, experts_shared, experts_shared_gated };
constexpr int kMlpShapes = 4;

MlpShape mlp_shape(const ModelConfig& config, int layer) {
  if (!config.moe_block(layer)) return MlpShape::dense;
  if (config.moe.shared_hidden == 0) return MlpShape::experts;
  return config.moe.shared_gate ? MlpShape::experts_shared_gated : MlpShape::experts_shared;
}

// A mixture of experts' layers after ln_2 ("{e}" stands for an expert's index): the router, each
// expert's gate and up projections stacked by rows as in the dense mlp.fc and its down
// projection, and the shared expert with its gate. Their Hugging Face names are Mixtral's
// without a shared expert or query and key norms, else Qwen2-MoE's (which OLMoE's are).
std::vector<std::variant<NormDeclaration, LinearDeclaration>> expert_layers(MlpShape shape, bool qk_norm) {
  using S = Span;
  if (shape == MlpShape::experts && !qk_norm)
    return {
        LinearDeclaration{"mlp.router", LinearStyle::column, {S::experts}, false, {{"block_sparse_moe.gate", 1}}},
        LinearDeclaration{"mlp.experts.fc", LinearStyle::column, {S::expert_ffn, S::expert_ffn}, false,
                          {{"block_sparse_moe.experts.{e}.w1", 1}, {"block_sparse_moe.experts.{e}.w3", 1}}, true},
        LinearDeclaration{"mlp.experts.proj", LinearStyle::row, {S::expert_ffn}, true,
                          {{"block_sparse_moe.experts.{e}.w2", 1}}, true},
    };
  std::vector<std::variant<NormDeclaration, LinearDeclaration>> layers = {
      LinearDeclaration{"mlp.router", LinearStyle::column, {S::experts}, false, {{"mlp.gate", 1}}},
      LinearDeclaration{"mlp.experts.fc", LinearStyle::column, {S::expert_ffn, S::expert_ffn}, false,
                        {{"mlp.experts.{e}.gate_proj", 1}, {"mlp.experts.{e}.up_proj", 1}}, true},
      LinearDeclaration{"mlp.experts.proj", LinearStyle::row, {S::expert_ffn}, true,
                        {{"mlp.experts.{e}.down_proj", 1}}, true},
  };
  if (shape == MlpShape::experts) return layers;
  layers.push_back(LinearDeclaration{"mlp.shared.fc", LinearStyle::column, {S::shared_ffn, S::shared_ffn}, false,
                                     {{"mlp.shared_expert.gate_proj", 1}, {"mlp.shared_expert.up_proj", 1}}});
  layers.push_back(LinearDeclaration{"mlp.shared.proj", LinearStyle::row, {S::shared_ffn}, true,
                                     {{"mlp.shared_expert.down_proj", 1}}});
  if (shape == MlpShape::experts_shared_gated)
    layers.push_back(
        LinearDeclaration{"mlp.shared_gate", LinearStyle::column, {S::one}, false, {{"mlp.shared_expert_gate", 1}}});
  return layers;
}

BlockDeclaration declare(ModelFamily family, bool qk_norm, MlpShape shape) {
  const FamilyTraits traits = family_traits(family);
  const bool gpt2 = family == ModelFamily::gpt2;
  const bool swiglu = traits.mlp == MlpKind::swiglu;
  using S = Span;
  BlockDeclaration b{.layers = {},
                     .activations = block_activations(qk_norm, shape != MlpShape::dense,
                                                      shape >= MlpShape::experts_shared,
                                                      shape == MlpShape::experts_shared_gated),
                     .hf = {}};
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
  };
  if (qk_norm) {
    b.layers.push_back(NormDeclaration{"attn.q_norm", "self_attn.q_norm", S::query_heads});
    b.layers.push_back(NormDeclaration{"attn.k_norm", "self_attn.k_norm", S::kv_heads});
  }
  b.layers.push_back(LinearDeclaration{"attn.proj", LinearStyle::row, {S::query_heads}, true,
                                       {{gpt2 ? "attn.c_proj" : "self_attn.o_proj", 1}}});
  b.layers.push_back(NormDeclaration{"ln_2", gpt2 ? "ln_2" : "post_attention_layernorm"});
  if (shape == MlpShape::dense) {
    b.layers.push_back(LinearDeclaration{"mlp.fc", LinearStyle::column,
                                         swiglu ? std::vector<Span>{S::ffn, S::ffn} : std::vector<Span>{S::ffn}, false,
                                         fc});
    b.layers.push_back(
        LinearDeclaration{"mlp.proj", LinearStyle::row, {S::ffn}, true, {{gpt2 ? "mlp.c_proj" : "mlp.down_proj", 1}}});
  } else {
    for (auto& layer : expert_layers(shape, qk_norm)) b.layers.push_back(std::move(layer));
  }
  b.hf = gpt2 ? HfNames{.block_prefix = "transformer.h.", .wte = "transformer.wte.weight",
                        .wpe = "transformer.wpe.weight", .ln_f = "transformer.ln_f", .lm_head = "lm_head.weight"}
              : HfNames{.block_prefix = "model.layers.", .wte = "model.embed_tokens.weight", .wpe = "",
                        .ln_f = "model.norm", .lm_head = "lm_head.weight"};
  return b;
}

}  // namespace

const BlockDeclaration& declare_block(const ModelConfig& config, int layer) {
  // By family, query and key norms or not, and MLP shape.
  static const auto declared = [] {
    std::array<std::array<std::array<BlockDeclaration, kMlpShapes>, 2>, 2> all;
    for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama})
      for (const bool qk_norm : {false, true})
        for (int shape = 0; shape < kMlpShapes; ++shape)
          all[static_cast<size_t>(family)][qk_norm][static_cast<size_t>(shape)] =
              declare(family, qk_norm, static_cast<MlpShape>(shape));
    return all;
  }();
  return declared[static_cast<size_t>(config.family)][config.qk_norm]
                 [static_cast<size_t>(mlp_shape(config, layer))];
}

std::vector<const BlockDeclaration*> block_declarations(const ModelConfig& config) {
  std::vector<const BlockDeclaration*> distinct;
  for (int l = 0; l < config.n_layer; ++l)
    if (const BlockDeclaration* b = &declare_block(config, l); std::ranges::find(distinct, b) == distinct.end())
      distinct.push_back(b);
  return distinct;
}

}  // namespace dt
