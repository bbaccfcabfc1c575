#include "bench/gpu_peaks.h"

namespace dt {

namespace {

struct Row {
  const char* name_contains;  // matched against CUDA's device name, first match wins
  const char* model;
  double bf16_tflops, fp32_tflops;  // dense; fp16 equals bf16 on all of these
};

// NVIDIA's datasheets: H100 SXM5 989.4 (bf16/fp16 dense) and 66.9 (FP32); H100 NVL 835 and 60;
// H100 PCIe 756.5 and 51.2; H200 (SXM) 989.4 and 66.9; A100 (SXM and PCIe) 312 and 19.5.
constexpr Row kRows[] = {
    {"H200", "H200", 989.4, 66.9},
    {"H100 NVL", "H100 NVL", 835.0, 60.0},
    {"H100 PCIe", "H100 PCIe", 756.5, 51.2},
    {"H100", "H100 SXM", 989.4, 66.9},  // "NVIDIA H100 80GB HBM3" is the SXM part
    {"A100", "A100", 312.0, 19.5},
};

}  // namespace

std::optional<GpuPeak> datasheet_peak(const std::string& device_name, DType precision) {
  for (const Row& row : kRows)
    if (device_name.find(row.name_contains) != std::string::npos)
      return GpuPeak{row.model, precision == DType::f32 ? row.fp32_tflops : row.bf16_tflops};
  return std::nullopt;
}

}  // namespace dt
