// The step-time model (plan/step_time.h): its compute terms are the FLOPs over the profile's
// rates, worked out here by hand; the pipeline's bubble is the schedule's; data parallelism hides
// its reduction behind the last backward where it fits; and its predictions stand beside the
// steps dtrain measured on an H200 and an H100.
#include "plan/step_time.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "model/config.h"
#include "tests/testing.h"

namespace dt {
namespace {

// gpt2-124m, one H100, one micro-batch of 8 x 1024 in bf16: every product is compute-bound (the
// thinnest, 8192 x 768 x 768, needs 13 us of compute and 10 us of memory traffic), so the GEMM
// term is the blocks' 24 C^2 per token and the head's 2 C Vp, each three times (forward, input
// and weight gradients), over 989 TFLOP/s x 0.75; attention 2 C (T + 1) per token and block,
// 3.5 times (a forward, a flash backward of 2.5), over 989 x 0.30; AdamW 30 bytes per parameter
// of the flat buffer over 3350 GB/s x 0.8.
TEST(StepTime, ComputeTermsAreTheFlopsOverTheProfilesRates) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.micro_batch = 8;
  layout.seq_len = 1024;
  const StepTime t = predict_step_time(model_preset("gpt2-124m"), layout, h100);
  const double tokens = 8 * 1024, C = 768, Vp = 50304, L = 12;
  const double gemm_flops = 3 * tokens * (L * 24 * C * C + 2 * C * Vp);
  // 1e-9: the same sum in another order differs by a few ulps (1e-15); a missing product or a
  // wrong efficiency moves the ratio by percents.
  EXPECT_NEAR(t.gemm / (gemm_flops / (989e12 * 0.75)), 1.0, 1e-9);
  const double attention_flops = 3.5 * tokens * L * 2 * C * (1024 + 1);
  EXPECT_NEAR(t.attention / (attention_flops / (989e12 * 0.30)), 1.0, 1e-9);
  // The flat buffer holds 124,439,808 parameters and the alignment padding between them (well
  // under 1%, the bound).
  EXPECT_NEAR(t.optimizer / (124439808.0 * 30 / (3350e9 * 0.8)), 1.0, 0.01);
  EXPECT_GT(t.streaming, 0);
  EXPECT_EQ(t.tensor_parallel + t.context_parallel + t.bubble + t.pipeline_transfers + t.data_parallel, 0);
  // The same figures recombined: rounding of order 1e-17 s and 1e-10 tokens/s; a wrong term or
  // divisor is off by far more than these bounds.
  EXPECT_NEAR(t.total, t.gemm + t.attention + t.streaming + t.optimizer, 1e-12);
  EXPECT_NEAR(t.tokens_per_s, tokens / t.total, 1e-6);
  EXPECT_NEAR(t.mfu, t.model_tflops_per_gpu * 1e12 / 989e12, 1e-12);
}

// With train.fp8 the blocks' projections run at the FP8 peak, each after a pass quantizing its two
// operands (2 bytes read, 1 written an element; tensorwise reads twice); the head stays bf16.
// Llama 3.2 1B at 8 x 2048 tokens, where every product is compute-bound in bf16 and FP8 (GPT-2
// small's are not: its FP8 products wait on memory, and the plan predicts FP8 slower there).
TEST(StepTime, Fp8RunsTheBlocksProjectionsAtTheFp8PeakAfterQuantizingTheirOperands) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.micro_batch = 8;
  layout.seq_len = 2048;
  const ModelConfig model = model_preset("llama3.2-1b");
  const double bf16 = predict_step_time(model, layout, h100).gemm;
  layout.fp8 = Float8Scaling::delayed;
  const double delayed = predict_step_time(model, layout, h100).gemm;
  layout.fp8 = Float8Scaling::tensorwise;
  const double tensorwise = predict_step_time(model, layout, h100).gemm;
  const double t = 8 * 2048, L = 16;
  // (in, out) of qkv (32 query and 8 key/value heads of 64), the output projection, the fused
  // gate and up projection, and the down projection.
  const double widths[4][2] = {{2048, 3072}, {2048, 2048}, {2048, 2 * 8192}, {8192, 2048}};
  double flops = 0, elements = 0;
  for (const auto& [in, out] : widths) {
    flops += 3 * 2 * t * in * out;
    // Each of the three products quantizes two of X (t x in), W (out x in) and DY (t x out).
    elements += (t * in + in * out) + (t * out + out * in) + (t * out + t * in);
  }
  const double head = bf16 - L * flops / (989e12 * 0.75), bandwidth = 3350e9 * 0.8;
  EXPECT_GT(head, 0);
  // 1e-9: sums in another order; a product left at the bf16 peak or a pass left out is off by percents.
  EXPECT_NEAR(delayed / (head + L * flops / (1979e12 * 0.75) + L * elements * 3 / bandwidth), 1.0, 1e-9);
  EXPECT_NEAR(tensorwise / (head + L * flops / (1979e12 * 0.75) + L * elements * 5 / bandwidth), 1.0, 1e-9);
  EXPECT_THROW(predict_step_time(model, layout, load_hardware_profile("a100-80gb")), Error);
}

// Two of Mixtral 8x7B's blocks.
ModelConfig two_mixtral_blocks() {
  ModelConfig model = model_preset("mixtral-8x7b");
  model.n_layer = 2;
  return model;
}

// Mixtral 8x7B's blocks (two of them), one H100, 2 x 4096 tokens in bf16: the experts' grouped
// GEMMs run the top 2 of each token's rows, 6 C F_e per row forward, compute-bound (each expert
// has 2048 rows on average); the router's (E = 8 outputs) is in f32 and memory-bound: its three
// products each move 4 (t C + C E + t E) bytes. Within a capacity of half each expert's share
// the experts run half the rows.
TEST(StepTime, AnExpertBlocksGemmsAreItsActiveRowsAndItsRouterInF32) {
  ModelConfig model = two_mixtral_blocks();
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.micro_batch = 2;
  layout.seq_len = 4096;
  const double t = 8192, C = 4096, QKV = 6144, F_e = 14336, E = 8, k = 2, Vp = 32000, L = 2;
  const double router = 3 * 4 * (t * C + C * E + t * E) / (3350e9 * 0.8);
  const auto gemm_seconds = [&](double expert_rows) {
    const double flops = 3 * (t * L * (2 * C * QKV + 2 * C * C) + expert_rows * L * 6 * C * F_e + t * 2 * C * Vp);
    return flops / (989e12 * 0.75) + L * router;
  };
  // 1e-9: sums in another order; a missing product or a router timed in bf16 is off by percents.
  EXPECT_NEAR(predict_step_time(model, layout, h100).gemm / gemm_seconds(k * t), 1.0, 1e-9);
  model.moe.capacity_factor = 0.5f;
  EXPECT_NEAR(predict_step_time(model, layout, h100).gemm / gemm_seconds(k * t / 2), 1.0, 1e-9);
}

// Under tensor parallelism an expert block without a shared expert communicates for attention
// only (every rank routes all the rows: model/moe_mlp.h), half a dense block's all-reduces; under
// sequence parallelism it gathers its input forward and its output's gradient and input backward.
TEST(StepTime, AnExpertBlockCommunicatesOverTensorParallelismForAttentionAndItsGathers) {
  ModelConfig model = two_mixtral_blocks();
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.tp = 2;
  const auto tensor_parallel = [&](int dense_layers) {
    model.moe.first_dense_layers = dense_layers;
    return predict_step_time(model, layout, h100).tensor_parallel;
  };
  // In all-reduces of a block's activations, forward and backward: a dense block 2 + 2, an expert
  // block 1 + 1, or under sp 1.5 + 2. 1e-9: the ratio is of sums of the same all-reduce time, exact
  // but for rounding; one collective more or fewer per block moves it by a quarter or more.
  EXPECT_NEAR(tensor_parallel(1) / tensor_parallel(0), (4.0 + 2.0) / (2.0 + 2.0), 1e-9);
  layout.sp = true;
  EXPECT_NEAR(tensor_parallel(1) / tensor_parallel(0), (4.0 + 3.5) / (3.5 + 3.5), 1e-9);
}

// Equal stages (a vocabulary of 8 makes the head nothing): 1F1B idles (p - 1) / m of its busy
// time on the busiest rank, and ZB-H1 less — a third of it only where the forward, the input
// pass and the weight pass take a unit each; here the weight pass is the weight gradients' GEMMs
// alone, about half a forward, and ZB-H1 idles about two thirds of 1F1B's time.
TEST(StepTime, ThePipelineBubbleIsTheSchedulesAtEvenStages) {
  ModelConfig model = model_preset("gpt2-124m");
  model.n_layer = 8;
  model.vocab_size = 8;
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.pp = 4;
  layout.micro_batches = 8;
  layout.seq_len = 1024;
  const StepTime one_f_one_b = predict_step_time(model, layout, h100);
  const double busy = one_f_one_b.gemm + one_f_one_b.attention + one_f_one_b.streaming;
  EXPECT_NEAR(one_f_one_b.bubble / busy, 3.0 / 8, 0.02);
  layout.schedule = "zb-h1";
  const StepTime zero_bubble = predict_step_time(model, layout, h100);
  EXPECT_LT(zero_bubble.bubble, 0.8 * one_f_one_b.bubble);
}

// At ZeRO 0 eight ranks of a node all-reduce gpt2-124m's f32 gradients (0.5 GB: about 2 ms over
// NVLink) behind the last micro-batch's backward (about 20 ms); ZeRO 1's all-gather of the bf16
// weights after the update shows; over nodes of one GPU the reduction takes the network, longer
// than the backward, and shows too.
TEST(StepTime, DataParallelHidesItsReductionBehindTheLastBackward) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  const ModelConfig model = model_preset("gpt2-124m");
  StepLayout layout;
  layout.dp = 8;
  layout.micro_batch = 16;
  layout.seq_len = 1024;
  EXPECT_EQ(predict_step_time(model, layout, h100).data_parallel, 0);
  layout.zero_stage = 1;
  EXPECT_GT(predict_step_time(model, layout, h100).data_parallel, 0);
  layout.zero_stage = 0;
  layout.micro_batch = 1;
  layout.gpus_per_node = 1;
  EXPECT_GT(predict_step_time(model, layout, h100).data_parallel, 0);
}

// llama-tiny's 6 query heads over 4 ranks: 2, 2, 1, 1 (its 2 key/value heads copied, one to each
// rank). The step is paced by the first rank, which holds as many heads as each of 3 ranks does:
// the same attention term as tp 3, while its share of the MLP's 128 columns (32 against 43)
// makes its GEMMs cheaper.
TEST(StepTime, AnUnevenTensorParallelSplitIsTimedOnItsBusiestRank) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  const ModelConfig model = model_preset("llama-tiny");
  StepLayout four;
  four.tp = 4;
  four.micro_batch = 8;
  four.seq_len = 64;
  StepLayout three = four;
  three.tp = 3;
  const StepTime t4 = predict_step_time(model, four, h100), t3 = predict_step_time(model, three, h100);
  EXPECT_EQ(t4.attention, t3.attention);
  EXPECT_LT(t4.gemm, t3.gemm);
  EXPECT_GT(t4.tensor_parallel, 0);
}

// Checked against ourselves on GPUs: dtrain's bf16 steps (`bash bench/step_vs_pytorch_gpu.sh
// --steps 10 --warmup 3`, medians of 10 steps) on one H200 in issue 20's closing run and on one
// H100 80GB HBM3 in issue 29's runs (the first; then, with the norm kernels at their roofline,
// llama3.2-1b at 8 sequences from `scripts/gpu_checks.sh ... busy` and the three larger
// micro-batches), against the prediction from each GPU's profile. The model leaves out kernels
// slower than their roofline and the clocks a GPU at its power cap runs at (the H100 held 100%
// utilization at a median 1,545 MHz and 694 W), so it predicts fast: when this was written, by
// 16%, 14% and 10% on the H200 and by 3% to 11% on the H100; the bound is issue 19's 25%.
TEST(StepTime, AgreesWithStepsMeasuredOnGpus) {
  struct Measured {
    const char* profile;
    const char* preset;
    int micro_batch, seq_len;
    double seconds;
  };
  for (const Measured& m : {Measured{"h200", "gpt2-124m", 32, 1024, 0.06389},
                            Measured{"h200", "gpt2-774m", 16, 1024, 0.17947},
                            Measured{"h200", "llama3.2-1b", 8, 2048, 0.24894},
                            Measured{"h100-sxm", "gpt2-124m", 32, 1024, 0.06650},
                            Measured{"h100-sxm", "gpt2-774m", 16, 1024, 0.18875},
                            Measured{"h100-sxm", "llama3.2-1b", 8, 2048, 0.24766},
                            Measured{"h100-sxm", "gpt2-124m", 64, 1024, 0.12457},
                            Measured{"h100-sxm", "gpt2-774m", 32, 1024, 0.34614},
                            Measured{"h100-sxm", "llama3.2-1b", 12, 2048, 0.36095}}) {
    StepLayout layout;
    layout.micro_batch = m.micro_batch;
    layout.seq_len = m.seq_len;
    const double predicted =
        predict_step_time(model_preset(m.preset), layout, load_hardware_profile(m.profile)).total;
    std::printf("%s on %s: predicted %.1f ms, measured %.1f ms (%+.0f%%)\n", m.preset, m.profile, predicted * 1e3,
                m.seconds * 1e3, 100 * (predicted / m.seconds - 1));
    EXPECT_NEAR(predicted / m.seconds, 1.0, 0.25) << m.preset << " on " << m.profile;
  }
}

// Megatron-LM's published A100 results (Narayanan et al. 2021, table 1: GPT, vocabulary 51,200,
// sequence 2,048, full recomputation, fp16, 312 TFLOP/s peak): the planner on the a100-80gb
// profile, its efficiencies as written there, predicts each within 15%. The engine it predicts is
// Megatron-LM's of 2021: attention without fusion (fused_attention = false) and, as for every
// case here alike, micro-batches of one sequence under the 1F1B schedule. TFLOP/s are counted as
// the paper counts them: 96 B s l h^2 (1 + s / 6h + V / 16 l h) per step, which includes the
// recomputed forward and the full (not causal) score matrices. The prediction was +3%, +7% and
// +12% when this was written; with dtrain's flash attention instead it is +31%, +15% and +18%.
TEST(StepTime, PredictsMegatronLmsPublishedA100Throughput) {
  const HardwareProfile a100 = load_hardware_profile("a100-80gb");
  struct Published {
    int layers, hidden, heads, tp, pp, gpus, batch;
    double tflops_per_gpu;
  };
  for (const Published& c : {Published{24, 2304, 24, 1, 1, 32, 512, 137}, Published{40, 6144, 48, 8, 1, 256, 1024, 135},
                             Published{80, 12288, 96, 8, 8, 1536, 2304, 148}}) {
    ModelConfig model = model_preset("gpt2-124m");
    model.n_layer = c.layers, model.d_model = c.hidden, model.n_head = c.heads;
    model.vocab_size = 51200, model.max_seq_len = 2048;
    StepLayout layout;
    layout.tp = c.tp, layout.pp = c.pp, layout.dp = c.gpus / (c.tp * c.pp);
    layout.micro_batch = 1;
    layout.micro_batches = c.batch / layout.dp;
    layout.seq_len = 2048;
    layout.recompute = Recompute::full;
    layout.precision = DType::f16;
    layout.fused_attention = false;
    const StepTime t = predict_step_time(model, layout, a100);
    const double B = c.batch, s = 2048, l = c.layers, h = c.hidden, V = 51200;
    const double megatron_flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const double predicted = megatron_flops / t.total / c.gpus / 1e12;
    std::printf("%d layers, hidden %d on %d GPUs: predicted %.1f TFLOP/s per GPU, published %.0f (%+.0f%%)\n", c.layers,
                c.hidden, c.gpus, predicted, c.tflops_per_gpu, 100 * (predicted / c.tflops_per_gpu - 1));
    EXPECT_NEAR(predicted / c.tflops_per_gpu, 1.0, 0.15) << c.hidden;
  }
}

TEST(StepTime, LayoutsItCannotRunAreNamed) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  StepLayout layout;
  layout.tp = 13;
  EXPECT_NE(testing::error_of([&] { predict_step_time(model_preset("gpt2-124m"), layout, h100); })
                .find("parallel.tp = 13: more tensor-parallel ranks than the model's 12 attention heads"),
            std::string::npos);
  layout.tp = 1;
  layout.pp = 2;
  layout.schedule = "gpipe";
  EXPECT_NE(testing::error_of([&] { predict_step_time(model_preset("gpt2-124m"), layout, h100); }).find("gpipe"),
            std::string::npos);
}

}  // namespace
}  // namespace dt
