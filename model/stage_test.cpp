// Stages and blocks change where the passes run and in what groups, never a bit of what they
// compute: a model cut into stages, micro-batches held several at once, and a block's weight
// gradients deferred all give the whole model's numbers exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/allocator.h"
#include "core/rng.h"
#include "model/stage.h"
#include "tests/gradcheck.h"

namespace dt {
namespace {

using testing::OwnedTensor;
using testing::random_normal;
using testing::zeros;

constexpr int B = 2, T = 19;

OwnedTensor random_ids(const ModelConfig& config, uint64_t seed) {
  OwnedTensor ids = zeros(DType::i32, {B, T});
  const ElementRng rng(seed, "stage ids");
  for (int64_t i = 0; i < B * T; ++i) ids.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(i) * config.vocab_size);
  return ids;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return {p, p + t.bytes()};
}

class StageTest : public ::testing::TestWithParam<const char*> {
 protected:
  StageTest()
      : config(model_preset(GetParam())),
        layout(config),
        weights(layout, MemTag::parameters),
        tokens{random_ids(config, 1), random_ids(config, 2)},
        targets{random_ids(config, 3), random_ids(config, 4)} {
    init_parameters(weights, 7);
  }

  // Loss and gradients of the micro-batches on one stage covering the whole model, each
  // micro-batch's forward and backward one after the other.
  std::pair<double, std::vector<uint8_t>> whole_model(Recompute recompute) const {
    FlatTensors grads(layout, MemTag::gradients);
    grads.zero();
    Stage whole(layout, StageUnits::whole(config), recompute, DType::f32, Device::cpu, B, T);
    double loss = 0;
    for (int k = 0; k < 2; ++k) {
      whole.forward(k, tokens[k].t, weights, true);
      loss += whole.loss(k, targets[k].t, 0.5f, true);
      EXPECT_FALSE(whole.backward(k, Tensor{}, tokens[k].t, weights, grads).defined());
      whole.release(k);
    }
    return {loss, bytes_of(grads.all())};
  }

  ModelConfig config;
  ParameterLayout layout;
  FlatTensors weights;
  OwnedTensor tokens[2], targets[2];
};

TEST_P(StageTest, TwoStagesChainedGiveTheWholeModelsLossAndGradients) {
  for (Recompute recompute : {Recompute::none, Recompute::full}) {
    const auto [loss, expected] = whole_model(recompute);
    // The first stage ends after block 0, the second holds the rest and the head (a tied wte is
    // read by both and gets gradient from both).
    const int cut = 1;
    Stage first(layout, {.embeddings = true, .first_block = 0, .end_block = cut, .head = false}, recompute, DType::f32,
                Device::cpu, B, T);
    Stage second(layout, {.embeddings = false, .first_block = cut, .end_block = config.n_layer, .head = true},
                 recompute, DType::f32, Device::cpu, B, T);
    FlatTensors grads(layout, MemTag::gradients);
    grads.zero();
    double chained = 0;
    for (int k = 0; k < 2; ++k) {
      const Tensor out = first.forward(k, tokens[k].t, weights, true);
      EXPECT_EQ(out.shape, Shape({B * T, config.d_model}));
      second.forward(k, out, weights, true, tokens[k].t.shape);
      chained += second.loss(k, targets[k].t, 0.5f, true);
      const Tensor din = second.backward(k, Tensor{}, Tensor{}, weights, grads);
      ASSERT_EQ(din.shape, Shape({B * T, config.d_model}));
      first.backward(k, din, tokens[k].t, weights, grads);
    }
    EXPECT_EQ(chained, loss) << recompute_name(recompute);
    EXPECT_EQ(bytes_of(grads.all()), expected) << recompute_name(recompute);
  }
}

// Records the hook calls a stage makes.
struct RecordedHooks : UnitHooks {
  using Hook = UnitHookCall::Hook;
  void weights_needed(size_t u, std::optional<size_t> next) override {
    calls.push_back({Hook::weights_needed, u, next});
  }
  void weights_done(size_t u) override { calls.push_back({Hook::weights_done, u}); }
  void gradients_needed(size_t u) override { calls.push_back({Hook::gradients_needed, u}); }
  void gradients_final(size_t u) override { calls.push_back({Hook::gradients_final, u}); }
  std::vector<UnitHookCall> calls;
};

// The hook calls as data (what plan/ walks to size ZeRO 3's weights and ZeRO 2's gradients) are
// the calls the passes make: a whole model's (gpt2's wte tied, llama's not) and a cut in two.
TEST_P(StageTest, UnitHookCallsAreThoseThePassesMake) {
  const int cut = 1;
  for (const StageUnits units : {StageUnits::whole(config),
                                 StageUnits{.embeddings = true, .first_block = 0, .end_block = cut, .head = false},
                                 StageUnits{.embeddings = false, .first_block = cut, .end_block = config.n_layer,
                                            .head = true}}) {
    const std::string what = str("embeddings ", units.embeddings, " blocks [", units.first_block, ", ",
                                 units.end_block, ") head ", units.head);
    Stage stage(layout, units, Recompute::none, DType::f32, Device::cpu, B, T);
    RecordedHooks hooks;
    stage.set_unit_hooks(&hooks);
    FlatTensors grads(layout, MemTag::gradients);
    grads.zero();
    const OwnedTensor activations = random_normal(DType::f32, {B * T, config.d_model}, 5);
    const Tensor out = stage.forward(0, units.embeddings ? tokens[0].t : activations.t, weights, true,
                                     tokens[0].t.shape);
    if (units.head) stage.loss(0, targets[0].t, 0.5f, true);
    stage.backward(0, units.head ? Tensor{} : out, tokens[0].t, weights, grads);
    EXPECT_EQ(hooks.calls, Stage::unit_hook_calls(layout, units)) << what;
    // Every unit of the stage: weights read and gradients made.
    size_t finals = 0;
    for (const UnitHookCall& c : hooks.calls) finals += c.hook == UnitHookCall::Hook::gradients_final;
    EXPECT_EQ(finals, static_cast<size_t>(units.end_block - units.first_block) + units.embeddings + units.head)
        << what;
  }
}

TEST_P(StageTest, MicroBatchesHeldAtOnceGiveTheSameGradients) {
  for (Recompute recompute : {Recompute::none, Recompute::selective}) {
    const auto [loss, expected] = whole_model(recompute);
    Stage stage(layout, StageUnits::whole(config), recompute, DType::f32, Device::cpu, B, T);
    FlatTensors grads(layout, MemTag::gradients);
    grads.zero();
    // Both forwards before either backward, as a pipeline schedule runs them; backward in the
    // same order as above, so that the gradients are summed in the same order.
    const auto held = [] { return memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)]; };
    const size_t one = held();
    double both = 0;
    for (int k = 0; k < 2; ++k) stage.forward(k, tokens[k].t, weights, true);
    const size_t two = held();
    EXPECT_GT(two, one) << "the second micro-batch's activations";
    for (int k = 0; k < 2; ++k) {
      both += stage.loss(k, targets[k].t, 0.5f, true);
      stage.backward(k, Tensor{}, tokens[k].t, weights, grads);
      stage.release(k);
    }
    EXPECT_EQ(both, loss) << recompute_name(recompute);
    EXPECT_EQ(bytes_of(grads.all()), expected) << recompute_name(recompute);
    // A released micro-batch's buffer is reused: holding two again allocates nothing.
    for (int k = 2; k < 4; ++k) stage.forward(k, tokens[k - 2].t, weights, false);
    EXPECT_EQ(held(), two);
  }
}

// A zero-bubble schedule's order on two chained stages made to defer their weight passes: both
// micro-batches forward, both input passes (each stage's returning its input's gradient), then
// the weight passes in the backwards' order — the whole model's gradients, bit for bit.
TEST_P(StageTest, DeferredWeightPassesOfMicroBatchesHeldAtOnceGiveTheSameGradients) {
  const auto [loss, expected] = whole_model(Recompute::none);
  const int cut = 1;
  ParallelRegions& one = ParallelRegions::single_rank();
  Stage first(layout, {.embeddings = true, .first_block = 0, .end_block = cut, .head = false}, Recompute::none,
              DType::f32, Device::cpu, B, T, one, /*deferred_weights=*/true);
  Stage second(layout, {.embeddings = false, .first_block = cut, .end_block = config.n_layer, .head = true},
               Recompute::none, DType::f32, Device::cpu, B, T, one, /*deferred_weights=*/true);
  FlatTensors grads(layout, MemTag::gradients);
  grads.zero();
  double both = 0;
  for (int k = 0; k < 2; ++k) second.forward(k, first.forward(k, tokens[k].t, weights, true), weights, true, tokens[k].t.shape);
  for (int k = 0; k < 2; ++k) {
    both += second.loss(k, targets[k].t, 0.5f, true);
    const Tensor din = second.backward(k, Tensor{}, Tensor{}, weights, grads, /*weights_now=*/false);
    ASSERT_EQ(din.shape, Shape({B * T, config.d_model}));
    EXPECT_FALSE(first.backward(k, din, tokens[k].t, weights, grads, /*weights_now=*/false).defined());
  }
  EXPECT_NE(bytes_of(grads.all()), expected) << "the weight passes wait";
  for (int k = 0; k < 2; ++k) {
    second.backward_weight(k, Tensor{}, grads);
    first.backward_weight(k, tokens[k].t, grads);
  }
  EXPECT_EQ(both, loss);
  EXPECT_EQ(bytes_of(grads.all()), expected);
  EXPECT_THROW(Stage(layout, StageUnits::whole(config), Recompute::selective, DType::f32, Device::cpu, B, T, one, true),
               Error);
}

// A block's backward with the weights' gradients deferred to backward_weight (as a zero-bubble
// pipeline schedule runs it) gives the input's gradient and every parameter's gradient of the
// backward that takes them at once.
TEST_P(StageTest, DeferredWeightGradientsEqualTheImmediateOnes) {
  if (config.moe_block(0))
    GTEST_SKIP() << "a dense block's views, made here by hand; an expert block's deferred pass is compared through "
                    "the stage's regions (DeferredWeightPassesOfMicroBatchesHeldAtOnceGiveTheSameGradients)";
  const int64_t N = B * T, C = config.d_model;
  const Block block(layout, 0, Recompute::none);
  auto act = [&](int64_t width) { return zeros(DType::f32, {N, width}); };
  OwnedTensor ln1 = act(C), ln1_mean = zeros(DType::f32, {N}), ln1_rstd = zeros(DType::f32, {N}),
              qkv = act(config.qkv_width()), atty = act(C), lse = zeros(DType::f32, {N * config.n_head}),
              proj_out = act(C), res2 = act(C), ln2 = act(C), ln2_mean = zeros(DType::f32, {N}),
              ln2_rstd = zeros(DType::f32, {N}), fch = act(config.ffn_in_width()), fch_act = act(config.ffn_hidden()),
              res3 = act(C);
  const bool gpt2 = config.family == ModelFamily::gpt2;
  const BlockActivations a{.ln1 = ln1.t, .ln1_mean = gpt2 ? ln1_mean.t : Tensor{}, .ln1_rstd = ln1_rstd.t,
                           .qkv = qkv.t, .atty = atty.t, .lse = lse.t, .proj_out = proj_out.t, .res2 = res2.t,
                           .ln2 = ln2.t, .ln2_mean = gpt2 ? ln2_mean.t : Tensor{}, .ln2_rstd = ln2_rstd.t,
                           .fch = fch.t, .fch_act = fch_act.t, .res3 = res3.t, .branch = Tensor{},
                           .gathered = Tensor{}};
  const RopeTables rope = config.family == ModelFamily::llama ? make_rope_tables(config, T) : RopeTables{};
  CausalSelfAttention attention(layout.dims().heads.attention(), B, T, rope.cos, rope.sin);
  const OwnedTensor x = random_normal(DType::f32, {N, C}, 11), dout = random_normal(DType::f32, {N, C}, 12);
  block.forward(weights, x.t, a, attention);

  FlatTensors now_grads(layout, MemTag::gradients), later_grads(layout, MemTag::gradients);
  now_grads.zero();
  later_grads.zero();
  // At once: the residual stream's gradient updated in place, one buffer of working space each.
  OwnedTensor dres = zeros(DType::f32, {N, C});
  std::memcpy(dres.t.data, dout.t.data, dout.t.bytes());
  OwnedTensor dtmp = act(C), dact = act(config.ffn_hidden()), dfch = act(config.ffn_in_width()),
              dqkv = act(config.qkv_width());
  block.backward_input(weights, now_grads, x.t, a,
                       {.dout = dres.t, .dres2 = dres.t, .din = dres.t, .dtmp = dtmp.t, .datty = dtmp.t, .dact = dact.t,
                        .dfch = dfch.t, .dqkv = dqkv.t, .dlocal = Tensor{}},
                       attention, /*weights_now=*/true);
  // Deferred: distinct gradients that backward_weight reads later.
  OwnedTensor dres2 = act(C), din = act(C), dtmp2 = act(C), dact2 = act(config.ffn_hidden()),
              dfch2 = act(config.ffn_in_width()), dqkv2 = act(config.qkv_width());
  const BlockGradients deferred{.dout = dout.t, .dres2 = dres2.t, .din = din.t, .dtmp = dtmp2.t, .datty = dtmp2.t, .dact = dact2.t,
                                .dfch = dfch2.t, .dqkv = dqkv2.t, .dlocal = Tensor{}};
  block.backward_input(weights, later_grads, x.t, a, deferred, attention, /*weights_now=*/false);
  EXPECT_EQ(bytes_of(din.t), bytes_of(dres.t));
  EXPECT_NE(bytes_of(later_grads.all()), bytes_of(now_grads.all())) << "the linear layers' gradients wait";
  block.backward_weight(later_grads, a, deferred);
  EXPECT_EQ(bytes_of(later_grads.all()), bytes_of(now_grads.all()));
}

INSTANTIATE_TEST_SUITE_P(Families, StageTest, ::testing::Values("gpt2-tiny", "llama-tiny", "moe-tiny", "olmoe-tiny"),
                         [](const auto& info) {
                           const std::string preset = info.param;
                           return preset.substr(0, preset.find('-'));
                         });

}  // namespace
}  // namespace dt
