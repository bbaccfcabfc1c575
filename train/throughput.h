// What a step's speed is measured against: the FLOPs it does (model/flops.h: model FLOPs for MFU,
// hardware FLOPs with what recomputation repeats for HFU) and the GEMM peak of the machine.
// MFU = achieved model FLOP/s / the GEMM peak measured in the same run, in the run's precision.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/transformer.h"

namespace dt {

// Best of several runs of a 2048^3 product through kernels::linear_forward in `precision` on
// `device` (each run waits for the device to finish).
double measure_gemm_peak_gflop_per_s(DType precision, Device device = Device::cpu);

}  // namespace dt
