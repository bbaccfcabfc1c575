// plan_memory, the prediction a GPU run is checked against before it allocates, and what a CPU
// run of the same shape really allocates, tag by tag, against the sizes worked out by hand from
// the model's shape (tests/gpt2_sizes.h): the plan and the constructors share their sizing code,
// so only an expectation from outside both can catch a size they both get wrong.
#include <gtest/gtest.h>

#include <array>

#include "core/allocator.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/zero_policy.h"
#include "plan/memory.h"
#include "tests/gpt2_sizes.h"

namespace dt {
namespace {

// The bytes under each tag that a model of `config` and its optimizer hold once made.
struct HeldBytes {
  std::array<size_t, kNumMemTags> bytes{};
  size_t total = 0;
  size_t operator()(MemTag tag) const { return bytes[static_cast<size_t>(tag)]; }
};
HeldBytes bytes_held(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute, DType precision) {
  const MemoryStats before = memory_stats(Device::cpu);
  Transformer model(config, batch_size, seq_len, recompute, precision);
  const AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  const MemoryStats after = memory_stats(Device::cpu);
  HeldBytes held{.bytes = {}, .total = after.total_current_bytes - before.total_current_bytes};
  for (int t = 0; t < kNumMemTags; ++t)
    held.bytes[static_cast<size_t>(t)] = after.current(static_cast<MemTag>(t)) - before.current(static_cast<MemTag>(t));
  return held;
}

TEST(TrainingBytes, AreWhatTheModelsShapeGivesByHand) {
  // gpt2-tiny (model/config.cpp): 997 tokens stored as 1,024 rows, C = 48, 3 heads, 2 blocks,
  // 64 positions. gpt2: no rope table beside the estimate.
  const ModelConfig config = model_preset("gpt2-tiny");
  const testing::Gpt2Shape shape{.layers = 2, .width = 48, .heads = 3, .stored_vocab = 1024, .positions = 64};
  const auto psi = static_cast<size_t>(testing::gpt2_stored_elements(shape));
  ASSERT_EQ(psi, 108'864u);  // the sum written out: 1,024·48 + 64·48 + 2·28,272 + 96
  constexpr int kBatch = 4, kSeqLen = 32;
  for (const DType precision : {DType::f32, DType::bf16})
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const HeldBytes held = bytes_held(config, kBatch, kSeqLen, recompute, precision);
      const bool sixteen_bit = precision != DType::f32;
      const size_t w = dtype_size(precision);
      // The weights forward reads (f32, or the 16-bit copy); f32 gradients; AdamW's two f32
      // moments, and in 16-bit the f32 master weights, counted with them as the ZeRO paper does.
      const size_t parameters = w * psi, gradients = 4 * psi, optimizer_state = (sixteen_bit ? 12 : 8) * psi;
      const auto activations = static_cast<size_t>(testing::gpt2_saved_activation_bytes(
          shape, kBatch * kSeqLen, static_cast<int64_t>(w), recompute == Recompute::full));
      const auto scratch =
          static_cast<size_t>(testing::gpt2_backward_scratch_bytes(shape, kBatch * kSeqLen, static_cast<int64_t>(w)));
      const std::string what = str(dtype_name(precision), " recompute ", recompute_name(recompute));
      EXPECT_EQ(held(MemTag::parameters), parameters) << what;
      EXPECT_EQ(held(MemTag::gradients), gradients) << what;
      EXPECT_EQ(held(MemTag::optimizer_state), optimizer_state) << what;
      EXPECT_EQ(held(MemTag::activations), activations) << what;
      EXPECT_EQ(held(MemTag::workspace), scratch) << what;
      EXPECT_EQ(held.total, parameters + gradients + optimizer_state + activations + scratch)
          << what << ": a tag not counted above";
      const MemoryPlan plan = plan_memory(config, kBatch, kSeqLen, 1, recompute, precision, 1, 0);
      const auto planned = [&](MemTag tag) { return plan.bytes[static_cast<int>(tag)]; };
      EXPECT_EQ(planned(MemTag::parameters), parameters) << what;
      EXPECT_EQ(planned(MemTag::gradients), gradients) << what;
      EXPECT_EQ(planned(MemTag::optimizer_state), optimizer_state) << what;
      EXPECT_EQ(planned(MemTag::activations), activations) << what;
      EXPECT_EQ(planned(MemTag::workspace), scratch) << what;
      EXPECT_EQ(plan.total(), parameters + gradients + optimizer_state + activations + scratch) << what;
    }
}

// The ZeRO paper's accounting (Rajbhandari et al. 2020, its figure 1): Ψ parameters in mixed
// precision hold 2Ψ bytes of fp16 weights, 2Ψ of fp16 gradients and KΨ = 12Ψ of fp32 master
// weights and Adam's moments; over N ranks stage 1 shards the 12Ψ, stage 2 the gradients too,
// stage 3 everything. For Ψ = 7.5B on 64 ranks that is the published 120, 31.4, 16.6 and 1.9 GB.
// dtrain's bf16 keeps its gradients in f32 (4Ψ, for accumulation over micro-batches) and, at
// stage 1, the reduce-scatter's f32 shard beside them; with those two differences the planner
// must give the paper's formula exactly, tag by tag, for a 7.46B GPT-2 on 64 ranks.
// A mixture of experts, balanced by bias: the plan of every tag is what the model and its
// optimizer hold — the experts' (E, out, in) weights, their activations at top_k rows a token,
// the backward's scratch, and the bias (per-linear state, tagged parameters).
TEST(TrainingBytes, AnExpertModelsPlanIsWhatItHolds) {
  ModelConfig config = model_preset("moe-tiny");
  config.moe.bias_update_rate = 0.001f;
  constexpr int kBatch = 4, kSeqLen = 32;
  for (const DType precision : {DType::f32, DType::bf16})
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const HeldBytes held = bytes_held(config, kBatch, kSeqLen, recompute, precision);
      const MemoryPlan plan = plan_memory(config, kBatch, kSeqLen, 1, recompute, precision, 1, 0);
      for (int t = 0; t < kNumMemTags; ++t) {
        const auto tag = static_cast<MemTag>(t);
        EXPECT_EQ(plan.bytes[static_cast<size_t>(t)], held(tag))
            << mem_tag_name(tag) << ", " << dtype_name(precision) << " recompute " << recompute_name(recompute);
      }
      EXPECT_EQ(plan.total(), held.total);
    }
}

// Delayed scaling's state, counted with the parameters: per quantized linear layer (gpt2-tiny's 4
// a block, 2 blocks) the step's 3 amaxes, 3 histories of amax_history steps and 3 scales, f32;
// what a model made with the recipe allocates.
TEST(TrainingBytes, DelayedScalingsHistoriesAreCountedWithTheParameters) {
  const ModelConfig config = model_preset("gpt2-tiny");
  const Float8Recipe delayed{.scaling = Float8Scaling::delayed, .amax_history = 16};
  const MemoryPlan plain = plan_memory(config, 4, 32, 1, Recompute::none, DType::bf16, 1, 0);
  const MemoryPlan fp8 = plan_memory(config, 4, 32, 1, Recompute::none, DType::bf16, 1, 0, 1, false, nullptr, 1, delayed);
  const size_t states = 2 * 4 * (3 + 3 * 16 + 3) * sizeof(float);
  EXPECT_EQ(fp8.bytes[static_cast<size_t>(MemTag::parameters)], plain.bytes[static_cast<size_t>(MemTag::parameters)] + states);
  const Float8Training training{.recipe = delayed};
  const Transformer model(config, 4, 32, Recompute::none, DType::bf16, Device::cpu, {}, nullptr, {}, nullptr, {}, nullptr,
                          &training);
  int64_t held = 0;
  for (const LinearStates::Entry& e : model.linear_states().entries()) held += e.count;
  EXPECT_EQ(static_cast<size_t>(held) * sizeof(float), states);
  // Tensorwise and blockwise keep none.
  for (const Float8Scaling none : {Float8Scaling::tensorwise, Float8Scaling::blockwise})
    EXPECT_EQ(plan_memory(config, 4, 32, 1, Recompute::none, DType::bf16, 1, 0, 1, false, nullptr, 1, {.scaling = none})
                  .bytes[static_cast<size_t>(MemTag::parameters)],
              plain.bytes[static_cast<size_t>(MemTag::parameters)]);
}

TEST(TrainingBytes, TheZeroPapersModelStateWithFp32Gradients) {
  const auto zero_paper = [](double psi, double ranks, int stage, double gradient_bytes) {
    const double weights = 2 * psi, gradients = gradient_bytes * psi, optimizer = 12 * psi;
    if (stage == 0) return weights + gradients + optimizer;
    if (stage == 1) return weights + gradients + optimizer / ranks;
    if (stage == 2) return weights + (gradients + optimizer) / ranks;
    return (weights + gradients + optimizer) / ranks;
  };
  // Published to a tenth of a GB: the formula must round to them (within 0.05; 1.875 is 1.9).
  const double published[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NEAR(zero_paper(7.5e9, 64, stage, 2) / 1e9, published[stage], 0.05) << "stage " << stage;

  ModelConfig config = model_preset("gpt2-124m");
  config.n_layer = 36, config.d_model = 4096, config.n_head = 32;
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryPlan plan = plan_memory(config, 1, 1024, 1, Recompute::full, DType::bf16, 64, stage);
    // Ψ as the flat buffers hold it: ZeRO pads each unit to 64 equal parts.
    const double psi = static_cast<double>(
        ParameterLayout(config, ZeroPolicy::of(stage, DType::bf16, 64).storage().unit_multiple).total_elements());
    const auto tag = [&](MemTag t) { return static_cast<double>(plan.bytes[static_cast<int>(t)]); };
    const double state = tag(MemTag::parameters) + tag(MemTag::gradients) + tag(MemTag::optimizer_state);
    const double reduce_scatter_shard = stage == 1 ? 4 * psi / 64 : 0;
    EXPECT_DOUBLE_EQ(state, zero_paper(psi, 64, stage, 4) + reduce_scatter_shard) << "stage " << stage;
  }
}

// The table commonly given for full training in mixed precision with Adam: 14 bytes per
// parameter — 16-bit weights (2) and the f32 master weights and two moments (12) — so 300M, 1B,
// 7B, 13B and 70B models need about 4, 14, 98, 182 and 980 GB. dtrain holds exactly those 14
// bytes per stored parameter under the parameter and optimizer tags, and its f32 gradients (4,
// accumulated over micro-batches, which the table leaves out) beside them: 18 in all. Checked on
// models of about those sizes: GPT-2 medium's shape (355M), Llama 3.2 1B (1.24B), and Llama 2
// 7B, 13B and 70B's.
TEST(TrainingBytes, FourteenBytesPerParameterAsCommonlyTabulated) {
  const double nominal[] = {0.3e9, 1e9, 7e9, 13e9, 70e9}, table_gb[] = {4, 14, 98, 182, 980};
  // The table rounds 14 x 0.3 = 4.2 to 4: within 0.2 GB and 1%.
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(14 * nominal[i] / 1e9, table_gb[i], 0.2 + 0.01 * table_gb[i]);
  ModelConfig medium = model_preset("gpt2-124m");
  medium.n_layer = 24, medium.d_model = 1024, medium.n_head = 16;
  const auto llama2 = [](int layers, int width, int heads, int kv_heads, int ffn) {
    ModelConfig c = model_preset("llama3.2-1b");
    c.n_layer = layers, c.d_model = width, c.n_head = heads, c.n_kv_head = kv_heads, c.ffn_hidden_size = ffn;
    c.vocab_size = 32000, c.tied_embeddings = false;
    return c;
  };
  const ModelConfig models[] = {medium, model_preset("llama3.2-1b"), llama2(32, 4096, 32, 32, 11008),
                                llama2(40, 5120, 40, 40, 13824), llama2(80, 8192, 64, 8, 28672)};
  for (int i = 0; i < 5; ++i) {
    const MemoryPlan plan = plan_memory(models[i], 1, 128, 1, Recompute::full, DType::bf16, 1, 0);
    const double psi = static_cast<double>(ParameterLayout(models[i]).total_elements());
    const auto tag = [&](MemTag t) { return static_cast<double>(plan.bytes[static_cast<int>(t)]); };
    EXPECT_EQ(tag(MemTag::parameters) + tag(MemTag::optimizer_state), 14 * psi) << table_gb[i] << " GB row";
    EXPECT_EQ(tag(MemTag::gradients), 4 * psi) << table_gb[i] << " GB row";
  }
}

// OLMo's 70B configuration: vocabulary 50,280 (stored as 50,304 rows), d_model 8,192, sequences
// of 4,096, 80 layers of 64 query heads over 8 key/value heads, a SwiGLU MLP of 2 x 28,672, RMSNorm
// with weights, no biases, untied embeddings — Llama 2 70B's block. Its count by hand: two
// embeddings of 50,280 x 8,192 (823,787,520), per layer q and o (2 x 8,192^2), k and v
// (2 x 8,192 x 1,024), the MLP (3 x 8,192 x 28,672) and two norms (2 x 8,192) = 855,654,400, and
// the final norm: 69,276,147,712 parameters, 69.3B.
TEST(ParameterCount, OlmoSeventyB) {
  ModelConfig olmo = model_preset("llama3.2-1b");
  olmo.n_layer = 80, olmo.d_model = 8192, olmo.n_head = 64, olmo.n_kv_head = 8, olmo.ffn_hidden_size = 28672;
  olmo.vocab_size = 50280, olmo.max_seq_len = 4096, olmo.tied_embeddings = false;
  const int64_t per_layer = 2LL * 8192 * 8192 + 2LL * 8192 * 1024 + 3LL * 8192 * 28672 + 2 * 8192;
  ASSERT_EQ(per_layer, 855'654'400);
  const ParameterLayout layout(olmo);
  EXPECT_EQ(layout.num_parameters(), 2LL * 50280 * 8192 + 80 * per_layer + 8192);
  EXPECT_EQ(layout.num_parameters(), 69'276'147'712);
  // Stored with the padded vocabulary, as OLMo's embedding_size 50,304 stores it.
  EXPECT_EQ(layout.total_elements(), 2LL * 50304 * 8192 + 80 * per_layer + 8192);
}

// The Megatron sequence-parallelism paper (Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", its section 4) counts a GPT layer's activations in
// 16-bit as sbh(34 + 5as/h) bytes without parallelism, sbh(10 + 24/t + 5as/h/t) under t-way tensor
// parallelism and sbh(34 + 5as/h)/t with sequence parallelism beside it; 2sbh (2sbh/t with sequence
// parallelism) under full recomputation. Of the 34: two layer-norm inputs (4), the QKV and MLP
// inputs (4), Q and K (4), V (2), the attention output (2), the MLP's GELU input and output (16)
// and two dropout masks (2); the 10 are those of them that tensor parallelism replicates (norms,
// QKV and MLP inputs, masks). dtrain trains without dropout (no masks: 2sbh less, replicated), and
// its flash attention keeps no a x s x s scores (the 5as/h term) but the softmax's f32 log-sum-exp
// (4·a·s·b bytes, split over the tp ranks' heads); its LayerNorms keep their f32 mean and rstd
// (two norms, 16·s·b bytes, split under sequence parallelism). With those differences, dtrain's
// planned bytes per layer (the difference between 3 and 2 layers) are the paper's, for its GPT-3
// 175B shape (h = 12,288, a = 96, s = 2,048, b = 1) at t = 1 and 8.
TEST(TrainingBytes, TheSequenceParallelismPapersActivationsPerLayer) {
  ModelConfig gpt3 = model_preset("gpt2-124m");
  gpt3.d_model = 12288, gpt3.n_head = 96, gpt3.max_seq_len = 2048, gpt3.vocab_size = 51200;
  const double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h;
  const auto per_layer = [&](Recompute recompute, int t, bool sp) {
    gpt3.n_layer = 2;
    const auto two = static_cast<double>(plan_memory(gpt3, 1, 2048, 1, recompute, DType::bf16, 1, 0, t, sp)
                                             .bytes[static_cast<int>(MemTag::activations)]);
    gpt3.n_layer = 3;
    const auto three = static_cast<double>(plan_memory(gpt3, 1, 2048, 1, recompute, DType::bf16, 1, 0, t, sp)
                                               .bytes[static_cast<int>(MemTag::activations)]);
    return three - two;
  };
  const double lse = 4 * a * s * b, norm_stats = 16 * s * b, masks = 2 * sbh;
  EXPECT_DOUBLE_EQ(per_layer(Recompute::none, 1, false), sbh * 34 - masks + lse + norm_stats);
  EXPECT_DOUBLE_EQ(per_layer(Recompute::none, 8, false), sbh * (10 + 24.0 / 8) - masks + lse / 8 + norm_stats);
  EXPECT_DOUBLE_EQ(per_layer(Recompute::none, 8, true), (sbh * 34 - masks + lse + norm_stats) / 8);
  EXPECT_DOUBLE_EQ(per_layer(Recompute::full, 1, false), 2 * sbh);
  EXPECT_DOUBLE_EQ(per_layer(Recompute::full, 8, false), 2 * sbh);
  EXPECT_DOUBLE_EQ(per_layer(Recompute::full, 8, true), 2 * sbh / 8);
}

}  // namespace
}  // namespace dt
