#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dt {

namespace {

struct Preset {
  std::string_view name;
  ModelConfig config;
};

constexpr ModelConfig gpt2(int n_layer, int d_model, int n_head, int vocab_size = 50257, int max_seq_len = 1024) {
  return {.family = ModelFamily::gpt2,
          .n_layer = n_layer,
          .d_model = d_model,
          .n_head = n_head,
          .vocab_size = vocab_size,
          .max_seq_len = max_seq_len};
}

// Llama 3 shapes as published in Meta's params.json / Hugging Face's config.json. The 3.1 and
// 3.2 models stretch rotary frequencies for their 128K context (rope_scaling "llama3").
constexpr ModelConfig llama(int n_layer, int d_model, int n_head, int n_kv_head, int ffn_hidden_size, bool tied,
                            int max_seq_len, double rope_scaling_factor, int vocab_size = 128256) {
  return {.family = ModelFamily::llama,
          .n_layer = n_layer,
          .d_model = d_model,
          .n_head = n_head,
          .n_kv_head = n_kv_head,
          .ffn_hidden_size = ffn_hidden_size,
          .vocab_size = vocab_size,
          .max_seq_len = max_seq_len,
          .tied_embeddings = tied,
          .norm_eps = 1e-5f,
          .rope_theta = 500000,
          .rope_scaling_factor = rope_scaling_factor};
}

// Mixtral's shapes (Hugging Face's config.json): Llama's block with every MLP a mixture of
// SwiGLU experts, top-2 of softmax scores renormalised; rotary theta 1e6, a 32,000-token vocabulary.
constexpr ModelConfig mixtral(int n_layer, int d_model, int n_head, int n_kv_head, int experts, int expert_hidden,
                              int max_seq_len, int vocab_size = 32000) {
  ModelConfig c = llama(n_layer, d_model, n_head, n_kv_head, expert_hidden, false, max_seq_len, 0, vocab_size);
  c.rope_theta = 1e6;
  c.moe = {.experts = experts,
           .expert_hidden = expert_hidden,
           .routing = {.score = kernels::MoeScore::softmax, .top_k = 2, .renormalize = true, .route_scale = 1}};
  return c;
}

// Qwen1.5-MoE: Qwen2's attention (q, k, v biases), every MLP the top k of the experts by softmax
// score, not renormalized, beside a gated shared expert of `shared` (also the dense MLP's width).
constexpr ModelConfig qwen_moe(int n_layer, int d_model, int n_head, int experts, int top_k, int expert_hidden,
                               int shared, int max_seq_len, int vocab_size) {
  ModelConfig c = llama(n_layer, d_model, n_head, n_head, shared, false, max_seq_len, 0, vocab_size);
  c.rope_theta = 1e6, c.norm_eps = 1e-6f, c.qkv_bias = true;
  c.moe = {.experts = experts,
           .expert_hidden = expert_hidden,
           .routing = {.score = kernels::MoeScore::softmax, .top_k = top_k, .renormalize = false, .route_scale = 1},
           .shared_hidden = shared,
           .shared_gate = true};
  return c;
}

// OLMoE: Llama's block with RMSNorms over the queries and keys, every MLP the top k of the
// experts by softmax score, not renormalized; multi-head attention, untied, rotary theta 10,000;
// the routers' losses at the coefficients given.
constexpr ModelConfig olmoe(int n_layer, int d_model, int n_head, int experts, int top_k, int expert_hidden,
                            int max_seq_len, int vocab_size, float aux_loss_coef, float z_loss_coef) {
  ModelConfig c = llama(n_layer, d_model, n_head, n_head, expert_hidden, false, max_seq_len, 0, vocab_size);
  c.rope_theta = 10000, c.qk_norm = true;
  c.moe = {.experts = experts,
           .expert_hidden = expert_hidden,
           .routing = {.score = kernels::MoeScore::softmax, .top_k = top_k, .renormalize = false, .route_scale = 1},
           .aux_loss_coef = aux_loss_coef,
           .z_loss_coef = z_loss_coef};
  return c;
}

constexpr Preset kPresets[] = {
    {"gpt2-124m", gpt2(12, 768, 12)},
    {"gpt2-355m", gpt2(24, 1024, 16)},
    {"gpt2-774m", gpt2(36, 1280, 20)},
    {"gpt2-1558m", gpt2(48, 1600, 25)},
    // Small sizes for tests and the quickstart: an odd head count and a vocabulary that is not
    // a multiple of 64, so padding and head splitting are always exercised.
    {"gpt2-tiny", gpt2(2, 48, 3, 997, 64)},
    {"gpt2-mini", gpt2(4, 192, 6, 50257, 256)},
    {"llama3.2-1b", llama(16, 2048, 32, 8, 8192, true, 131072, 32)},
    {"llama3.2-3b", llama(28, 3072, 24, 8, 8192, true, 131072, 32)},
    {"llama3-8b", llama(32, 4096, 32, 8, 14336, false, 8192, 0)},
    {"llama3-70b", llama(80, 8192, 64, 8, 28672, false, 8192, 0)},
    {"llama3.1-405b", llama(126, 16384, 128, 8, 53248, false, 131072, 8)},
    // 6 query heads over 2 KV heads, an untied output layer and the odd vocabulary of gpt2-tiny.
    {"llama-tiny", llama(2, 48, 6, 2, 128, false, 64, 0, 997)},
    {"mixtral-8x7b", mixtral(32, 4096, 32, 8, 8, 14336, 32768)},
    {"qwen1.5-moe-a2.7b", qwen_moe(24, 2048, 16, 60, 4, 1408, 5632, 8192, 151936)},
    // Trained with the balance loss (0.01) and the router z-loss (0.001), as OLMoE was.
    {"olmoe-1b-7b", olmoe(16, 2048, 16, 64, 8, 1024, 4096, 50304, 0.01f, 0.001f)},
    // llama-tiny's attention with 4 experts of hidden width 32, two per token.
    {"moe-tiny", mixtral(2, 48, 6, 2, 4, 32, 64, 997)},
    // OLMoE's block at moe-tiny's size: 6 heads, queries and keys normalized, 4 experts, two per token.
    {"olmoe-tiny", olmoe(2, 48, 6, 4, 2, 32, 64, 997, 0, 0)},
};

}  // namespace

std::string_view model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2:
      return "gpt2";
    case ModelFamily::llama:
      return "llama";
  }
  return "?";
}

FamilyTraits family_traits(ModelFamily family) {
  if (family == ModelFamily::gpt2)
    return {.norm = NormKind::layernorm, .mlp = MlpKind::gelu, .positions = PositionKind::learned, .biases = true,
            .grouped_query = false, .untied_output = false, .scaled_residual_init = true,
            .hf_transposed_weights = true};
  return {.norm = NormKind::rmsnorm, .mlp = MlpKind::swiglu, .positions = PositionKind::rotary, .biases = false,
          .grouped_query = true, .untied_output = true, .scaled_residual_init = false,
          .hf_transposed_weights = false};
}

int ModelConfig::padded_vocab_size() const {
  const int m = vocab_pad_multiple;
  return (vocab_size + m - 1) / m * m;
}

int64_t MoeConfig::capacity(int64_t rows) const {
  if (capacity_factor <= 0) return 0;
  return static_cast<int64_t>(std::ceil(static_cast<double>(capacity_factor) * static_cast<double>(rows) *
                                        static_cast<double>(routing.top_k) / static_cast<double>(experts)));
}

int64_t MoeConfig::expert_rows(int64_t rows) const {
  const int64_t assignments = rows * routing.top_k;
  return capacity_factor > 0 ? std::min(assignments, int64_t{experts} * capacity(rows)) : assignments;
}

int64_t MoeConfig::received_rows(int64_t rows, int64_t local, int ranks) const {
  const int64_t assignments = rows * std::min<int64_t>(routing.top_k, local);
  return ranks * (capacity_factor > 0 ? std::min(assignments, local * capacity(rows)) : assignments);
}

namespace {

// The mixture-of-experts fields, when there are experts (with none, nothing reads them).
void check_moe(const ModelConfig& c, FieldProblems& problems) {
  const MoeConfig& m = c.moe;
  problems.require(m.experts == 0 || (m.experts >= 2 && m.experts <= 4096), "model.moe_experts", m.experts,
                   "must be 0 (a dense MLP) or in [2, 4096]");
  if (m.experts < 2) return;
  problems.require(c.traits().mlp == MlpKind::swiglu, "model.moe_experts", m.experts,
                   str("needs SwiGLU experts, which the ", model_family_name(c.family),
                       " family's MLP is not; use the llama family or moe_experts = 0"));
  problems.require(m.expert_hidden >= 1 && m.expert_hidden <= (1 << 24), "model.moe_expert_hidden", m.expert_hidden,
                   "must be in [1, 2^24]");
  problems.require(m.routing.top_k >= 1 && m.routing.top_k <= m.experts, "model.moe_top_k", m.routing.top_k,
                   str("must be in [1, moe_experts = ", m.experts, "]: each token goes to that many distinct experts"));
  problems.require(std::isfinite(m.routing.route_scale) && m.routing.route_scale > 0, "model.moe_route_scale",
                   m.routing.route_scale, "must be finite and above 0");
  problems.require(m.shared_hidden >= 0 && m.shared_hidden <= (1 << 24), "model.moe_shared_hidden", m.shared_hidden,
                   "must be in [0, 2^24] (0: no shared expert)");
  problems.require(!m.shared_gate || m.shared_hidden > 0, "model.moe_shared_gate", m.shared_gate ? "true" : "false",
                   "gates the shared expert, so needs moe_shared_hidden > 0");
  problems.require(std::isfinite(m.bias_update_rate) && m.bias_update_rate >= 0 && m.bias_update_rate <= 1,
                   "model.moe_bias_update_rate", m.bias_update_rate,
                   "must be in [0, 1] (0: no balancing bias; DeepSeek-V3: 0.001)");
  problems.require(std::isfinite(m.aux_loss_coef) && m.aux_loss_coef >= 0 && m.aux_loss_coef <= 1,
                   "model.moe_aux_loss_coef", m.aux_loss_coef,
                   "must be in [0, 1] (0: no load-balancing loss; Mixtral: 0.02, Megatron-Core's default 0.01)");
  problems.require(std::isfinite(m.z_loss_coef) && m.z_loss_coef >= 0 && m.z_loss_coef <= 1, "model.moe_z_loss_coef",
                   m.z_loss_coef, "must be in [0, 1] (0: no router z-loss; ST-MoE: 0.001)");
  problems.require(std::isfinite(m.capacity_factor) && m.capacity_factor >= 0 && m.capacity_factor <= 64,
                   "model.moe_capacity_factor", m.capacity_factor,
                   "must be 0 (dropless: no token dropped) or in (0, 64] (Switch Transformer: 1.0 to 1.25)");
  problems.require(m.first_dense_layers >= 0 && m.first_dense_layers < c.n_layer, "model.moe_first_dense_layers",
                   m.first_dense_layers, str("must be in [0, n_layer = ", c.n_layer, "): at least one block has experts"));
}

}  // namespace

void check_model_config(const ModelConfig& c, FieldProblems& problems) {
  // Fields are the configuration's keys; integers (and flags) written as integers.
  const auto require = [&](bool ok, std::string_view field, long long value, std::string_view valid) {
    problems.require(ok, str("model.", field), value, valid);
  };
  require(c.n_layer >= 1, "n_layer", c.n_layer, "must be at least 1");
  require(c.d_model >= 1, "d_model", c.d_model, "must be at least 1");
  require(c.n_head >= 1, "n_head", c.n_head, "must be at least 1");
  if (c.n_head >= 1 && c.d_model >= 1)
    require(c.d_model % c.n_head == 0, "d_model", c.d_model,
            str("must be divisible by n_head = ", c.n_head, " (head size = d_model / n_head)"));
  require(c.n_kv_head >= 0, "n_kv_head", c.n_kv_head, "must be at least 0 (0 means n_head)");
  if (c.n_kv_head >= 1 && c.n_head >= 1)
    require(c.n_head % c.n_kv_head == 0, "n_kv_head", c.n_kv_head,
            str("must divide n_head = ", c.n_head, " (each key/value head serves n_head / n_kv_head query heads)"));
  require(c.ffn_hidden_size >= 0, "ffn_hidden_size", c.ffn_hidden_size, "must be at least 0 (0 means 4 * d_model)");
  require(c.vocab_size >= 1, "vocab_size", c.vocab_size, "must be at least 1");
  require(c.max_seq_len >= 1, "max_seq_len", c.max_seq_len, "must be at least 1");
  require(c.vocab_pad_multiple >= 1 && c.vocab_pad_multiple <= 4096, "vocab_pad_multiple", c.vocab_pad_multiple,
          "must be in [1, 4096] (1 disables padding)");
  // Sizes are multiplied together for buffer offsets; keep every product inside int64 and
  // every single dimension inside int32 for BLAS.
  require(c.d_model <= (1 << 20), "d_model", c.d_model, "must be at most 1048576");
  require(c.vocab_size <= (1 << 30), "vocab_size", c.vocab_size, "must be at most 2^30");
  require(c.max_seq_len <= (1 << 24), "max_seq_len", c.max_seq_len, "must be at most 2^24");
  require(c.n_layer <= 4096, "n_layer", c.n_layer, "must be at most 4096");
  require(c.ffn_hidden_size <= (1 << 24), "ffn_hidden_size", c.ffn_hidden_size, "must be at most 2^24");
  const auto require_real = [&](bool ok, std::string_view field, double value, std::string_view valid) {
    problems.require(ok, str("model.", field), value, valid);
  };
  require_real(c.norm_eps > 0 && c.norm_eps < 1, "norm_eps", c.norm_eps, "must be in (0, 1)");
  const FamilyTraits traits = c.traits();
  const std::string family(model_family_name(c.family));
  if (!traits.grouped_query)
    require(c.n_kv_head == 0 || c.n_kv_head == c.n_head, "n_kv_head", c.n_kv_head,
            str("must equal n_head (or be 0) for ", family, ", which has no grouped-query attention; use the llama "
                "family"));
  if (!traits.untied_output)
    require(c.tied_embeddings, "tied_embeddings", c.tied_embeddings, str("must be true for ", family));
  if (traits.biases)
    problems.require(!c.qkv_bias, "model.qkv_bias", "true",
                     str("must be false for ", family, ", whose layers all have biases"));
  if (traits.norm != NormKind::rmsnorm)
    problems.require(!c.qk_norm, "model.qk_norm", "true",
                     str("normalizes queries and keys by RMSNorm, and ", family, " has LayerNorms; use the llama "
                         "family"));
  if (traits.positions == PositionKind::rotary && c.n_head >= 1 && c.d_model >= 1 && c.d_model % c.n_head == 0)
    require(c.head_size() % 2 == 0, "d_model", c.d_model,
            str("gives head size d_model / n_head = ", c.head_size(), ", but rotary embedding needs an even head size"));
  if (traits.positions == PositionKind::rotary) {
    require_real(c.rope_theta > 1, "rope_theta", c.rope_theta, "must be above 1");
    require_real(c.rope_scaling_factor == 0 || c.rope_scaling_factor >= 1, "rope_scaling_factor",
                 c.rope_scaling_factor, "must be 0 (no scaling) or at least 1");
    if (c.rope_scaling_factor > 0) {
      require_real(c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor,
                   "rope_high_freq_factor", c.rope_high_freq_factor,
                   str("must exceed rope_low_freq_factor = ", c.rope_low_freq_factor, " > 0"));
      require(c.rope_original_max_seq_len >= 1, "rope_original_max_seq_len", c.rope_original_max_seq_len,
              "must be at least 1");
    }
  }
  check_moe(c, problems);
}

void validate_model_config(const ModelConfig& config) {
  FieldProblems problems;
  check_model_config(config, problems);
  problems.throw_if_any("invalid model description:");
}

ModelConfig model_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p.config;
  std::string valid;
  for (const auto& p : kPresets) valid += str(valid.empty() ? "" : ", ", p.name);
  throw Error(str("unknown model preset '", name, "'; valid presets are ", valid));
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

}  // namespace dt
