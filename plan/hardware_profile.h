// What the planner knows of a machine: one accelerator's memory and peak throughput, the share
// of the peak its large GEMMs reach, and the links between accelerators in a node and between
// nodes, as an α–β model (a message of n bytes takes latency + n / bandwidth). A profile is a
// TOML file (docs/profiles.md); profiles/ holds the datasheet ones (h100-sxm, h200,
// a100-80gb). The efficiencies are assumptions written in the file, the same for every
// prediction, never fitted to one case.
#pragma once

#include <filesystem>
#include <string>

#include "core/dtype.h"

namespace dt {

struct LinkProfile {
  double bandwidth = 0;  // bytes/s, per direction
  double latency = 0;    // seconds per message
  // The seconds a message of `bytes` takes: latency + bytes / bandwidth.
  double seconds(double bytes) const { return latency + bytes / bandwidth; }
};

struct HardwareProfile {
  std::string name;
  std::filesystem::path file;
  int gpus_per_node = 1;
  double memory_bytes = 0;
  double memory_bandwidth = 0;                         // bytes/s, the accelerator's own memory
  double peak_bf16 = 0, peak_f16 = 0, peak_f32 = 0;  // FLOP/s, dense
  double peak_fp8 = 0;  // FLOP/s, dense FP8 (e4m3 and e5m2) tensor cores; 0: the accelerator has none
  double gemm_efficiency = 0;                          // share of the peak large GEMMs reach
  // Share of each precision's peak that fused attention reaches (efficiency.attention: one
  // share for every precision, or one per precision).
  double attention_bf16 = 0, attention_f16 = 0, attention_f32 = 0;
  double memory_efficiency = 0;                        // share of memory_bandwidth streaming kernels reach
  LinkProfile intra_node, inter_node;

  // The dense peak in a training precision (f32, bf16 or f16) or FP8 (f8e4m3, f8e5m2: throws,
  // naming the fix, where the profile has none), and the share of it attention reaches.
  double peak(DType precision) const;
  double attention_efficiency(DType precision) const;
};

// The profile `name_or_path`: a file path, or the name of one in profiles/ ("h100-sxm"). Every
// field must be there and positive; a file that lacks one, or holds a value that is not, is
// refused with every problem at once, each naming the file, the field and the fix. An unknown
// name lists the profiles there are.
HardwareProfile load_hardware_profile(const std::string& name_or_path);
// The directory of the datasheet profiles.
std::filesystem::path profile_directory();

}  // namespace dt
