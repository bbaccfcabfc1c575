// FP8 quantization on the GPU against the CPU (kernels/float8.h): the same bytes and scales,
// for whole tensors and every tile shape, from f32 and bf16, with values that saturate.
#include "kernels/float8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/convert.h"
#include "tests/cuda_testing.h"

namespace dt::kernels {
namespace {

// x with a spread of magnitudes, a few beyond any scale's reach (infinity saturates).
testing::OwnedTensor spread(DType dtype, Shape shape, uint64_t seed) {
  testing::OwnedTensor x = testing::random_values(DType::f32, shape, seed);
  float* p = x.ptr<float>();
  for (int64_t i = 0; i < x.t.numel(); ++i) p[i] *= std::ldexp(1.0f, static_cast<int>(i % 23) - 11);
  p[7] = INFINITY;
  p[x.t.numel() - 3] = -INFINITY;
  if (dtype == DType::f32) return x;
  testing::OwnedTensor narrowed = testing::zeros(dtype, shape);
  convert(narrowed.t, x.t);
  return narrowed;
}

void expect_same_bytes(const Tensor& gpu, const Tensor& cpu, const char* what) {
  const testing::OwnedTensor back = testing::to_host(gpu);
  EXPECT_EQ(std::memcmp(back.t.data, cpu.data, cpu.bytes()), 0) << what;
}

TEST(CudaFloat8, QuantizesAWholeTensorAsTheCpuDoes) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType source : {DType::f32, DType::bf16})
    for (const DType format : {DType::f8e4m3, DType::f8e5m2}) {
      SCOPED_TRACE(str(dtype_name(source), " to ", dtype_name(format)));
      // The scale from a finite tensor's amax, with a margin; then a tensor with infinities
      // quantized by it.
      const testing::OwnedTensor finite = testing::random_values(source, {37, 64}, 10, 30.0);
      const testing::OwnedTensor x = spread(source, {37, 129}, 11);
      testing::OwnedTensor amax = testing::zeros(DType::f32, {1}), scale = testing::zeros(DType::f32, {1});
      *scale.ptr<float>() = 1.0f;
      const testing::OwnedTensor amax_gpu = testing::to_gpu(amax.t), scale_gpu = testing::to_gpu(scale.t);
      float8_amax(amax.t, finite.t);
      float8_scale(scale.t, amax.t, float8_format(format), 1, false);
      const testing::OwnedTensor q = testing::zeros(format, x.t.shape), inv = testing::zeros(DType::f32, {1});
      float8_quantize({q.t, inv.t, {}}, x.t, scale.t);

      const testing::OwnedTensor finite_gpu = testing::to_gpu(finite.t), x_gpu = testing::to_gpu(x.t);
      const testing::OwnedTensor q_gpu = testing::to_gpu(q.t), inv_gpu = testing::to_gpu(inv.t);
      float8_amax(amax_gpu.t, finite_gpu.t);
      float8_scale(scale_gpu.t, amax_gpu.t, float8_format(format), 1, false);
      // Current scaling's fallback, from a zero amax: 1 on both.
      const testing::OwnedTensor zero = testing::zeros(DType::f32, {1}), fallback = testing::zeros(DType::f32, {1});
      const testing::OwnedTensor zero_gpu = testing::to_gpu(zero.t), fallback_gpu = testing::to_gpu(fallback.t);
      float8_scale(fallback.t, zero.t, float8_format(format), 0, false, Float8Fallback::one);
      float8_scale(fallback_gpu.t, zero_gpu.t, float8_format(format), 0, false, Float8Fallback::one);
      expect_same_bytes(fallback_gpu.t, fallback.t, "fallback scale");
      EXPECT_EQ(*fallback.ptr<float>(), 1.0f);
      float8_quantize({q_gpu.t, inv_gpu.t, {}}, x_gpu.t, scale_gpu.t);
      expect_same_bytes(amax_gpu.t, amax.t, "amax");
      // The amax recorded while quantizing (delayed scaling's), with NaN and infinities kept.
      const testing::OwnedTensor recorded = testing::zeros(DType::f32, {1}), recorded_gpu = testing::to_gpu(recorded.t);
      const testing::OwnedTensor q2 = testing::zeros(format, x.t.shape), q2_gpu = testing::to_gpu(q2.t);
      float8_quantize({q2.t, inv.t, {}}, x.t, scale.t, recorded.t);
      float8_quantize({q2_gpu.t, inv_gpu.t, {}}, x_gpu.t, scale_gpu.t, recorded_gpu.t);
      expect_same_bytes(recorded_gpu.t, recorded.t, "recorded amax");
      expect_same_bytes(q2_gpu.t, q.t, "bytes, recording");
      expect_same_bytes(scale_gpu.t, scale.t, "scale");
      expect_same_bytes(q_gpu.t, q.t, "bytes");
      expect_same_bytes(inv_gpu.t, inv.t, "scale_inv");

      const testing::OwnedTensor back = testing::zeros(DType::f32, x.t.shape);
      float8_dequantize(back.t, {q.t, inv.t, {}});
      const testing::OwnedTensor back_gpu = testing::to_gpu(back.t);
      float8_dequantize(back_gpu.t, {q_gpu.t, inv_gpu.t, {}});
      expect_same_bytes(back_gpu.t, back.t, "dequantized");
    }
}

TEST(CudaFloat8, QuantizesTilesAsTheCpuDoes) {
  DT_SKIP_WITHOUT_CUDA();
  for (const Float8Tiles tiles : {Float8Tiles{1, 128}, Float8Tiles{128, 1}, Float8Tiles{128, 128}, Float8Tiles{1, 32}})
    for (const DType source : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(str(tiles.rows, "x", tiles.cols, " from ", dtype_name(source)));
      const testing::OwnedTensor x = spread(source, {2, 128, 256}, 12);
      const Shape scales = float8_scale_shape(x.t.shape, tiles);
      const testing::OwnedTensor q = testing::zeros(DType::f8e4m3, x.t.shape), inv = testing::zeros(DType::f32, scales);
      float8_quantize_tiles({q.t, inv.t, tiles}, x.t);
      const testing::OwnedTensor x_gpu = testing::to_gpu(x.t);
      const testing::OwnedTensor q_gpu = testing::to_gpu(q.t), inv_gpu = testing::to_gpu(inv.t);
      float8_quantize_tiles({q_gpu.t, inv_gpu.t, tiles}, x_gpu.t);
      expect_same_bytes(q_gpu.t, q.t, "bytes");
      expect_same_bytes(inv_gpu.t, inv.t, "scale_inv");
      const testing::OwnedTensor back = testing::zeros(DType::bf16, x.t.shape);
      float8_dequantize(back.t, {q.t, inv.t, tiles});
      const testing::OwnedTensor back_gpu = testing::to_gpu(back.t);
      float8_dequantize(back_gpu.t, {q_gpu.t, inv_gpu.t, tiles});
      expect_same_bytes(back_gpu.t, back.t, "dequantized");
    }
}

TEST(CudaFloat8, KeepsANaNInTheAmax) {
  DT_SKIP_WITHOUT_CUDA();
  testing::OwnedTensor x = testing::random_values(DType::f32, {1000}, 13);
  x.ptr<float>()[500] = NAN;
  const testing::OwnedTensor x_gpu = testing::to_gpu(x.t), amax = testing::to_gpu(testing::zeros(DType::f32, {1}).t);
  float8_amax(amax.t, x_gpu.t);
  EXPECT_TRUE(std::isnan(*testing::to_host(amax.t).ptr<float>()));
}

}  // namespace
}  // namespace dt::kernels
