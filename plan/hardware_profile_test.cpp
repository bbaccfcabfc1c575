// The hardware profiles: every datasheet profile in profiles/ loads, with the figures the issue
// and NVIDIA's datasheets give; a profile with a field missing or not positive is refused with
// every problem at once, each naming the file, the field and the fix; an unknown name lists the
// profiles there are.
#include "plan/hardware_profile.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing.h"

namespace dt {
namespace {

TEST(HardwareProfile, TheDatasheetProfilesLoadWithTheirFigures) {
  for (const char* name : {"h100-sxm", "h200", "a100-80gb"}) {
    const HardwareProfile p = load_hardware_profile(name);
    EXPECT_EQ(p.gpus_per_node, 8) << name;
    EXPECT_GT(p.gemm_efficiency, 0) << name;
    EXPECT_LE(p.gemm_efficiency, 1) << name;
    for (const DType precision : {DType::bf16, DType::f16, DType::f32}) {
      EXPECT_GT(p.attention_efficiency(precision), 0) << name;
      EXPECT_LE(p.attention_efficiency(precision), 1) << name;
    }
    EXPECT_GT(p.memory_efficiency, 0) << name;
    EXPECT_LE(p.memory_efficiency, 1) << name;
  }
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  EXPECT_EQ(h100.peak(DType::bf16), 989e12);
  EXPECT_EQ(h100.memory_bytes, 80.0 * (1 << 30));
  EXPECT_EQ(h100.intra_node.bandwidth, 450e9);  // NVLink's 900 GB/s, per direction
  EXPECT_EQ(h100.inter_node.bandwidth, 50e9);   // 400 Gb/s InfiniBand
  EXPECT_EQ(h100.memory_bandwidth, 3350e9);     // HBM3
  EXPECT_EQ(load_hardware_profile("h200").memory_bandwidth, 4800e9);
  EXPECT_EQ(load_hardware_profile("a100-80gb").memory_bandwidth, 2039e9);
  EXPECT_EQ(load_hardware_profile("a100-80gb").peak(DType::bf16), 312e12);
  EXPECT_EQ(load_hardware_profile("h200").memory_bytes, 141.0 * (1 << 30));
  // FP8 where the GPU has FP8 tensor cores; an A100 has none, and planning FP8 on it is refused.
  EXPECT_EQ(h100.peak(DType::f8e4m3), 1979e12);
  EXPECT_EQ(load_hardware_profile("h200").peak(DType::f8e5m2), 1979e12);
  EXPECT_NE(testing::error_of([] { load_hardware_profile("a100-80gb").peak(DType::f8e4m3); })
                .find("has no FP8 peak (peak_tflops.fp8): its accelerator has no FP8 tensor cores"),
            std::string::npos);
  // By path as well as by name.
  EXPECT_EQ(load_hardware_profile((profile_directory() / "h200.toml").string()).name, "H200 SXM");
}

TEST(HardwareProfile, MissingAndNonPositiveFieldsAreEachNamedWithTheFix) {
  testing::TempDir dir;
  const std::string path = dir.file("bad.toml");
  std::ofstream(path) << "name = \"bad\"\ngpus_per_node = 8\nmemory_gib = 0\n[peak_tflops]\nbf16 = 989\nf16 = 989\n"
                      << "memory_bandwidth_gbps = 3350\n"
                      << "[efficiency]\ngemm = 1.5\nattention = 0.3\n[intra_node]\nbandwidth_gbps = 450\nlatency_us = 3\n"
                      << "[inter_node]\nbandwidth_gbps = -1\nlatency_us = 8\n";
  const std::string e = testing::error_of([&] { load_hardware_profile(path); });
  for (const char* expected : {"memory_gib = 0: must be above 0 (GiB of accelerator memory)",
                               "peak_tflops.f32 is missing (dense TFLOP/s); add it, as in",
                               "efficiency.gemm = 1.5: a share of the peak large GEMMs reach, at most 1",
                               "efficiency.memory is missing (the share of the memory bandwidth streaming kernels "
                               "reach, at most 1)",
                               "inter_node.bandwidth_gbps = -1: must be above 0 (GB/s per direction)"})
    EXPECT_NE(e.find(str(path, ": ", expected)), std::string::npos) << expected << "\n" << e;
}

// efficiency.attention may give a share per precision (as `dtrain bench profile` writes for a
// CPU, whose 16-bit attention computes in f32 while its 16-bit GEMMs run faster); each one must
// be there and a share.
TEST(HardwareProfile, AttentionMayHaveAShareForEachPrecision) {
  testing::TempDir dir;
  const auto profile = [&](const std::string& attention) {
    const std::string path = dir.file("cpu.toml");
    std::ofstream(path) << "gpus_per_node = 2\nmemory_gib = 16\nmemory_bandwidth_gbps = 40\n"
                        << "[peak_tflops]\nbf16 = 0.4\nf16 = 0.1\nf32 = 0.1\n[efficiency]\ngemm = 1\nmemory = 1\n"
                        << attention << "\n[intra_node]\nbandwidth_gbps = 4\nlatency_us = 5\n"
                        << "[inter_node]\nbandwidth_gbps = 4\nlatency_us = 5\n";
    return path;
  };
  const HardwareProfile p = load_hardware_profile(profile("attention = { bf16 = 0.25, f16 = 0.5, f32 = 1 }"));
  EXPECT_EQ(p.attention_efficiency(DType::bf16), 0.25);
  EXPECT_EQ(p.attention_efficiency(DType::f16), 0.5);
  EXPECT_EQ(p.attention_efficiency(DType::f32), 1);
  const std::string path = profile("attention = { bf16 = 1.5, f32 = 1 }");
  const std::string e = testing::error_of([&] { load_hardware_profile(path); });
  for (const char* expected : {"efficiency.attention.bf16 = 1.5: a share of the bf16 peak fused attention reaches",
                               "efficiency.attention.f16 is missing"})
    EXPECT_NE(e.find(str(path, ": ", expected)), std::string::npos) << expected << "\n" << e;
}

TEST(HardwareProfile, AnUnknownNameListsTheProfiles) {
  const std::string e = testing::error_of([] { load_hardware_profile("h300"); });
  EXPECT_NE(e.find("no hardware profile 'h300'"), std::string::npos) << e;
  // The datasheet profiles, and a measured cpu-local where `dtrain bench profile` wrote one.
  for (const char* name : {"(a100-80gb, ", "h100-sxm, h200"})
    EXPECT_NE(e.find(name), std::string::npos) << e;
}

}  // namespace
}  // namespace dt
