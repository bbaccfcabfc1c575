#include "model/block_declaration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ckpt/hf_checkpoint.h"
#include "model/flops.h"
#include "model/tensor_shard.h"
#include "model/parameters.h"

namespace dt {
namespace {

// The layout a block's declaration derives, on every tensor-parallel rank: each declared layer's
// parameters in declaration order, each linear layer's weight (out, in) features as the
// declaration gives them for that rank, and nothing else in the block's unit.
TEST(BlockDeclaration, TheLayoutHoldsExactlyTheDeclaredLayersOnEveryRank) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    ModelConfig c = model_preset(preset);
    const BlockDeclaration& block = declare_block(c, 0);
    for (const int ranks : {1, 2, 3})  // 3: llama-tiny's 2 key/value heads copied
      for (int r = 0; r < ranks; ++r) {
        const ParameterLayout layout(c, kParamAlignment, {r, ranks});
        std::vector<std::string> declared;
        for (const auto& layer : block.layers) {
          if (const auto* norm = std::get_if<NormDeclaration>(&layer)) {
            declared.push_back("h.1." + norm->name + ".weight");
            if (c.traits().norm == NormKind::layernorm) declared.push_back("h.1." + norm->name + ".bias");
          }
          if (const auto* linear = std::get_if<LinearDeclaration>(&layer)) {
            const std::string name = "h.1." + linear->name;
            declared.push_back(name + ".weight");
            if (c.traits().biases) declared.push_back(name + ".bias");
            const ParamInfo& w = layout.find(name + ".weight");
            EXPECT_EQ(w.shape[0], linear->out_features(c, layout.dims())) << preset << " " << name << " rank " << r;
            EXPECT_EQ(w.shape[1], linear->in_features(c, layout.dims())) << preset << " " << name << " rank " << r;
            EXPECT_EQ(w.slice.whole, Shape({linear->out_features(c), linear->in_features(c)})) << name;
            EXPECT_EQ(w.slice.dim, linear->style == LinearStyle::column ? 0 : 1) << name;
          }
        }
        std::vector<std::string> laid_out;
        for (const ParamInfo& p : layout.params())
          if (p.name.starts_with("h.1.")) laid_out.push_back(p.name);
        EXPECT_EQ(laid_out, declared) << preset << " rank " << r << " of " << ranks;
      }
  }
}

// Every declared activation has a width on any rank, and the kept/rebuilt split follows the
// policies: full rebuilds everything but the block's output, selective only attention's core.
// The query and key norms' inputs and statistics are there only where the model has them.
TEST(BlockDeclaration, RecomputationPoliciesRebuildWhatTheyDeclare) {
  ModelConfig c = model_preset("llama-tiny");
  for (const bool qk_norm : {false, true}) {
    c.qk_norm = qk_norm;
    const BlockDeclaration& block = declare_block(c, 0);
    // A dense block's, up to res3: all of them with the norms, 4 fewer without.
    ASSERT_EQ(block.activations.size(), static_cast<size_t>(BlockActivation::res3) + 1 - (qk_norm ? 0 : 4));
    for (size_t i = 0; i < block.activations.size(); ++i) {
      const ActivationDeclaration& a = block.activations[i];
      if (i > 0) {
        EXPECT_LT(block.activations[i - 1].id, a.id);  // listed in id order: the regions' order
      }
      EXPECT_TRUE(a.kept(Recompute::none));
      EXPECT_EQ(a.kept(Recompute::full), a.id == BlockActivation::res3);
      EXPECT_EQ(a.kept(Recompute::selective), a.id != BlockActivation::atty && a.id != BlockActivation::lse);
    }
    EXPECT_EQ(qk_norm, std::ranges::any_of(block.activations, [](const ActivationDeclaration& a) {
                return a.id == BlockActivation::q_in;
              }));
  }
  c.qk_norm = true;
  const ShardDims dims = shard_dims(c, {});
  const BlockDeclaration& normed = declare_block(c, 0);
  EXPECT_EQ(normed.activation(BlockActivation::q_in).width_of(c, dims), c.n_head * c.head_size());
  EXPECT_EQ(normed.activation(BlockActivation::k_in).width_of(c, dims), c.kv_heads() * c.head_size());
  const BlockDeclaration& block = declare_block(model_preset("llama-tiny"), 0);
  EXPECT_EQ(block.activation(BlockActivation::ln1_mean).width_of(c, shard_dims(c, {})), 0);  // RMSNorm keeps no mean
  EXPECT_EQ(declare_block(model_preset("gpt2-tiny"), 0).activation(BlockActivation::ln1_mean).width_of(
                model_preset("gpt2-tiny"), shard_dims(model_preset("gpt2-tiny"), {})),
            1);
}

// An expert block keeps the router's choice and the experts' rows in place of fch and fch_act,
// for all the micro-batch's rows (under tensor parallelism every rank routes them all): top_k
// rows per token (dropless, the most there can be), f32 scores and weights, i32 indices;
// under full recomputation only the experts' output (which the combine's backward reads) and
// the block's output stay.
TEST(BlockDeclaration, ExpertBlocksDeclareTheRoutersAndTheExpertsActivations) {
  ModelConfig c = model_preset("moe-tiny");  // 4 experts of hidden 32, top 2, d_model 48
  c.moe.shared_hidden = 40;
  const BlockDeclaration& block = declare_block(c, 0);
  const ShardDims dims = shard_dims(c, {});
  EXPECT_THROW(block.activation(BlockActivation::fch), Error);
  using A = BlockActivation;
  const auto expect = [&](A id, int64_t width, int64_t rows, DType dtype) {
    const ActivationDeclaration& a = block.activation(id);
    EXPECT_EQ(a.width_of(c, dims), width) << static_cast<int>(id);
    EXPECT_EQ(a.rows_of(c, dims, 10, 5, 2), rows) << static_cast<int>(id);  // 2 sequences, 10 rows, 5 this rank's
    EXPECT_EQ(a.dtype(DType::bf16), dtype) << static_cast<int>(id);
  };
  expect(A::route_scores, 4, 10, DType::f32);
  expect(A::route_experts, 2, 10, DType::i32);
  expect(A::route_weights, 2, 10, DType::f32);
  expect(A::route_rows, 2, 10, DType::i32);
  expect(A::expert_in, 48, 20, DType::bf16);
  expect(A::expert_fch, 64, 20, DType::bf16);
  expect(A::expert_act, 32, 20, DType::bf16);
  expect(A::expert_out, 48, 20, DType::bf16);
  expect(A::shared_fch, 80, 10, DType::bf16);
  expect(A::shared_act, 40, 10, DType::bf16);
  expect(A::shared_out, 48, 5, DType::bf16);
  EXPECT_THROW(block.activation(A::shared_gate), Error);  // no gate
  // Under expert parallelism the experts' input, fc output and activation are on the rows the
  // rank's experts receive (2 of the 4 over 3 ranks: every rank's 10 rows twice), their output
  // where it returns.
  const ShardDims spread = shard_dims(c, {}, {0, 3});
  EXPECT_EQ(block.activation(A::expert_in).rows_of(c, spread, 10, 5, 2), 60);
  EXPECT_EQ(block.activation(A::expert_act).rows_of(c, spread, 10, 5, 2), 60);
  EXPECT_EQ(block.activation(A::expert_out).rows_of(c, spread, 10, 5, 2), 20);
  // The routers' losses' activations take memory only where the model trains with them.
  expect(A::route_counts, 0, 2, DType::f32);
  expect(A::route_logits, 0, 10, DType::f32);
  c.moe.aux_loss_coef = 0.01f, c.moe.z_loss_coef = 0.001f;
  expect(A::route_counts, 4, 2, DType::f32);
  expect(A::route_logits, 4, 10, DType::f32);
  // Within a capacity of ceil(0.5 · 10 · 2 / 4) = 3 rows per expert, 12 of the 20 assignments.
  c.moe.capacity_factor = 0.5f;
  expect(A::expert_in, 48, 12, DType::bf16);
  for (const ActivationDeclaration& a : block.activations)
    EXPECT_EQ(a.kept(Recompute::full), a.id == A::res3 || a.id == A::expert_out || a.id == A::shared_out)
        << static_cast<int>(a.id);
  for (size_t i = 1; i < block.activations.size(); ++i)
    EXPECT_LT(block.activations[i - 1].id, block.activations[i].id);  // the regions' order
}

// The Hugging Face pieces of each block parameter cover its rows exactly once, in order (an
// expert layer's (E, out, in) weight as E · out rows), each piece's name once.
TEST(BlockDeclaration, HuggingFaceNamesCoverEveryParameterRow) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny", "moe-tiny"}) {
    const ModelConfig c = model_preset(preset);
    const ParameterLayout layout(c);
    std::set<std::string> names;
    for (const ParamInfo& p : layout.params()) {
      int64_t row = 0;
      for (const ckpt::HfPiece& piece : ckpt::hf_pieces(c, p)) {
        EXPECT_EQ(piece.row_begin, row) << preset << " " << p.name << " " << piece.hf_name;
        EXPECT_TRUE(names.insert(piece.hf_name).second) << preset << " " << piece.hf_name << " named twice";
        row += piece.rows;
      }
      EXPECT_EQ(row, p.is_expert ? p.shape[0] * p.shape[1] : p.shape[0]) << preset << " " << p.name;
    }
  }
  const std::vector<ckpt::HfPiece> proj =
      ckpt::hf_pieces(model_preset("moe-tiny"), ParameterLayout(model_preset("moe-tiny")).find("h.1.mlp.experts.proj.weight"));
  ASSERT_EQ(proj.size(), 4u);
  EXPECT_EQ(proj[3].hf_name, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
}

// A block's FLOPs are its linear layers' products and attention's core, the published formula:
// 2 C (q + k + v) + 2 C C + 2 C F_in + 2 F C per token.
TEST(BlockDeclaration, FlopsAreTheDeclaredProducts) {
  const ModelConfig c = model_preset("llama-tiny");
  const double C = c.d_model, F = c.ffn_hidden();
  const double expected = 2 * C * c.qkv_width() + 2 * C * C + 2 * C * (2 * F) + 2 * F * C;
  EXPECT_EQ(block_flops(c, 0, 64) - attention_core_flops(c, 64), expected);
}

}  // namespace
}  // namespace dt
