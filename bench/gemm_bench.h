// `dtrain bench gemm`: the matrix products of one training step of a model shape, timed through
// OpenBLAS's sgemm (what the fp32 path uses), oneDNN in fp32, and oneDNN in bf16 with fp32
// accumulation and output (what a bf16 path would use), in the same run and thread count: the
// measurement behind the choice of GEMM for each precision.
#pragma once

#include "model/config.h"

namespace dt {

struct GemmBenchOptions {
  ModelConfig model;
  int batch_size = 8;
  int seq_len = 256;
  int reps = 5;     // timed repetitions per product; the median is reported
  int threads = 0;  // 0: OpenMP's default
};

// Prints one row per product (layer and pass) and the totals over a step's products.
void run_gemm_bench(const GemmBenchOptions& options);

}  // namespace dt
