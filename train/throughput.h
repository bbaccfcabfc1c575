// What a step's speed is measured against: the FLOPs it does and the GEMM peak of the machine.
//
// FLOPs per step = 6 * parameters * tokens + 12 * n_layer * d_model * seq_len * tokens
// (PaLM's convention: the second term is attention's QK^T and PV, counted for the full T x T
// matrix although the causal half is skipped — the convention MFU figures are quoted in).
// MFU = achieved FLOP/s / the GEMM peak measured in the same run, in the run's precision.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/config.h"

namespace dt {

double step_flops(const ModelConfig& model, int64_t num_parameters, int batch_size, int seq_len);
// Best of several runs of a 2048^3 product through kernels::linear_forward in `precision`.
double measure_gemm_peak_gflop_per_s(DType precision);

}  // namespace dt
