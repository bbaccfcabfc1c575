// Ring attention against one rank's causal attention: ctest runs it as Mpi.np2 to Mpi.np4, the
// world being the context-parallel group. Every rank makes the whole sequences' qkv and its
// gradient, runs the one-rank attention (with llama's rotary angles, and without) on them, and
// compares its own tokens' rows — the output and the qkv gradient — with ring attention's over
// its chunks, zig-zag and plain, for grouped-query heads.
#include "parallel/context/ring_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "comm/mpi.h"
#include "model/config.h"
#include "model/rope_tables.h"
#include "tests/gradcheck.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

using testing::OwnedTensor;

// Rows of this rank's tokens (layout.positions() of every sequence) of x (B*T, W).
OwnedTensor own_rows(const Tensor& x, const ContextLayout& layout, int64_t B) {
  const int64_t W = x.dim(1), Tl = layout.local_len();
  OwnedTensor out = testing::zeros(x.dtype, {B * Tl, W});
  const std::vector<int64_t> positions = layout.positions();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t)
      std::copy_n(x.ptr<float>() + (b * layout.seq_len + positions[static_cast<size_t>(t)]) * W, W,
                  out.ptr<float>() + (b * Tl + t) * W);
  return out;
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(actual.ptr<float>()[i] - expected.ptr<float>()[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(expected.ptr<float>()[i])));
  }
  return worst / largest;
}

TEST(Mpi, RingAttentionGivesEachRankItsTokensOfTheWholeSequencesAttention) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int cp = world->size();
  const ModelConfig config = model_preset("llama-tiny");  // 6 query heads over 2 key/value heads of 8
  const kernels::AttentionHeads heads(config.n_head, config.kv_heads());
  const int64_t B = 2, T = 2 * cp * 3, W = config.qkv_width(), A = int64_t{config.n_head} * config.head_size();
  const RopeTables rope = make_rope_tables(config, static_cast<int>(T));
  for (const bool rotary : {true, false})
    for (const bool zigzag : {true, false}) {
      SCOPED_TRACE(str(rotary ? "rotary" : "no rotary", zigzag ? ", zig-zag" : ", plain", ", cp ", cp));
      const ContextLayout layout{.ranks = cp, .rank = world->rank(), .zigzag = zigzag, .seq_len = T};
      const OwnedTensor qkv = testing::random_normal(DType::f32, {B * T, W}, 11);
      const OwnedTensor datty = testing::random_normal(DType::f32, {B * T, A}, 12);
      // One rank over the whole sequences.
      const OwnedTensor whole_qkv = testing::converted(qkv.t, DType::f32);
      OwnedTensor atty = testing::zeros(DType::f32, {B * T, A}), lse = testing::zeros(DType::f32, {B * config.n_head * T});
      OwnedTensor dqkv = testing::zeros(DType::f32, {B * T, W});
      CausalSelfAttention one(heads, B, T, rotary ? rope.cos : Tensor{}, rotary ? rope.sin : Tensor{});
      one.forward(whole_qkv.t, atty.t, lse.t);
      one.backward(dqkv.t, datty.t, whole_qkv.t, atty.t, lse.t);
      // The ring over this rank's tokens.
      const OwnedTensor my_qkv = own_rows(qkv.t, layout, B), my_datty = own_rows(datty.t, layout, B);
      const int64_t Nl = B * layout.local_len();
      OwnedTensor my_atty = testing::zeros(DType::f32, {Nl, A}), my_lse = testing::zeros(DType::f32, {Nl * config.n_head});
      OwnedTensor my_dqkv = testing::zeros(DType::f32, {Nl, W});
      RingAttention ring(*world, layout, heads, B, rotary ? rope.cos : Tensor{}, rotary ? rope.sin : Tensor{});
      ring.forward(my_qkv.t, my_atty.t, my_lse.t);
      ring.backward(my_dqkv.t, my_datty.t, my_qkv.t, my_atty.t, my_lse.t);
      // The merge's exponentials and the blocks' order: f32 rounding (kernels/attention_block_test.cpp).
      EXPECT_LT(relative_error(my_atty.t, own_rows(atty.t, layout, B).t), 2e-6);
      EXPECT_LT(relative_error(my_dqkv.t, own_rows(dqkv.t, layout, B).t), 1e-5);
      world->barrier().wait();
    }
}

}  // namespace
}  // namespace dt
