// A transformer block, declared once: its parameterised layers in parameter order — the norms,
// and the linear layers with their parallel style, the spans their split dimension is made of
// and their Hugging Face names — and its activations. Everything else is derived from this
// declaration: the parameter layout and tensor parallelism's shares (model/parameters.h), the
// layers a block runs (model/block.h), a stage's activation regions (model/stage.h), the FLOPs
// (model/flops.h), the planner's GEMMs (plan/step_time.h) and the checkpoint names
// (ckpt/hf_checkpoint.h). docs/architecture.md walks through adding a layer kind.
//
//   x' = x + attn.proj(attention(attn.qkv(ln_1(x))))
//   y  = x' + mlp.proj(act(mlp.fc(ln_2(x'))))
//
// or, where the block's MLP is a mixture of experts (model/config.h: MoeConfig), with
// u = ln_2(x'), routing r = mlp.router(u) (kernels/moe_route.h) and SwiGLU experts,
//
//   y  = x' + sum over the chosen e of weight_e · mlp.experts.proj[e](act(mlp.experts.fc[e](u)))
//           + sigmoid(mlp.shared_gate(u)) · mlp.shared.proj(act(mlp.shared.fc(u)))   (a shared expert)
//
// A family's traits (model/config.h) choose the norm, the MLP's activation and whether layers
// have biases; its Hugging Face names are the one thing declared per family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/recompute.h"

namespace dt {

struct ShardDims;

// How tensor parallelism splits a linear layer, in Megatron-Core's names: a column-parallel
// layer's output rows (each rank computes its rows of the output from the whole input), a
// row-parallel layer's input columns (each rank computes a partial sum of the whole output from
// its columns of the input; model/parallel_regions.h sums them).
enum class LinearStyle { column, row };

// What a range of a linear layer's split dimension is made of, which says how wide it is and
// which part of it a tensor-parallel rank holds (model/tensor_shard.h): the query heads' columns
// (NH · HS), the key/value heads' (NKV · HS), the MLP's hidden columns (F), a shared expert's
// (its own F, split as the MLP's), and, whole on every tensor-parallel rank, the router's
// outputs (one per expert, E), an expert's hidden columns (F_e) and a gate's single output.
enum class Span { query_heads, kv_heads, ffn, shared_ffn, experts, expert_ffn, one };
int64_t span_width(const ModelConfig& config, Span span);
// This rank's share of a span: the model's, or its part under tensor parallelism.
int64_t span_width(const ShardDims& dims, Span span);

// A Hugging Face tensor holding the next `spans` spans of a layer's split dimension, named
// <block prefix><name>.weight (and .bias).
struct HfTensor {
  std::string name;
  int spans = 1;
};

struct LinearDeclaration {
  std::string name;          // in the block: parameters h.<l>.<name>.weight and .bias
  LinearStyle style;
  std::vector<Span> spans;   // of the split dimension (column: output rows; row: input columns), in order
  bool residual = false;     // writes into the residual stream: GPT-2 scales its initial weights
  std::vector<HfTensor> hf;  // covering the spans in order
  // One weight per expert, (E, out, in): the experts' grouped linear (kernels/grouped_linear.h).
  bool per_expert = false;

  // The model's widths of the split dimension, and of the whole weight (rows, columns).
  int64_t split_width(const ModelConfig& config) const;
  int64_t in_features(const ModelConfig& config) const;
  int64_t out_features(const ModelConfig& config) const;
  // This rank's (in, out) features: the split dimension's share.
  int64_t in_features(const ModelConfig& config, const ShardDims& dims) const;
  int64_t out_features(const ModelConfig& config, const ShardDims& dims) const;
  // Whether it has a bias: every layer of a family with biases, and Qwen's q, k and v projections
  // (ModelConfig::qkv_bias).
  bool has_bias(const ModelConfig& config) const;
};

struct NormDeclaration {
  std::string name;  // in the block: parameters h.<l>.<name>.weight (and .bias with LayerNorm)
  std::string hf;    // its Hugging Face name in the block
  // What it normalizes: each row's C model columns (none given), or a span's columns (the query
  // and key norms': all heads' queries, or keys), its weight split as that span is.
  std::optional<Span> span = std::nullopt;
};

// A block's activations, each a region per block and micro-batch of a stage's store unless a
// recomputation policy rebuilds it in backward. A dense block has those up to res3, with the query
// and key norms' inputs and statistics where the model has them (ModelConfig::qk_norm); an expert
// block has the router's (scores, chosen experts, their weights, each assignment's row), the
// experts' rows (their input, fc output and activation as their ranks receive them, and their
// output as it returns) and a shared expert's, in place
// of fch and fch_act; where the model trains with the routers' losses, each sequence's
// assignments per expert (the balance loss's) and the router's logits (the z-loss's).
enum class BlockActivation {
  ln1, ln1_mean, ln1_rstd, qkv, q_in, k_in, q_rstd, k_rstd, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, res3,
  route_scores, route_experts, route_weights, route_rows, expert_in, expert_fch, expert_act, expert_out,
  shared_fch, shared_act, shared_out, shared_gate, route_counts, route_logits
};
constexpr int kBlockActivations = static_cast<int>(BlockActivation::route_logits) + 1;

// An activation's width, from this rank's sizes: the model width C, a norm's per-row mean
// (1 for LayerNorm, none for RMSNorm), one per row, the attention's qkv (this rank's heads), its
// query columns and its key columns, its output, one per head, the MLP's first projection's output and its activation's; the
// experts (E) and the chosen ones (top_k); an expert's first projection's output (2 F_e) and its
// activation's (F_e); a shared expert's (this rank's share); the experts (E) where the model has
// the balance loss, or the z-loss, and none where it has not.
enum class ActivationWidth {
  model, norm_mean, one, qkv, query, key, attention, heads, ffn_in, ffn,
  experts, top_k, expert_ffn_in, expert_ffn, shared_ffn_in, shared_ffn, aux_loss_experts, z_loss_experts
};
// Its rows: all N of the micro-batch, this rank's part of them under sequence parallelism, the
// experts' rows for all N (top_k per row, or fewer within a capacity: MoeConfig::expert_rows),
// the rows this rank's experts receive (the same without expert parallelism, else at most what
// every rank of its group sends them: MoeConfig::received_rows), or one per sequence of the
// micro-batch.
enum class ActivationRows { all, local, assignments, received, sequences };
// What it holds: values in the run's precision, f32 (per-row statistics, the router's scores and
// weights) or i32 indices.
enum class ActivationType { precision, f32, i32 };

struct ActivationDeclaration {
  BlockActivation id;
  ActivationWidth width;
  ActivationRows rows;
  ActivationType type;
  // The least recomputation policy that rebuilds it in backward instead of keeping it
  // (Recompute::none: always kept).
  Recompute rebuilt_from;

  bool kept(Recompute policy) const { return rebuilt_from == Recompute::none || policy < rebuilt_from; }
  int64_t width_of(const ModelConfig& config, const ShardDims& dims) const;
  // Its rows, of a micro-batch of `sequences` sequences and N rows on a rank holding `local` of them.
  int64_t rows_of(const ModelConfig& config, const ShardDims& dims, int64_t all_rows, int64_t local_rows,
                  int64_t sequences) const;
  DType dtype(DType precision) const {
    return type == ActivationType::f32 ? DType::f32 : type == ActivationType::i32 ? DType::i32 : precision;
  }
};

// The Hugging Face names of the tensors outside the blocks, and the blocks' prefix ("h.<l>."
// becomes block_prefix + "<l>.").
struct HfNames {
  std::string block_prefix, wte, wpe, ln_f, lm_head;
};

// The family's traits (model/config.h) say which norm and MLP activation the layers compute and
// whether they have biases; the declaration says what the layers are.
struct BlockDeclaration {
  // The parameterised layers in the order their parameters are laid out.
  std::vector<std::variant<NormDeclaration, LinearDeclaration>> layers;
  // The activations, in the order their regions are laid out (increasing ids).
  std::vector<ActivationDeclaration> activations;
  HfNames hf;

  const LinearDeclaration& linear(std::string_view name) const;
  // The linear layers in forward order.
  std::vector<const LinearDeclaration*> linears() const;
  // Throws dt::Error for one the block does not have.
  const ActivationDeclaration& activation(BlockActivation id) const;
};

// The declaration of block `layer` of config: its MLP dense or a mixture of experts
// (ModelConfig::moe_block).
const BlockDeclaration& declare_block(const ModelConfig& config, int layer);
// The distinct declarations of config's blocks, in the order of their first block: one where
// every block is alike.
std::vector<const BlockDeclaration*> block_declarations(const ModelConfig& config);

}  // namespace dt
