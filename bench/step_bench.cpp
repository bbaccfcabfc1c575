#include "bench/step_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/gpu_peaks.h"
#include "bench/rank_figures.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "model/transformer.h"
#include "plan/memory.h"
#include "train/batch_buffers.h"
#include "train/step.h"
#include "train/throughput.h"

namespace dt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

size_t measure_activation_bytes_per_layer(const ModelConfig& model, int batch_size, int seq_len, Recompute policy,
                                          DType precision) {
  const auto activation_bytes = [&](int n_layer) {
    ModelConfig shape = model;
    shape.n_layer = n_layer;
    const auto current = [] { return memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)]; };
    const size_t before = current();
    const Transformer probe(shape, batch_size, seq_len, policy, precision);
    return current() - before;
  };
  return activation_bytes(2) - activation_bytes(1);
}

namespace {

// Activation bytes per layer next to the published estimates for 16-bit activations with
// dropout (Korthikanti et al. 2022, table 2): s·b·h·(34 + 5·a·s/h) without recomputation,
// s·b·h·34 with selective, 2·s·b·h (the block input) with full.
void print_activation_bytes(const StepBenchOptions& o) {
  const double sbh = static_cast<double>(o.seq_len) * o.batch_size * o.model.d_model;
  const double a = o.model.n_head, s = o.seq_len, h = o.model.d_model;
  std::printf("# activation bytes per layer (%s storage; measured through the allocator's activations tag):\n",
              std::string(dtype_name(o.precision)).c_str());
  std::printf("#%10s %12s %11s %18s %22s\n", "policy", "measured", "per s*b*h", "same at 2 bytes", "published (16-bit)");
  const std::pair<Recompute, double> estimates[] = {
      {Recompute::none, 34 + 5 * a * s / h}, {Recompute::selective, 34}, {Recompute::full, 2}};
  for (const auto& [policy, estimate] : estimates) {
    const size_t bytes = measure_activation_bytes_per_layer(o.model, o.batch_size, o.seq_len, policy, o.precision);
    const double per_sbh = static_cast<double>(bytes) / sbh;
    std::printf(" %10s %12s %11.2f %18.2f %22.2f\n", std::string(recompute_name(policy)).c_str(),
                format_bytes(static_cast<double>(bytes)).c_str(), per_sbh,
                per_sbh * 2 / static_cast<double>(dtype_size(o.precision)), estimate);
  }
}

}  // namespace

StepBenchResult run_step_bench(const StepBenchOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (o.steps < 1 || o.warmup < 0) throw Error(str("bench step: --steps must be >= 1 and --warmup >= 0"));
  // The whole run (model, AdamW, activations) against the GPU's memory before anything is made.
  if (o.device == Device::cuda) check_fits_on_gpu(o.model, o.batch_size, o.seq_len, o.recompute, o.precision, 1, 0);
  if (o.fp8 != Float8Scaling::none && o.precision != DType::bf16)
    throw Error(str("bench step: --fp8 ", float8_scaling_name(o.fp8), " quantizes bf16 activations and weights; add "
                    "--precision bf16"));
  const Float8Training fp8{.recipe = {.scaling = o.fp8}};
  Transformer model(o.model, o.batch_size, o.seq_len, o.recompute, o.precision, o.device, {}, nullptr, {}, nullptr, {},
                    nullptr, o.fp8 != Float8Scaling::none ? &fp8 : nullptr);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), AdamWConfig{});
  init_parameters(model.params(), 1);
  optimizer.round_weights();
  BatchBuffers batch(1, o.batch_size, o.seq_len, o.device);
  const MicroBatch& host = batch.host(0);
  const ElementRng rng(2, "bench.tokens");
  for (int64_t i = 0; i < host.tokens.numel(); ++i) {
    host.tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i) * o.model.vocab_size);
    host.targets.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i + 1) * o.model.vocab_size);
  }
  batch.upload();

  const double peak = measure_gemm_peak_gflop_per_s(o.precision, o.device);
  const double tokens = static_cast<double>(o.batch_size) * o.seq_len;
  const StepFlops counted = training_flops(o.model, o.seq_len, o.batch_size * int64_t{o.seq_len}, o.recompute);
  const double flops = counted.model;
  std::printf("# dtrain bench step: %s n_layer=%d d_model=%d n_head=%d vocab=%d (padded %d), %lld parameters\n",
              std::string(model_family_name(o.model.family)).c_str(), o.model.n_layer, o.model.d_model,
              o.model.n_head, o.model.vocab_size, o.model.padded_vocab_size(),
              static_cast<long long>(model.layout().num_parameters()));
  std::printf("# batch %d x seq %d = %.0f tokens/step, %s%s, recompute %s, %d threads, %d warm-up + %d timed steps\n",
              o.batch_size, o.seq_len, tokens, std::string(dtype_name(o.precision)).c_str(),
              o.fp8 == Float8Scaling::none ? "" : str(" with FP8 ", float8_scaling_name(o.fp8)).c_str(),
              std::string(recompute_name(o.recompute)).c_str(), omp_get_max_threads(), o.warmup, o.steps);
#ifdef DTRAIN_WITH_CUDA
  if (o.device == Device::cuda) {
    // Which attention kernels this shape runs on (cuDNN's, or ours and why): the largest share of
    // a step's time at long sequences.
    const Tensor qkv{.dtype = o.precision, .shape = {o.batch_size, o.seq_len, o.model.qkv_width()}, .device = Device::cuda};
    std::printf("# attention: %s\n",
                kernels::cuda::attention_kernels(qkv, {o.model.n_head, o.model.kv_heads()}).c_str());
  }
#endif
  std::printf("# GEMM peak (%s 2048^3 through linear_forward on %s): %.1f GFLOP/s; %.3f GFLOP per step\n",
              std::string(dtype_name(o.precision)).c_str(), std::string(device_name(o.device)).c_str(), peak,
              flops / 1e9);
  std::printf("#%6s %12s %14s %10s %10s\n", "step", "time_ms", "tokens_per_s", "GFLOP/s", "of_peak");

  std::vector<double> times;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      reset_peak_memory(o.device);
      profiled_region(o.device, true);  // a profiler sees the timed steps only, not the warm-up or GEMM peak
    }
    const auto start = std::chrono::steady_clock::now();
    train_step(model, optimizer, batch.on_device(), 1e-4f, 1.0f);
    synchronize(o.device);  // the optimizer's kernels may still be running
    const double s = seconds_since(start);
    if (i < o.warmup) continue;
    times.push_back(s);
    std::printf(" %6d %12.2f %14.1f %10.1f %9.1f%%\n", i - o.warmup + 1, s * 1e3, tokens / s, flops / s / 1e9,
                100.0 * flops / s / 1e9 / peak);
  }
  profiled_region(o.device, false);
  StepBenchResult r;
  const double s = median(times);
  r.median_step_ms = s * 1e3;
  r.tokens_per_s = tokens / s;
  r.gflop_per_s = flops / s / 1e9;
  r.gemm_peak_gflop_per_s = peak;
  std::printf("# median: %.2f ms/step, %.1f tokens/s, %.1f GFLOP/s = %.1f%% of GEMM peak (MFU); HFU %.1f%%\n",
              r.median_step_ms, r.tokens_per_s, r.gflop_per_s, 100.0 * r.gflop_per_s / peak,
              100.0 * counted.hardware / s / 1e9 / peak);
  std::string datasheet_mfu;
  if (o.device == Device::cuda) {
    const std::string gpu = device_description(o.device);
    if (const auto peak_sheet = datasheet_peak(gpu, o.precision)) {
      r.datasheet_mfu = r.gflop_per_s / (peak_sheet->tflops * 1e3);
      std::printf("# %s: %.1f%% of the %s's datasheet dense %s peak (%.1f TFLOP/s)\n", gpu.c_str(),
                  100.0 * r.datasheet_mfu, peak_sheet->model.c_str(), std::string(dtype_name(o.precision)).c_str(),
                  peak_sheet->tflops);
      datasheet_mfu = str(" datasheet_mfu=", r.datasheet_mfu);
    } else {
      std::printf("# %s is not in bench/gpu_peaks.cpp: MFU against the measured GEMM peak only\n", gpu.c_str());
    }
  }
  const MemoryStats mem = memory_stats(o.device);
  std::printf("# peak memory per tag (MiB):");
  for (int t = 0; t < kNumMemTags; ++t)
    std::printf(" %s=%.1f", std::string(mem_tag_name(static_cast<MemTag>(t))).c_str(), mem.peak_bytes[t] / 1048576.0);
  std::printf(" total=%.1f\n", mem.total_peak_bytes / 1048576.0);
  print_activation_bytes(o);
  std::printf(
      "result tokens_per_s=%.1f median_step_ms=%.2f gflop_per_s=%.1f gemm_peak_gflop_per_s=%.1f peak_memory_gib=%.2f%s\n",
      r.tokens_per_s, r.median_step_ms, r.gflop_per_s, peak, mem.total_peak_bytes / 1073741824.0, datasheet_mfu.c_str());
  return r;
}

}  // namespace dt
