// Test tensors and the finite-difference gradient check shared by the kernel tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"

namespace dt::testing {

// A tensor that owns its memory (tests only; the engine's tensors are views).
struct OwnedTensor {
  Buffer buffer;
  Tensor t;
  template <typename T>
  T* ptr() const { return t.ptr<T>(); }
};

OwnedTensor zeros(DType dtype, Shape shape);
// Elements mean + std * N(0, 1), a pure function of (seed, index).
OwnedTensor random_normal(DType dtype, Shape shape, uint64_t seed, double std = 1.0, double mean = 0.0);
// The same values in another float dtype (f32 <-> f64).
OwnedTensor converted(const Tensor& t, DType dtype);
// Element i as double, for f32 or f64 tensors.
double element(const Tensor& t, int64_t i);
// max |actual[i] - expected[i]| / max |expected[i]| for an f32 or f64 tensor against values worked
// out in f64; a NaN counts as an infinite error.
double normalized_error(const Tensor& actual, const std::vector<double>& expected);

// One input whose analytic gradient is checked: `value` is perturbed, `grad` holds dL/dvalue.
struct GradInput {
  std::string name;
  Tensor value;
  Tensor grad;
};

struct GradCheckResult {
  double worst_error = 0;  // max |numeric - analytic| / max(max |analytic|, 1e-12), over inputs
  std::string where;       // "name[index]" of the worst element
};

// Central differences (L(x + h) - L(x - h)) / 2h for every element of every input, against
// the analytic gradients. `loss` recomputes L from the current values (f64 tensors, so the
// difference quotient is not drowned by rounding). Values are restored afterwards.
GradCheckResult check_gradients(const std::function<double()>& loss, const std::vector<GradInput>& inputs,
                                double step = 1e-6);

// sum_i w[i] * out[i]: the scalar whose gradient with respect to out is w.
double weighted_sum(const Tensor& out, const Tensor& w);

}  // namespace dt::testing
