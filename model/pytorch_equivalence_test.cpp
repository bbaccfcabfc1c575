// dtrain's GPT-2 and Llama against plain-PyTorch models (tests/reference/transformer_reference.py).
//
// Both start from the same weights and see the same micro-batches; for three AdamW steps with
// global-norm clipping and 2 accumulated micro-batches we compare the logits and summed loss
// of every micro-batch, the step's loss, every gradient, the gradient norm, and every
// parameter after the update. Tensors travel through safetensors files both ways.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
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

// Tolerances, as the largest error relative to the largest magnitude of the reference tensor
// (normalized_max_error). Both sides compute in fp32 with different summation orders (BLAS
// blocking, our attention tiles, torch's reductions); each value is a dot product or sum of
// at most a few thousand terms, so its rounding error is ~sqrt(n)·2^-24 ≈ 1e-6 relative to the
// magnitudes summed. The bounds leave ~10x room above what we measure:
constexpr double kLogitsBound = 1e-5;     // logits: a C-term dot product after L blocks
constexpr double kLossBound = 1e-6;       // a sum of per-token losses, each ~log(V)
constexpr double kGradBound = 2e-5;       // gradients: backward through every block
constexpr double kGradNormBound = 1e-5;   // sqrt of a sum of squares of the gradients
// A parameter moves by lr·m̂/(√v̂ + eps), which agrees to about the gradients' relative error
// wherever the gradient is well away from zero (see "undetermined" below for the rest).
constexpr double kParamBound = 2e-5;

struct Case {
  const char* name;
  ModelConfig model;
  int batch, seq;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

constexpr int kSteps = 3;
constexpr int kMicroBatches = 2;
constexpr float kLr = 3e-3f;
constexpr float kMaxGradNorm = 0.5f;

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

TEST_P(ModelVsPyTorch, LogitsLossGradientsAndParametersMatchOverThreeSteps) {
  const Case& c = GetParam();
  const ModelConfig& config = c.model;
  Transformer model(config, c.batch, c.seq);
  init_parameters(model.params(), 1234);
  const AdamWConfig adamw_config;
  AdamW optimizer(model.layout(), adamw_config);

  // Inputs for the reference: initial weights, every micro-batch, sizes and optimizer settings.
  testing::TempDir dir;
  SafetensorsWriter writer;
  for (const ParamInfo& p : model.layout().params()) writer.add(p.name, model.params().shown(p));
  std::vector<OwnedTensor> tokens, targets;
  for (int s = 0; s < kSteps; ++s)
    for (int k = 0; k < kMicroBatches; ++k) {
      tokens.push_back(zeros(DType::i32, {c.batch, c.seq}));
      targets.push_back(zeros(DType::i32, {c.batch, c.seq}));
      fill_micro_batch(c, s, k, tokens.back().t, targets.back().t);
      writer.add(str("s", s, ".mb", k, ".tokens"), tokens.back().t);
      writer.add(str("s", s, ".mb", k, ".targets"), targets.back().t);
    }
  testing::set_model_metadata(writer, config);
  testing::set_numeric_metadata(writer, {{"steps", kSteps},
                                         {"micro_batches", kMicroBatches},
                                         {"lr", kLr},
                                         {"beta1", adamw_config.beta1},
                                         {"beta2", adamw_config.beta2},
                                         {"eps", adamw_config.eps},
                                         {"weight_decay", adamw_config.weight_decay},
                                         {"max_grad_norm", kMaxGradNorm}});
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
  std::map<std::string, Worst> worst;  // by kind: logits, grad, param, ...
  const auto record = [&](const std::string& kind, const std::string& name, double error, double bound) {
    EXPECT_LE(error, bound) << name;
    if (error >= worst[kind].error) worst[kind] = {error, name};
  };
  const auto compare = [&](const std::string& kind, const std::string& name, const Tensor& ours, double bound) {
    const LoadedTensor theirs = reference.read(name, MemTag::workspace);
    ASSERT_EQ(theirs.tensor.shape, ours.shape) << name;
    record(kind, name, normalized_max_error(ours, theirs.tensor), bound);
  };

  // Adam divides each gradient by its own magnitude, so an element whose gradient is zero up to
  // rounding (the key bias's is exactly zero in exact arithmetic: softmax ignores a constant
  // added to every score of a row) moves by up to about ±lr in a direction set by rounding
  // noise, in PyTorch as here. Such an element is "undetermined" at a step when the reference
  // gradient lies within kUndetermined·max|g| of zero (50x the gradient bound). It is held to
  // the only bound Adam gives: each side moves it by |m̂|/√v̂·lr ≤ 1.2·lr (the largest ratio for
  // beta1 = 0.9, beta2 = 0.95), so they differ by less than 2.4·lr. Every other element is held
  // to kParamBound.
  //
  // Left alone, those few ±lr differences would spread through every later step and swamp the
  // comparison, so after each step the reference's parameters and AdamW moments are copied
  // into the model: every step is then checked from the same state, the moments included.
  constexpr double kUndetermined = 1e-3;
  std::map<std::string, std::vector<bool>> undetermined;
  int64_t undetermined_count = 0;
  const auto compare_grad = [&](const ParamInfo& p, int step) {
    const std::string name = str("s", step, ".grad.", p.name);
    const LoadedTensor theirs = reference.read(name, MemTag::workspace);
    const Tensor ours = model.grads().shown(p);
    record("grad", name, normalized_max_error(ours, theirs.tensor), kGradBound);
    const float* g = theirs.tensor.ptr<float>();
    float g_max = 0;
    for (int64_t i = 0; i < ours.numel(); ++i) g_max = std::max(g_max, std::fabs(g[i]));
    std::vector<bool>& mask = undetermined[p.name];
    mask.resize(ours.numel());
    // A gradient that is exactly zero on both sides (the row of a token absent from the batch)
    // leaves Adam nothing to amplify.
    const float* g_ours = ours.ptr<float>();
    for (int64_t i = 0; i < ours.numel(); ++i)
      mask[i] = std::fabs(g[i]) <= kUndetermined * g_max && (g[i] != 0 || g_ours[i] != 0);
  };
  const auto compare_param = [&](const ParamInfo& p, int step) {
    const std::string name = str("s", step, ".param.", p.name);
    const LoadedTensor theirs = reference.read(name, MemTag::workspace);
    const float* ref = theirs.tensor.ptr<float>();
    const float* ours = model.params().shown(p).ptr<float>();
    const std::vector<bool>& mask = undetermined.at(p.name);
    double scale = 1e-30, determined_diff = 0, undetermined_diff = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
      const double diff = std::fabs(static_cast<double>(ours[i]) - ref[i]);
      (mask[i] ? undetermined_diff : determined_diff) = std::max(mask[i] ? undetermined_diff : determined_diff, diff);
      undetermined_count += mask[i];
    }
    record("param", name, determined_diff / scale, kParamBound);
    EXPECT_LE(undetermined_diff, 2.4 * kLr) << name << " (undetermined elements)";
  };
  const auto compare_and_copy_state = [&](const ParamInfo& p, int step) {
    compare_param(p, step);
    // The moments differ by (1 - beta) times the gradient's error, and its square's.
    compare("moments", str("s", step, ".exp_avg.", p.name), optimizer.m().shown(p), kGradBound);
    compare("moments", str("s", step, ".exp_avg_sq.", p.name), optimizer.v().shown(p), 2 * kGradBound);
    reference.read_into(str("s", step, ".param.", p.name), model.params().shown(p));
    reference.read_into(str("s", step, ".exp_avg.", p.name), optimizer.m().shown(p));
    reference.read_into(str("s", step, ".exp_avg_sq.", p.name), optimizer.v().shown(p));
  };
  const auto scalar = [](float value) {
    OwnedTensor t = zeros(DType::f32, {});
    t.ptr<float>()[0] = value;
    return t;
  };

  bool clipped = false;
  OwnedTensor logits = zeros(DType::f32, {c.batch, c.seq, config.vocab_size});
  for (int s = 0; s < kSteps; ++s) {
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
    for (const ParamInfo& p : model.layout().params()) compare_grad(p, s);
    apply_update(model, optimizer, kLr, kMaxGradNorm, stats);
    clipped = clipped || stats.grad_scale < 1;
    compare("grad_norm", str("s", s, ".grad_norm"), scalar(static_cast<float>(stats.grad_norm)).t, kGradNormBound);
    for (const ParamInfo& p : model.layout().params()) compare_and_copy_state(p, s);
  }
  EXPECT_TRUE(clipped) << "no step was clipped: lower kMaxGradNorm so the test covers clipping";
  std::printf("  %lld of %lld parameter updates undetermined (gradient within rounding of zero)\n",
              static_cast<long long>(undetermined_count),
              static_cast<long long>(kSteps * model.layout().num_parameters()));
  for (const auto& [kind, w] : worst) std::printf("  worst %-9s error %.2e at %s\n", kind.c_str(), w.error, w.where.c_str());
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
        // Plain multi-head, head size 10, three layers.
        Case{"llama_mha_layers3_seq29", llama(3, 40, 4, 4, 96, 300, false, 10000, 0), 2, 29}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dt
