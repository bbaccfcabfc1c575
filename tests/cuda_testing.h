// Tests of the CUDA backend: each compares a CUDA op with the CPU op on the same inputs. Where
// no GPU can be used (no backend in this build, no driver, no device) they are reported as
// skipped, by name and with the reason, never as passed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "tests/gradcheck.h"

namespace dt::testing {

#define DT_SKIP_WITHOUT_CUDA()                                                 \
  do {                                                                         \
    if (const std::string dt_why_ = ::dt::cuda_unavailable_reason(); !dt_why_.empty()) \
      GTEST_SKIP() << "needs a CUDA device: " << dt_why_;                      \
  } while (0)

// The storage types every CUDA kernel takes (kernels/cuda/storage.cuh's dispatch_storage).
inline constexpr DType kAllStorage[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// A copy of t (any device) on `device`, complete when it returns.
OwnedTensor copy_to(const Tensor& t, Device device);

// A CUDA copy of host tensor t, starting `offset` elements into its allocation: offset 1 puts it
// one element off 16-byte alignment (as parameter views inside a flat buffer may be), which
// sends the kernels down their element-by-element paths.
OwnedTensor to_gpu(const Tensor& t, int64_t offset = 0);

// A host copy of t: copy_to(t, Device::cpu).
OwnedTensor to_host(const Tensor& t);

// Normal values (std, mean) stored as `dtype`: f32 or f64 drawn directly, bf16 and f16 rounded
// from f32 (random_storage).
OwnedTensor random_values(DType dtype, Shape shape, uint64_t seed, double std = 1.0, double mean = 0.0);

// Whether two host tensors have the same dtype and the same bytes.
bool same_bits(const Tensor& a, const Tensor& b);

// Every element of a host tensor (f32, f64, bf16 or f16) as double, 16-bit ones widened exactly.
std::vector<double> values(const Tensor& t);

// max |actual - expected| / max |expected| over two host tensors of one dtype, 16-bit values
// widened exactly; a NaN in either counts as an infinite error.
double max_error(const Tensor& actual, const Tensor& expected);

}  // namespace dt::testing
