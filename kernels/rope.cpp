#include "kernels/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks qkv (B, T, (NH + 2*NKV) * HS) and the tables against it; returns HS.
int64_t check(std::string_view op, const Tensor& qkv, const Tensor& cos, const Tensor& sin, int n_head,
              int n_kv_head) {
  expect_storage_dtype(op, qkv);
  DT_CHECK(qkv.ndim() == 3, op, ": qkv is ", qkv.describe(), ", expected (B, T, (NH + 2*NKV) * HS)");
  DT_CHECK(n_head > 0 && n_kv_head > 0, op, ": n_head = ", n_head, ", n_kv_head = ", n_kv_head,
           "; both must be positive");
  const int64_t heads = n_head + 2 * int64_t{n_kv_head};
  DT_CHECK(qkv.dim(2) > 0 && qkv.dim(2) % heads == 0, op, ": qkv is ", qkv.describe(),
           ", its last dim must be (NH + 2*NKV) * HS = ", heads, " * HS for NH = ", n_head, ", NKV = ", n_kv_head);
  const int64_t HS = qkv.dim(2) / heads;
  DT_CHECK(HS % 2 == 0, op, ": head size HS = ", HS, " (qkv ", qkv.describe(), " with NH = ", n_head, ", NKV = ",
           n_kv_head, ") is odd; rotary embedding pairs element i with i + HS/2, so HS must be even");
  // The table stays f32 when qkv is 16-bit: its angles need more than 8 or 11 bits.
  expect_dtype(op, "cos", cos, accumulation_dtype(qkv.dtype), qkv.device);
  expect_dtype(op, "sin", sin, accumulation_dtype(qkv.dtype), qkv.device);
  DT_CHECK(cos.ndim() == 2 && cos.dim(0) >= qkv.dim(1) && cos.dim(1) == HS / 2, op, ": cos is ", cos.describe(),
           ", expected (T_max, HS/2) with T_max >= T = ", qkv.dim(1), " and HS/2 = ", HS / 2);
  expect_shape(op, "sin", sin, cos.shape);
  return HS;
}

}  // namespace

std::vector<float> rope_inverse_frequencies(int head_size, double theta, const RopeScaling& scaling) {
  constexpr std::string_view op = "rope_inverse_frequencies";
  DT_CHECK(head_size > 0 && head_size % 2 == 0, op, ": head_size = ", head_size,
           "; rotary embedding pairs element i with i + HS/2, so the head size must be even and positive");
  DT_CHECK(std::isfinite(theta) && theta > 0, op, ": theta = ", theta, ", expected a finite theta > 0");
  const bool scaled = scaling.factor != 0;
  if (scaled) {
    DT_CHECK(std::isfinite(scaling.factor) && scaling.factor > 0, op, ": scaling factor = ", scaling.factor,
             ", expected 0 (no scaling) or a finite factor > 0");
    DT_CHECK(scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor, op,
             ": low_freq_factor = ", scaling.low_freq_factor, ", high_freq_factor = ", scaling.high_freq_factor,
             "; expected 0 < low_freq_factor < high_freq_factor (they bound the interpolated band)");
    DT_CHECK(scaling.original_max_seq_len > 0, op, ": original_max_seq_len = ", scaling.original_max_seq_len,
             ", expected > 0");
  }
  const double low_freq_wavelen = scaling.original_max_seq_len / scaling.low_freq_factor;
  const double high_freq_wavelen = scaling.original_max_seq_len / scaling.high_freq_factor;
  std::vector<float> inv_freq(static_cast<size_t>(head_size / 2));
  for (int i = 0; i < head_size / 2; ++i) {
    double f = std::pow(theta, -2.0 * i / head_size);
    if (scaled) {
      // Hugging Face's _compute_llama3_parameters, branch for branch (its medium band is
      // high_freq_wavelen <= wavelen <= low_freq_wavelen, both ends included).
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= scaling.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (scaling.original_max_seq_len / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1 - smooth) * f / scaling.factor + smooth * f;
      }
    }
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv_freq;
}

void rope_table(Tensor cos, Tensor sin, const std::vector<float>& inv_freq) {
  constexpr std::string_view op = "rope_table";
  expect_float_dtype(op, cos);
  expect_same_device_and_dtype(op, {cos, sin}, cos.dtype);
  DT_CHECK(cos.device == Device::cpu, op, ": cos is ", cos.describe(),
           "; the table is filled on the host, copy it to the device afterwards");
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  DT_CHECK(half > 0 && cos.ndim() == 2 && cos.dim(1) == half, op, ": cos is ", cos.describe(), ", expected (T_max, ",
           half, ") for ", half, " inverse frequencies (HS/2)");
  expect_shape(op, "sin", sin, cos.shape);
  const int64_t rows = cos.dim(0);
  const auto fill = [&]<typename T>(T* c, T* s) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t i = 0; i < half; ++i) {
        // The product of two floats is exact in double, so this is the f32 product that
        // Hugging Face takes the cosine of, rounded once.
        const float angle =
            static_cast<float>(static_cast<double>(static_cast<float>(t)) * inv_freq[static_cast<size_t>(i)]);
        c[t * half + i] = static_cast<T>(std::cos(static_cast<double>(angle)));
        s[t * half + i] = static_cast<T>(std::sin(static_cast<double>(angle)));
      }
  };
  if (cos.dtype == DType::f64) fill(cos.ptr<double>(), sin.ptr<double>());
  else fill(cos.ptr<float>(), sin.ptr<float>());
}

void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  check("rope_forward", qkv, cos, sin, n_head, n_kv_head);
  DT_DISPATCH_DEVICE(rope_forward, qkv.device, qkv, cos, sin, n_head, n_kv_head);
}

void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  check("rope_backward", dqkv, cos, sin, n_head, n_kv_head);
  DT_DISPATCH_DEVICE(rope_backward, dqkv.device, dqkv, cos, sin, n_head, n_kv_head);
}

}  // namespace dt::kernels
