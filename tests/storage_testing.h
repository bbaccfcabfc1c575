// Helpers for the 16-bit storage tests of the kernels: a 16-bit kernel is checked against the
// f32 kernel run on its inputs widened to f32, with the outputs rounded to the storage type
// (kernels/README.md, "Storage precision").
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "tests/gradcheck.h"

namespace dt::testing {

// The 16-bit storage types every such test runs.
inline constexpr std::initializer_list<DType> kStorage16 = {DType::bf16, DType::f16};

// f32 values rounded to nearest even into `storage` (bf16 or f16).
OwnedTensor rounded(const Tensor& f32, DType storage);
// A bf16 or f16 tensor widened exactly to f32.
OwnedTensor widened(const Tensor& t16);
// random_normal in f32, rounded into `storage`.
OwnedTensor random_storage(DType storage, Shape shape, uint64_t seed, double std = 1.0, double mean = 0.0);

// The largest distance in units in the last place between two 16-bit tensors of one dtype
// (0: the same bits; a NaN anywhere where the other has none counts as a huge distance).
int64_t max_ulp_distance(const Tensor& a, const Tensor& b);
// max |a - b| for two f32 tensors.
double max_abs_difference(const Tensor& a, const Tensor& b);

// The message of the dt::Error that fn throws; "" if it throws none.
std::string error_message(const std::function<void()>& fn);
// Expects fn to throw a dt::Error whose message names the op and the offending argument
// ("op: arg is ...").
void expect_error_naming(const std::function<void()>& fn, const std::string& op, const std::string& arg);

}  // namespace dt::testing
