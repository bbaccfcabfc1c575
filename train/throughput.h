// What a step's speed is measured against: the FLOPs it does and the GEMM peak of the machine.
//
// FLOPs are counted from the architecture, per token of a forward pass (model/flops.h).
// Training is three forward passes' worth (backward computes two products per forward one).
// Model FLOPs are what MFU counts; hardware FLOPs add the work recomputation repeats (the
// attention core for selective, every block's forward up to the MLP's activation for full), and
// give HFU. Neither counts
// the scores that flash attention recomputes inside its backward kernel, as FlashAttention's
// own figures do not. (PaLM's 6N + 12 L C T per token counts every embedding row and the full
// T x T score matrix; it reads about 5-30% higher at small sizes.)
// MFU = achieved model FLOP/s / the GEMM peak measured in the same run, in the run's precision.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/transformer.h"

namespace dt {

struct StepFlops {
  double model = 0;     // what the architecture needs: MFU's numerator
  double hardware = 0;  // plus what the recomputation policy repeats: HFU's numerator
};

// FLOPs of a training step (forward and backward) over `tokens` tokens in sequences of seq_len.
StepFlops training_flops(const ModelConfig& model, int seq_len, int64_t tokens, Recompute recompute);

// Best of several runs of a 2048^3 product through kernels::linear_forward in `precision` on
// `device` (each run waits for the device to finish).
double measure_gemm_peak_gflop_per_s(DType precision, Device device = Device::cpu);

}  // namespace dt
