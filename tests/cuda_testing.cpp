#include "tests/cuda_testing.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/storage_testing.h"

namespace dt::testing {

namespace {

bool is_16bit(DType d) { return d == DType::bf16 || d == DType::f16; }

}  // namespace

OwnedTensor copy_to(const Tensor& t, Device device) {
  Buffer buffer(t.bytes(), MemTag::workspace, device, /*zero=*/false);
  copy_bytes(buffer.data(), device, t.data, t.device, t.bytes());
  Tensor view = buffer.view(t.dtype, t.shape);
  return {std::move(buffer), view};
}

OwnedTensor to_gpu(const Tensor& t, int64_t offset) {
  const size_t offset_bytes = static_cast<size_t>(offset) * dtype_size(t.dtype);
  Buffer buffer(t.bytes() + offset_bytes, MemTag::workspace, Device::cuda, /*zero=*/false);
  const Tensor view = buffer.view(t.dtype, t.shape, offset_bytes);
  copy_bytes(view.data, Device::cuda, t.data, Device::cpu, t.bytes());
  return {std::move(buffer), view};
}

OwnedTensor to_host(const Tensor& t) { return copy_to(t, Device::cpu); }

OwnedTensor random_values(DType dtype, Shape shape, uint64_t seed, double std, double mean) {
  if (is_16bit(dtype)) return random_storage(dtype, shape, seed, std, mean);
  return random_normal(dtype, shape, seed, std, mean);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.bytes() == b.bytes() && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

std::vector<double> values(const Tensor& t) {
  if (is_16bit(t.dtype)) return values(widened(t).t);
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = element(t, i);
  return out;
}

double max_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.dtype, expected.dtype);
  const auto wide = [](const Tensor& t) { return is_16bit(t.dtype) ? widened(t) : converted(t, DType::f64); };
  const OwnedTensor a = wide(actual), e = wide(expected);
  double worst = 0, scale = 1e-30;
  for (int64_t i = 0; i < a.t.numel(); ++i) {
    const double d = std::fabs(element(a.t, i) - element(e.t, i));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    scale = std::max(scale, std::fabs(element(e.t, i)));
  }
  return worst / scale;
}

}  // namespace dt::testing
