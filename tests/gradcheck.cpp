#include "tests/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace dt::testing {

OwnedTensor zeros(DType dtype, Shape shape) {
  Buffer b(static_cast<size_t>(shape.numel()) * dtype_size(dtype), MemTag::workspace);
  Tensor t = b.view(dtype, shape);
  return {std::move(b), t};
}

OwnedTensor random_normal(DType dtype, Shape shape, uint64_t seed, double std, double mean) {
  OwnedTensor o = zeros(dtype, shape);
  const ElementRng rng(seed, "testing.random_normal");
  for (int64_t i = 0; i < o.t.numel(); ++i) {
    const double v = mean + std * rng.normal(static_cast<uint64_t>(i));
    if (dtype == DType::f64) o.ptr<double>()[i] = v;
    else o.ptr<float>()[i] = static_cast<float>(v);
  }
  return o;
}

double element(const Tensor& t, int64_t i) {
  return t.dtype == DType::f64 ? t.ptr<double>()[i] : static_cast<double>(t.ptr<float>()[i]);
}

double normalized_error(const Tensor& actual, const std::vector<double>& expected) {
  double worst = 0, scale = 1e-30;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double d = std::fabs(element(actual, i) - expected[static_cast<size_t>(i)]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    scale = std::max(scale, std::fabs(expected[static_cast<size_t>(i)]));
  }
  return worst / scale;
}

OwnedTensor converted(const Tensor& t, DType dtype) {
  OwnedTensor o = zeros(dtype, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::f64) o.ptr<double>()[i] = element(t, i);
    else o.ptr<float>()[i] = static_cast<float>(element(t, i));
  }
  return o;
}

double weighted_sum(const Tensor& out, const Tensor& w) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += element(out, i) * element(w, i);
  return s;
}

GradCheckResult check_gradients(const std::function<double()>& loss, const std::vector<GradInput>& inputs,
                                double step) {
  GradCheckResult result;
  for (const GradInput& in : inputs) {
    DT_CHECK(in.value.dtype == DType::f64 && in.grad.dtype == DType::f64, "gradient checks run in f64");
    double* x = in.value.ptr<double>();
    double scale = 1e-12, worst = 0;
    int64_t worst_index = 0;
    for (int64_t i = 0; i < in.value.numel(); ++i) scale = std::max(scale, std::fabs(in.grad.ptr<double>()[i]));
    for (int64_t i = 0; i < in.value.numel(); ++i) {
      const double saved = x[i];
      x[i] = saved + step;
      const double up = loss();
      x[i] = saved - step;
      const double down = loss();
      x[i] = saved;
      const double err = std::fabs((up - down) / (2 * step) - in.grad.ptr<double>()[i]);
      if (err > worst) worst = err, worst_index = i;
    }
    if (worst / scale > result.worst_error) {
      result.worst_error = worst / scale;
      result.where = str(in.name, "[", worst_index, "]");
    }
  }
  return result;
}

}  // namespace dt::testing
