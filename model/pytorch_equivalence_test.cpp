// dtrain's GPT-2 and Llama against plain-PyTorch models (tests/reference/transformer_reference.py).
//
// Both start from the same weights and see the same micro-batches; then each trains on its own
// for kSteps AdamW steps with global-norm clipping and 2 accumulated micro-batches. Nothing
// passes from PyTorch to dtrain after the start, so differences that grow from step to step
// show. After every step we compare the logits and summed loss of every micro-batch, the
// step's loss, every gradient, the gradient norm, every parameter and both AdamW moments.
// Tensors travel through safetensors files both ways.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "model/expert_balance.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "tests/gradcheck.h"
#include "tests/reference_io.h"
#include "tests/testing.h"
#include "train/step.h"

namespace dt {
namespace {

using ckpt::LoadedTensor;
using ckpt::SafetensorsReader;
using ckpt::SafetensorsWriter;
using testing::normalized_max_error;
using testing::OwnedTensor;
using testing::zeros;

constexpr int kSteps = 10;
constexpr int kMicroBatches = 2;
constexpr float kLr = 3e-3f;
constexpr float kMaxGradNorm = 0.5f;

// Adam's epsilon. Adam divides each gradient by its own running magnitude, so its update
// lr·m̂/(√v̂ + eps) moves by up to lr·δg/eps when the gradient is near zero and differs by δg
// between the two sides. With the usual 1e-8, an element whose gradient is zero up to rounding
// moves by an amount rounding sets, and the difference feeds every later step. GPT-2's key bias
// is one (its gradient is exactly zero in exact arithmetic, as softmax ignores a constant added
// to a row of scores; ~1e-12 here, so it moves ~1e-4·lr, either way); an element of the one-head
// GPT-2's attn.proj.weight whose gradient was -4.66e-9 in PyTorch and -5.36e-9 here is another:
// it moved 0.023·lr apart in the first step, and by the second step gradients differed by 6e-4
// of their largest (measured with nothing copied, eps 1e-8). No rule can pick out such elements
// ahead of time, and what they do spreads. With 1e-5 the same δg (~1e-9: a gradient's rounding,
// ~1e-7 of the largest, ~1e-2) moves a parameter by ~1e-4·lr (3e-4 measured), and no element
// needs treatment of its own: every element of every tensor is held to the bounds below. eps
// still enters every update whose |g| is below ~1e-4, so a wrong eps shows.
constexpr float kEps = 1e-5f;

// Tolerances for the first step, from identical state, and for the later ones, from states
// that have drifted apart. Errors are relative to the largest magnitude of the reference
// tensor (normalized_max_error), except the parameters', which are in units of lr: the most an
// Adam step moves one, and the only scale a parameter that starts at zero has.
//
// The first step's differences are rounding alone: both sides compute in fp32 with different
// summation orders (BLAS blocking, our attention tiles, torch's reductions); each value is a
// dot product or sum of at most a few thousand terms, so its error is ~sqrt(n)·2^-24 ≈ 1e-6
// relative to the magnitudes summed. Each later step adds what the earlier differences became:
// an update turns gradient differences into parameter differences, which change the next
// step's activations and gradients. Adam's update is scale-free, so an element's update
// differs by its own gradient's relative error, up to δg/eps (above), and keeps doing so while
// the moments remember that gradient: a wte row whose token appeared once moved apart by
// ~2e-4·lr a step for the five steps after it did. Measured, as the worst over the six cases on
// this project's AVX-512 CPU and with OpenBLAS's AVX2 kernels (OPENBLAS_CORETYPE=Haswell; the
// thread count changes nothing, our kernels are deterministic): first step / steps 2 to 10 on
// each line. Every bound is 4 times the worst measured, rounded up: the roundings, and what
// they grow into, change with the summation order, i.e. with the CPU's kernels.
struct Bound {
  double first, later;
};
constexpr Bound kLogitsBound{1.6e-6, 1.5e-5};    // 3.9e-7 / 3.6e-6: C-term dot products after L blocks
constexpr Bound kLossBound{7e-7, 9e-7};          // 1.7e-7 / 2.2e-7: sums of per-token losses, each ~log(V)
constexpr Bound kGradBound{3.5e-6, 5.2e-5};      // 8.8e-7 / 1.3e-5: backward through every block
constexpr Bound kGradNormBound{4.6e-6, 4.6e-6};  // 1.2e-6 / 5.6e-7: sqrt of a sum of squares
constexpr Bound kMomentsBound{1.3e-5, 3e-5};     // 3.3e-6 / 7.5e-6: (1 - beta) × the gradient's error, or its square's
constexpr Bound kParamBound{1.2e-3, 4.1e-3};     // 3.0e-4 / 1.0e-3 (× lr): the update's sensitivity, above
constexpr Bound kExactBound{0, 0};               // counts and signs: nothing to round

struct Case {
  const char* name;
  ModelConfig model;
  int batch, seq;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Inputs of step s, micro-batch k: the first micro-batch has half its targets ignored, the
// second a tenth, so the global-mean loss weighting is exercised.
void fill_micro_batch(const Case& c, int step, int k, Tensor tokens, Tensor targets) {
  const ElementRng rng(11, str("s", step, ".mb", k));
  const double ignore_share = k == 0 ? 0.5 : 0.1;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(3 * i) * c.model.vocab_size);
    targets.ptr<int32_t>()[i] = rng.uniform(3 * i + 1) < ignore_share
                                    ? kernels::kIgnoreIndex
                                    : static_cast<int32_t>(rng.uniform(3 * i + 2) * c.model.vocab_size);
  }
}

class ModelVsPyTorch : public ::testing::TestWithParam<Case> {};

TEST_P(ModelVsPyTorch, TenStepsFromTheSameStartMatchPyTorch) {
  const Case& c = GetParam();
  const ModelConfig& config = c.model;
  Transformer model(config, c.batch, c.seq);
  init_parameters(model.params(), 1234);
  const AdamWConfig adamw_config{.eps = kEps};
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), adamw_config);

  // Inputs for the reference: initial weights, every micro-batch, sizes and optimizer settings.
  testing::TempDir dir;
  SafetensorsWriter writer;
  for (const ParamInfo& p : model.layout().params()) writer.add(p.name, model.params().unpadded(p));
  const testing::ReferenceTraining training{
      .steps = kSteps, .micro_batches = kMicroBatches, .lr = kLr, .max_grad_norm = kMaxGradNorm, .adamw = adamw_config};
  const auto [tokens, targets] = testing::add_micro_batches(
      writer, training, {c.batch, c.seq}, [&](int step, int k, Tensor t, Tensor y) { fill_micro_batch(c, step, k, t, y); });
  testing::set_model_metadata(writer, config);
  testing::set_training_metadata(writer, training);
  writer.write(dir.file("in.safetensors"));
  ASSERT_EQ(testing::run_reference_script("transformer_reference.py",
                                          dir.file("in.safetensors") + " " + dir.file("out.safetensors")),
            0);
  const SafetensorsReader reference(dir.file("out.safetensors"));

  // Records each comparison; the test fails on any above its bound, after printing them all.
  struct Worst {
    double error = 0;
    std::string where;
  };
  std::map<std::string, Worst> worst[2];  // [first step, later steps][kind: logits, grad, param, ...]
  int s = 0;
  const auto record = [&](const std::string& kind, const std::string& name, double error, const Bound& bound) {
    EXPECT_LE(error, s == 0 ? bound.first : bound.later) << name;
    Worst& w = worst[s > 0][kind];
    if (error >= w.error) w = {error, name};
  };
  const auto compare = [&](const std::string& kind, const std::string& name, const Tensor& ours, const Bound& bound) {
    const LoadedTensor theirs = reference.read(name, MemTag::workspace);
    ASSERT_EQ(theirs.tensor.shape, ours.shape) << name;
    record(kind, name, normalized_max_error(ours, theirs.tensor), bound);
  };
  const auto compare_param = [&](const ParamInfo& p) {
    const std::string name = str("s", s, ".param.", p.name);
    const LoadedTensor theirs = reference.read(name, MemTag::workspace);
    const float* ref = theirs.tensor.ptr<float>();
    const float* ours = model.params().unpadded(p).ptr<float>();
    double diff = 0;
    for (int64_t i = 0; i < p.numel(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    record("param", name, diff / kLr, kParamBound);
  };
  const auto scalar = [](float value) {
    OwnedTensor t = zeros(DType::f32, {});
    t.ptr<float>()[0] = value;
    return t;
  };

  bool clipped = false;
  OwnedTensor logits = zeros(DType::f32, {c.batch, c.seq, config.vocab_size});
  for (s = 0; s < kSteps; ++s) {
    std::vector<MicroBatch> micro_batches;
    for (int k = 0; k < kMicroBatches; ++k) {
      const MicroBatch mb{tokens[s * kMicroBatches + k].t, targets[s * kMicroBatches + k].t};
      micro_batches.push_back(mb);
      // A forward alone gives the logits (forward_backward overwrites them with their gradient).
      const double loss_sum = model.forward(mb.tokens, mb.targets);
      model.copy_logits(logits.t);
      const std::string prefix = str("s", s, ".mb", k, ".");
      compare("logits", prefix + "logits", logits.t, kLogitsBound);
      compare("loss", prefix + "loss_sum", scalar(static_cast<float>(loss_sum)).t, kLossBound);
    }
    StepStats stats = accumulate_gradients(model, micro_batches);
    compare("loss", str("s", s, ".loss"), scalar(static_cast<float>(stats.loss)).t, kLossBound);
    for (const ParamInfo& p : model.layout().params())
      compare("grad", str("s", s, ".grad.", p.name), model.grads().unpadded(p), kGradBound);
    apply_update(optimizer, kLr, kMaxGradNorm, stats);
    clipped = clipped || stats.grad_scale < 1;
    // The balancing bias moves by ±rate or not at all: the same bits on both sides, or a choice
    // that differed.
    for (const ExpertStats& block : end_step_expert_balance(model, nullptr, stats.applied, stats.targets)) {
      const int l = block.layer;
      if (config.moe.capacity_factor > 0) {
        EXPECT_GT(block.dropped, 0) << "step " << s << " block " << l << " dropped nothing: lower the capacity";
      }
      if (config.moe.bias_update_rate > 0)
        compare("bias", str("s", s, ".expert_bias.h.", l), model.linear_states().find(l, "mlp.router", "expert_bias"),
                kExactBound);
      if (config.moe.aux_loss_coef > 0)
        compare("loss", str("s", s, ".aux_loss.h.", l), scalar(static_cast<float>(block.aux_loss)).t, kLossBound);
      if (config.moe.z_loss_coef > 0)
        compare("loss", str("s", s, ".z_loss.h.", l), scalar(static_cast<float>(block.z_loss)).t, kLossBound);
    }
    compare("grad_norm", str("s", s, ".grad_norm"), scalar(static_cast<float>(stats.grad_norm)).t, kGradNormBound);
    for (const ParamInfo& p : model.layout().params()) {
      compare_param(p);
      compare("moments", str("s", s, ".exp_avg.", p.name), optimizer.moment(AdamW::Moment::first, p), kMomentsBound);
      compare("moments", str("s", s, ".exp_avg_sq.", p.name), optimizer.moment(AdamW::Moment::second, p), kMomentsBound);
    }
  }
  EXPECT_TRUE(clipped) << "no step was clipped: lower kMaxGradNorm so the test covers clipping";
  for (const auto& [kind, first] : worst[0]) {
    const Worst& later = worst[1][kind];
    std::printf("  worst %-9s first step %.2e (%s), later %.2e (%s)\n", kind.c_str(), first.error, first.where.c_str(),
                later.error, later.where.c_str());
  }
}

ModelConfig gpt2(int n_layer, int d_model, int n_head, int vocab_size, int max_seq_len) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.n_layer = n_layer, c.d_model = d_model, c.n_head = n_head, c.vocab_size = vocab_size, c.max_seq_len = max_seq_len;
  return c;
}

ModelConfig llama(int n_layer, int d_model, int n_head, int n_kv_head, int ffn_hidden, int vocab_size, bool tied,
                  double rope_theta, double rope_scaling_factor) {
  ModelConfig c = model_preset("llama-tiny");
  c.n_layer = n_layer, c.d_model = d_model, c.n_head = n_head, c.n_kv_head = n_kv_head;
  c.ffn_hidden_size = ffn_hidden, c.vocab_size = vocab_size, c.tied_embeddings = tied;
  c.rope_theta = rope_theta, c.rope_scaling_factor = rope_scaling_factor;
  // With head size 8 and theta 10000 the wavelengths are 6, 63, 628 and 6283 positions: an
  // original context of 64 puts one below the high-frequency cut (16), one in the smoothed
  // band and two above the low-frequency cut (64), so every branch of Llama 3's scaling runs.
  c.rope_original_max_seq_len = 64;
  return c;
}

// A Llama with a mixture of experts in blocks first_dense_layers and after.
ModelConfig moe(int n_layer, int first_dense_layers, int experts, int expert_hidden, kernels::MoeRouting routing) {
  ModelConfig c = llama(n_layer, 32, 4, 2, 64, 61, false, 10000, 0);
  c.moe = {.experts = experts, .expert_hidden = expert_hidden, .routing = routing,
           .first_dense_layers = first_dense_layers};
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, ModelVsPyTorch,
    ::testing::Values(
        // The case: vocabulary 997 (not a multiple of 64, padded inside to 1024),
        // sequence 37 (not a power of two), 3 heads, batch 2.
        Case{"gpt2_vocab997_heads3_seq37", gpt2(2, 48, 3, 997, 64), 2, 37},
        // One head, tiny vocabulary, batch 3, the full context.
        Case{"gpt2_vocab61_head1_batch3", gpt2(1, 32, 1, 61, 24), 3, 24},
        // Five heads of size 8, three layers, a sequence shorter than the context.
        Case{"gpt2_vocab300_heads5_layers3", gpt2(3, 40, 5, 300, 48), 2, 29},
        // Grouped-query attention (6 heads over 2), untied output, odd vocabulary and sequence,
        // Llama 3 frequency scaling.
        Case{"llama_gqa6over2_untied_vocab997_seq37", llama(2, 48, 6, 2, 128, 997, false, 10000, 8), 2, 37},
        // Multi-query attention (one KV head), tied embeddings, Llama 3's theta, batch 3.
        Case{"llama_mqa_tied_batch3", llama(2, 32, 4, 1, 80, 61, true, 500000, 0), 3, 24},
        // Qwen2's attention: biases on q, k and v (not on the output projection), grouped 6 over 2.
        Case{"llama_qkv_bias_gqa6over2",
             [] {
               ModelConfig c = llama(2, 48, 6, 2, 128, 300, false, 10000, 0);
               c.qkv_bias = true;
               return c;
             }(),
             2, 29},
        // Plain multi-head, head size 10, three layers.
        Case{"llama_mha_layers3_seq29", llama(3, 40, 4, 4, 96, 300, false, 10000, 0), 2, 29},
        // OLMoE's block: RMSNorms over the queries and keys (all heads' columns), then the top 2
        // of 4 softmax scores, not renormalized; a dense block first, with the same norms.
        Case{"olmoe_qk_norm_top2of4",
             [] {
               ModelConfig c = moe(2, 1, 4, 24, {.renormalize = false});
               c.qk_norm = true;
               return c;
             }(),
             2, 37},
        // Mixtral's routing (top 2 of 4 softmax scores, renormalized) after a dense block.
        Case{"moe_mixtral_top2of4_after_dense", moe(2, 1, 4, 24, {}), 2, 37},
        // DeepSeek-V3's scoring (sigmoid, renormalized, scaled) with 3 of 6 experts, every block.
        Case{"moe_sigmoid_top3of6_scaled",
             moe(2, 0, 6, 16, {.score = kernels::MoeScore::sigmoid, .top_k = 3, .renormalize = true,
                               .route_scale = 2.5f}),
             2, 29},
        // DeepSeek-V3's balancing: a bias on the sigmoid scores that chooses, moved after each step.
        Case{"moe_sigmoid_top2of6_bias_balanced",
             [] {
               ModelConfig c = moe(2, 0, 6, 16, {.score = kernels::MoeScore::sigmoid, .top_k = 2, .renormalize = true,
                                                 .route_scale = 2.5f});
               c.moe.bias_update_rate = 0.01f;
               return c;
             }(),
             2, 37},
        // Mixtral's routing trained with both routers' losses, at coefficients large enough that
        // their share of each router gradient is not lost within the bounds (Mixtral: 0.02 and none).
        Case{"moe_mixtral_top2of4_aux_and_z_losses",
             [] {
               ModelConfig c = moe(2, 0, 4, 24, {});
               c.moe.aux_loss_coef = 0.3f, c.moe.z_loss_coef = 0.05f;
               return c;
             }(),
             2, 29},
        // The balance loss over normalized sigmoid scores (DeepSeek-V3's sequence-wise loss), with
        // the bias choosing.
        Case{"moe_sigmoid_top2of6_aux_loss_and_bias",
             [] {
               ModelConfig c = moe(2, 1, 6, 16, {.score = kernels::MoeScore::sigmoid, .top_k = 2, .renormalize = true,
                                                 .route_scale = 2.5f});
               c.moe.aux_loss_coef = 0.3f, c.moe.bias_update_rate = 0.01f;
               return c;
             }(),
             2, 24},
        // Qwen1.5-MoE's: softmax top 2 of 6, not renormalized, with a shared expert through its
        // sigmoid gate (computed in f32, as the router is).
        Case{"moe_qwen_top2of6_shared_gated",
             [] {
               ModelConfig c = moe(2, 0, 6, 16, {.score = kernels::MoeScore::softmax, .top_k = 2, .renormalize = false});
               c.moe.shared_hidden = 24, c.moe.shared_gate = true;
               return c;
             }(),
             2, 29},
        // A shared expert added without a gate (DeepSeek-V3's), beside sigmoid routing, after a dense block.
        Case{"moe_sigmoid_top2of4_shared_ungated",
             [] {
               ModelConfig c = moe(2, 1, 4, 16, {.score = kernels::MoeScore::sigmoid, .top_k = 2, .renormalize = true,
                                                 .route_scale = 2.5f});
               c.moe.shared_hidden = 20;
               return c;
             }(),
             2, 24},
        // Mixtral's routing within a capacity of 1.0: the busiest experts drop their assignments of
        // least weight (some in every step, checked), with the balancing bias.
        Case{"moe_mixtral_top2of4_capacity1_bias",
             [] {
               ModelConfig c = moe(2, 0, 4, 24, {});
               c.moe.capacity_factor = 1.0f, c.moe.bias_update_rate = 0.01f;
               return c;
             }(),
             2, 29},
        // Qwen1.5-MoE's and OLMoE's (softmax, not renormalized), one expert per token, 3 blocks.
        Case{"moe_softmax_top1of5_unnormalized",
             moe(3, 0, 5, 20, {.score = kernels::MoeScore::softmax, .top_k = 1, .renormalize = false}), 3, 24}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dt
