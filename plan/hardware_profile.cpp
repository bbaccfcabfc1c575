#include "plan/hardware_profile.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace dt {

double HardwareProfile::peak(DType precision) const {
  switch (precision) {
    case DType::bf16: return peak_bf16;
    case DType::f16: return peak_f16;
    case DType::f32: return peak_f32;
    case DType::f8e4m3:
    case DType::f8e5m2:
      if (peak_fp8 > 0) return peak_fp8;
      throw Error(str("the profile ", name, " (", file.string(), ") has no FP8 peak (peak_tflops.fp8): its accelerator "
                      "has no FP8 tensor cores, as an A100; plan train.fp8 on a profile that has them (h100-sxm, h200) "
                      "or add the figure"));
    default:
      throw Error(str("no peak for ", dtype_name(precision), " in the profile ", name, "; use f32, bf16, f16 or FP8"));
  }
}

double HardwareProfile::attention_efficiency(DType precision) const {
  switch (precision) {
    case DType::bf16: return attention_bf16;
    case DType::f16: return attention_f16;
    case DType::f32: return attention_f32;
    default:
      throw Error(str("no attention share for ", dtype_name(precision), " in the profile ", name,
                      "; use f32, bf16 or f16"));
  }
}

std::filesystem::path profile_directory() { return std::filesystem::path(DTRAIN_PROFILE_DIR); }

namespace {

std::vector<std::string> known_profiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(profile_directory(), ec))
    if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

HardwareProfile load_hardware_profile(const std::string& name_or_path) {
  std::filesystem::path path = name_or_path;
  if (!std::filesystem::exists(path) && path.extension() != ".toml")
    path = profile_directory() / (name_or_path + ".toml");
  if (!std::filesystem::exists(path)) {
    std::string names;
    for (const std::string& n : known_profiles()) names += str(names.empty() ? "" : ", ", n);
    throw Error(str("no hardware profile '", name_or_path, "': not a file, nor one of the profiles in ",
                    profile_directory().string(), " (", names, "); write one as docs/profiles.md describes"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  toml::table doc;
  try {
    doc = toml::parse(text.str(), path.string());
  } catch (const toml::parse_error& e) {
    throw Error(str(path.string(), ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description(),
                    " (not valid TOML)"));
  }
  std::vector<std::string> problems;
  // A positive number at `key` ("section.field"), or a problem naming it.
  const auto number = [&](const std::string& key, const char* unit) {
    const std::optional<double> v = doc.at_path(key).value<double>();
    if (!v) {
      problems.push_back(str(key, " is missing (", unit, "); add it, as in ", (profile_directory() / "h100-sxm.toml").string()));
      return 1.0;
    }
    if (!(*v > 0)) problems.push_back(str(key, " = ", *v, ": must be above 0 (", unit, ")"));
    return *v;
  };
  HardwareProfile p;
  p.file = path;
  p.name = doc["name"].value_or(path.stem().string());
  p.gpus_per_node = static_cast<int>(number("gpus_per_node", "accelerators per node"));
  p.memory_bytes = number("memory_gib", "GiB of accelerator memory") * 1024.0 * 1024.0 * 1024.0;
  p.memory_bandwidth = number("memory_bandwidth_gbps", "GB/s of accelerator memory bandwidth") * 1e9;
  p.peak_bf16 = number("peak_tflops.bf16", "dense TFLOP/s") * 1e12;
  p.peak_f16 = number("peak_tflops.f16", "dense TFLOP/s") * 1e12;
  p.peak_f32 = number("peak_tflops.f32", "dense TFLOP/s") * 1e12;
  // Optional: only accelerators with FP8 tensor cores have it.
  if (doc.at_path("peak_tflops.fp8")) p.peak_fp8 = number("peak_tflops.fp8", "dense TFLOP/s") * 1e12;
  // A share of a peak: positive and at most 1.
  const auto share = [&](const std::string& key, const char* what) {
    const double v = number(key, str("the share of ", what, ", at most 1").c_str());
    if (v > 1) problems.push_back(str(key, " = ", v, ": a share of ", what, ", at most 1"));
    return v;
  };
  p.gemm_efficiency = share("efficiency.gemm", "the peak large GEMMs reach");
  // One share for every precision, or a table of one per precision.
  if (doc.at_path("efficiency.attention").is_table()) {
    p.attention_bf16 = share("efficiency.attention.bf16", "the bf16 peak fused attention reaches");
    p.attention_f16 = share("efficiency.attention.f16", "the f16 peak fused attention reaches");
    p.attention_f32 = share("efficiency.attention.f32", "the f32 peak fused attention reaches");
  } else {
    p.attention_bf16 = p.attention_f16 = p.attention_f32 =
        share("efficiency.attention", "the peak fused attention reaches");
  }
  p.memory_efficiency = share("efficiency.memory", "the memory bandwidth streaming kernels reach");
  p.intra_node = {.bandwidth = number("intra_node.bandwidth_gbps", "GB/s per direction") * 1e9,
                  .latency = number("intra_node.latency_us", "microseconds") * 1e-6};
  p.inter_node = {.bandwidth = number("inter_node.bandwidth_gbps", "GB/s per direction") * 1e9,
                  .latency = number("inter_node.latency_us", "microseconds") * 1e-6};
  if (!problems.empty()) {
    std::string all;
    for (const std::string& problem : problems) all += str("\n  ", path.string(), ": ", problem);
    throw Error(str("the hardware profile ", path.string(), " cannot be used:", all));
  }
  return p;
}

}  // namespace dt
