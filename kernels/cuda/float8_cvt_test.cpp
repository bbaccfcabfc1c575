// The FP8 cast every kernel uses (kernels/float8_math.h) against CUDA's own,
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) from cuda_fp8.h, run on the host: no GPU needed.
// On a GPU of compute capability 8.9 or more the device form is the cvt.rn.satfinite
// instruction, which kernels/cuda/float8_test.cpp checks against the CPU.
//
// The sweep takes every f32 whose low 8 bits are 0x00, 0x01, 0x80 or 0xff: 2^26 values per
// format, every sign, exponent and high mantissa. Both formats drop at least 20 of f32's 23
// mantissa bits (more for subnormals), so the rounding reads bits 19 and up and only asks
// whether any below them is set; those four endings give each high part's low bits as zero,
// lowest, middle and all set. (Every one of the 2^32 floats was compared once, in 24 s: no
// difference.)
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/float8_math.h"

namespace dt::kernels {
namespace {

using float8_math::Format;

TEST(Float8Cast, GivesTheBytesOfCudasSaturatingCast) {
  for (const auto& [format, nv] : {std::pair{Format::e4m3, __NV_E4M3}, std::pair{Format::e5m2, __NV_E5M2}}) {
    int64_t differences = 0;
    uint32_t first_difference = 0;
#pragma omp parallel for schedule(static) reduction(+ : differences)
    for (int64_t high = 0; high < (int64_t{1} << 24); ++high)
      for (const uint32_t low : {0x00u, 0x01u, 0x80u, 0xffu}) {
        const uint32_t bits = static_cast<uint32_t>(high) << 8 | low;
        const float x = float8_math::float_of(bits);
        if (float8_math::encode_satfinite(x, format) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, nv)) {
          ++differences;
#pragma omp critical
          if (first_difference == 0) first_difference = bits;
        }
      }
    EXPECT_EQ(differences, 0) << (format == Format::e4m3 ? "e4m3" : "e5m2") << ", first at f32 bits 0x" << std::hex
                              << first_difference;
  }
}

}  // namespace
}  // namespace dt::kernels
