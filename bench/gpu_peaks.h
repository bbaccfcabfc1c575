// Datasheet dense peaks of the GPUs dtrain is measured on, for MFU as papers quote it: model
// FLOP/s over the vendor's dense (no 2:4 sparsity) tensor-core figure for the run's precision.
// fp32 runs are held to the plain FP32 (non-tensor-core) figure: dtrain's fp32 GEMMs do not use
// TF32 (kernels/cuda/linear.cu).
#pragma once

#include <optional>
#include <string>

#include "core/dtype.h"

namespace dt {

struct GpuPeak {
  std::string model;   // "H100 SXM"
  double tflops = 0;   // dense, in the precision asked for
};

// The peak for a device name as CUDA reports it ("NVIDIA H100 80GB HBM3"); nullopt for a GPU
// not in the table (MFU is then reported against the measured GEMM peak only).
std::optional<GpuPeak> datasheet_peak(const std::string& device_name, DType precision);

}  // namespace dt
