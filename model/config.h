// Model description: the family and the sizes that determine every parameter's shape.
//
// A ModelConfig is plain data; validate_model_config() checks it and is called by everything
// that builds a model from one, before anything is allocated. Describing a model never
// allocates it, so a 1.5B (or later 405B) preset can be inspected on a laptop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/field_problems.h"
#include "kernels/moe_route.h"

namespace dt {

// gpt2: LayerNorm with bias, learned positions, GELU MLP, biases everywhere, tied embeddings.
// llama: RMSNorm, rotary positions, SwiGLU MLP, no biases, grouped-query attention, tied or
// untied output embedding.
enum class ModelFamily { gpt2, llama };
std::string_view model_family_name(ModelFamily family);

// What distinguishes the families, as Megatron-Core's TransformerConfig says it: code asks for
// a trait, never for the family, so a new family is a new set of traits
// (model/block_declaration.h derives the block from them).
enum class NormKind { layernorm, rmsnorm };  // LayerNorm keeps a per-row mean and has a bias
enum class MlpKind { gelu, swiglu };          // SwiGLU's first projection is gate and up: 2F rows
enum class PositionKind { learned, rotary };  // a wpe table, or rotary embedding in attention
struct FamilyTraits {
  NormKind norm;
  MlpKind mlp;
  PositionKind positions;
  bool biases;               // every linear layer and norm has a bias
  bool grouped_query;        // key/value heads may be fewer than query heads
  bool untied_output;        // the output projection may be its own lm_head
  // GPT-2 scales the residual projections' initial weights by 1/sqrt(2L), so the residual
  // stream's variance does not grow with depth.
  bool scaled_residual_init;
  // Hugging Face's layout: GPT-2's Conv1D stores weights (in, out), transposed.
  bool hf_transposed_weights;
};
FamilyTraits family_traits(ModelFamily family);

// A mixture-of-experts MLP in blocks [first_dense_layers, n_layer): a router, a linear layer
// computed in f32, scores `experts` SwiGLU experts of hidden width expert_hidden for each token,
// and the MLP's output is the sum of the top_k experts' outputs weighted as `routing` says
// (kernels/moe_route.h), plus the output of a shared expert every token passes through where
// shared_hidden > 0 (Qwen-MoE), scaled by sigmoid(x · w) with shared_gate. experts = 0: every
// block's MLP is dense.
struct MoeConfig {
  int experts = 0;                // E
  int expert_hidden = 0;          // F_e, each expert's SwiGLU hidden width
  kernels::MoeRouting routing;    // softmax or sigmoid scores, top_k, renormalize, route_scale
  int shared_hidden = 0;          // the shared expert's hidden width; 0: none
  bool shared_gate = false;       // Qwen-MoE's sigmoid gate on the shared expert's output
  int first_dense_layers = 0;     // DeepSeek-V3 keeps its first 3 blocks dense
  // Auxiliary-loss-free balancing (DeepSeek-V3: 0.001; model/expert_balance.h): how far each
  // expert's choice bias moves toward the mean load after a step; 0: no bias.
  float bias_update_rate = 0;
  // The routers' auxiliary losses (model/moe_mlp.h), each block's added to the training loss with
  // these weights; 0: none. Load balancing (Switch Transformer, Mixtral: 0.01-0.02 of the loss,
  // taken per sequence) and the router z-loss (ST-MoE: 0.001).
  float aux_loss_coef = 0;
  float z_loss_coef = 0;
  // Dropless (0), or each expert takes at most capacity(N) of a micro-batch's N rows on a rank
  // (Megatron-Core's moe_expert_capacity_factor), the assignments over it dropped lowest routing
  // weight first (kernels/moe_permute.h). Training's passes only: generation keeps every one.
  float capacity_factor = 0;

  // ceil(capacity_factor · N · top_k / E) rows per expert; 0 when dropless.
  int64_t capacity(int64_t rows) const;
  // The experts' rows for N routed rows at most: N · top_k, or E · capacity(N) when fewer.
  int64_t expert_rows(int64_t rows) const;
  // The rows a rank holding `local` of the experts receives at most under expert parallelism over
  // `ranks` ranks that each route N rows: each rank's N rows, each of which takes at most
  // min(top_k, local) of them, or within a capacity each rank's local · capacity(N) when fewer.
  // expert_rows(N) on one rank. Dropless, the bound is met only when every rank sends every row
  // here: the memory plan sizes for it.
  int64_t received_rows(int64_t rows, int64_t local, int ranks) const;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::gpt2;
  int n_layer = 0;
  int d_model = 0;      // C
  int n_head = 0;       // NH; head size HS = d_model / n_head
  int n_kv_head = 0;    // NKV key/value heads, dividing NH (llama); 0 means NH
  int ffn_hidden_size = 0;  // F, the MLP's hidden width; 0 means 4 * d_model (GPT-2's)
  int vocab_size = 0;   // V: the tokenizer's vocabulary; what logits, loss and saved tensors use
  int max_seq_len = 0;  // longest sequence: rows of gpt2's position embedding, llama's context
  bool tied_embeddings = true;  // the output projection is wte (else its own lm_head)
  bool qkv_bias = false;        // llama: biases on the q, k and v projections (Qwen2, Qwen-MoE)
  // llama: an RMSNorm over each token's query (all heads' columns) and another over its key, after
  // the projection and before rotary (OLMoE, OLMo 2).
  bool qk_norm = false;
  float norm_eps = 1e-5f;
  // Rotary embedding (llama): base theta, and Llama 3's frequency scaling when factor > 0
  // (kernels/rope.h).
  double rope_theta = 10000;
  double rope_scaling_factor = 0;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int rope_original_max_seq_len = 8192;
  // The embedding is stored with Vp = vocab_size rounded up to this multiple, for GEMM speed
  // (llm.c pads 50257 to 50304). The padding rows are zero, get zero gradient, and are never
  // shown: not in logits, loss, gradients, saved tensors or parameter counts.
  int vocab_pad_multiple = 128;
  MoeConfig moe = {};

  FamilyTraits traits() const { return family_traits(family); }
  // Whether block `layer`'s MLP is a mixture of experts.
  bool moe_block(int layer) const { return moe.experts > 0 && layer >= moe.first_dense_layers; }
  int head_size() const { return d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int qkv_width() const { return (n_head + 2 * kv_heads()) * head_size(); }  // fused q, k, v
  int padded_vocab_size() const;  // Vp
  int ffn_hidden() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * d_model; }
  // Output columns of the MLP's first projection: F, or 2F for SwiGLU's gate and up.
  int ffn_in_width() const { return traits().mlp == MlpKind::swiglu ? 2 * ffn_hidden() : ffn_hidden(); }
};

// Records every invalid field with its value and valid range, under its key ("model.d_model");
// validate_model_config throws them as one dt::Error.
void check_model_config(const ModelConfig& config, FieldProblems& problems);
void validate_model_config(const ModelConfig& config);

// Published sizes (gpt2-124m ... gpt2-1558m, llama3.2-1b ... llama3.1-405b) and small test
// sizes (gpt2-tiny, gpt2-mini, llama-tiny).
// Throws dt::Error naming the valid presets for an unknown name.
ModelConfig model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace dt
