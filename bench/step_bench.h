// `dtrain bench step`: times full training steps (forward, backward, clip, AdamW) of a model
// shape on the CPU or a GPU and relates them to the device's GEMM peak in the run's precision
// (sgemm for f32 and oneDNN's bf16 GEMM for bf16 on the CPU, cuBLASLt on a GPU), measured in
// the same run; on a GPU, also to its datasheet dense peak.
//
// FLOPs are counted as train/throughput.h says.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/float8_recipe.h"
#include "model/transformer.h"

namespace dt {

struct StepBenchOptions {
  ModelConfig model;
  int batch_size = 8;
  int seq_len = 256;
  int steps = 10;   // timed steps; the median is reported
  int warmup = 2;   // untimed steps first
  int threads = 0;  // 0: OpenMP's default
  Recompute recompute = Recompute::none;
  DType precision = DType::f32;
  Float8Scaling fp8 = Float8Scaling::none;  // the blocks' linear layers in FP8 (with bf16)
  Device device = Device::cpu;
};

struct StepBenchResult {
  double median_step_ms = 0;
  double tokens_per_s = 0;
  double gflop_per_s = 0;
  double gemm_peak_gflop_per_s = 0;
  double datasheet_mfu = 0;  // on a GPU in bench/gpu_peaks.cpp's table; else 0
};

// Bytes of the activations tag that one more block adds under `policy`: the difference between
// models of 2 and 1 layers of this shape, measured through the allocator.
size_t measure_activation_bytes_per_layer(const ModelConfig& model, int batch_size, int seq_len, Recompute policy,
                                          DType precision);
// Prints a table of the timed steps and a summary, then the activation bytes per layer under
// every recomputation policy beside Korthikanti et al.'s estimates; returns the summary.
StepBenchResult run_step_bench(const StepBenchOptions& options);

}  // namespace dt
