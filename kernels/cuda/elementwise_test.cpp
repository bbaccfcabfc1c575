// The elementwise CUDA ops (add, accumulate, scale, GELU, SwiGLU, RoPE) against the CPU ops on
// the same inputs, for every storage type, on sizes that are not multiples of the pack width or
// the block, and on views one element off 16-byte alignment (the kernels' unpacked path).
//
// Bounds, with why:
//   add, accumulate, scale   the same bits: one f32 (f64) add or multiply per element on both
//                            sides, and the same round-to-nearest-even store.
//   GELU, SwiGLU             f32 within 1e-6 (forward) and 2e-6 (backward) of the largest
//                            magnitude: CUDA's expf and the CPU's vectorized Cephes expf are each
//                            within 2 ulp, and the few products after them may be fused (FMA)
//                            differently, so a few f32 ulps of the largest term. f64 within 1e-14.
//   RoPE                     f32 within 1e-6 of the largest magnitude: a * c - b * s may be fused
//                            on one side and not the other (one ulp of the larger product).
//   16-bit storage           within one ulp of the storage type at the largest magnitude (2^-7
//                            bf16, 2^-10 f16): both sides round f32 values that agree to a few f32
//                            ulps, so a rounding can fall on either side of a tie.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/device.h"
#include "kernels/add.h"
#include "kernels/gelu.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::kAllStorage;
using testing::max_error;
using testing::OwnedTensor;
using testing::random_values;
using testing::same_bits;
using testing::to_gpu;
using testing::to_host;

// One ulp of the storage at the largest magnitude for 16-bit, else the f32 or f64 bound (see the top).
double bound_for(DType d, double f32_bound, double f64_bound = 1e-14) {
  switch (d) {
    case DType::bf16:
      return 0x1p-7;
    case DType::f16:
      return 0x1p-10;
    case DType::f64:
      return f64_bound;
    default:
      return f32_bound;
  }
}

// 37 * 53: no multiple of any pack width (2, 4, 8) or block; 4 * 1024: whole packs only.
const std::vector<Shape> kShapes = {{37, 53}, {4, 1024}, {1}};

TEST(CudaAdd, MatchesTheCpuBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kShapes)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(offset));
        const OwnedTensor a = random_values(dtype, shape, 1), b = random_values(dtype, shape, 2, 0.1);
        const OwnedTensor cpu_out = testing::zeros(dtype, shape);
        add_forward(cpu_out.t, a.t, b.t);
        const OwnedTensor ga = to_gpu(a.t, offset), gb = to_gpu(b.t, offset), gout = to_gpu(cpu_out.t, offset);
        add_forward(gout.t, ga.t, gb.t);
        EXPECT_TRUE(same_bits(to_host(gout.t).t, cpu_out.t));
        // In place, out aliasing a (the residual stream).
        add_forward(ga.t, ga.t, gb.t);
        EXPECT_TRUE(same_bits(to_host(ga.t).t, cpu_out.t));

        // accumulate: dst += src, then scale: dst *= factor.
        accumulate(cpu_out.t, b.t);
        accumulate(gout.t, gb.t);
        EXPECT_TRUE(same_bits(to_host(gout.t).t, cpu_out.t));
        scale(cpu_out.t, 0.3);
        scale(gout.t, 0.3);
        EXPECT_TRUE(same_bits(to_host(gout.t).t, cpu_out.t));
      }
}

TEST(CudaAdd, EmptyTensorsAreNoOps) {
  DT_SKIP_WITHOUT_CUDA();
  const Tensor empty{nullptr, DType::f32, {0, 7}, Device::cuda};
  EXPECT_NO_THROW(add_forward(empty, empty, empty));
  EXPECT_NO_THROW(accumulate(empty, empty));
  EXPECT_NO_THROW(scale(empty, 2.0));
  EXPECT_NO_THROW(gelu_forward(empty, empty));
  EXPECT_NO_THROW(gelu_backward(empty, empty, empty));
  synchronize(Device::cuda);
}

TEST(CudaGelu, ForwardAndBackwardMatchTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kShapes)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(offset));
        // std 3: both tails of the sigmoid and the curved middle.
        const OwnedTensor x = random_values(dtype, shape, 3, 3.0), dy = random_values(dtype, shape, 4);
        const OwnedTensor out = testing::zeros(dtype, shape), dx = testing::zeros(dtype, shape);
        gelu_forward(out.t, x.t);
        gelu_backward(dx.t, x.t, dy.t);

        const OwnedTensor gx = to_gpu(x.t, offset), gdy = to_gpu(dy.t, offset);
        const OwnedTensor gout = to_gpu(out.t, offset), gdx = to_gpu(dx.t, offset);
        gelu_forward(gout.t, gx.t);
        gelu_backward(gdx.t, gx.t, gdy.t);
        EXPECT_LE(max_error(to_host(gout.t).t, out.t), bound_for(dtype, 1e-6));
        EXPECT_LE(max_error(to_host(gdx.t).t, dx.t), bound_for(dtype, 2e-6));

        // dinp may alias dout, out may alias inp: the same results.
        gelu_backward(gdy.t, gx.t, gdy.t);
        EXPECT_TRUE(same_bits(to_host(gdy.t).t, to_host(gdx.t).t));
        const OwnedTensor gout_bits = to_host(gout.t);
        gelu_forward(gx.t, gx.t);
        EXPECT_TRUE(same_bits(to_host(gx.t).t, gout_bits.t));
      }
}

TEST(CudaSwiglu, ForwardAndBackwardMatchTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  // F = 37 (no pack width divides it), F = 64 (whole packs), and a (B, T, 2F) input.
  const std::vector<Shape> shapes = {{7, 2 * 37}, {5, 2 * 64}, {2, 3, 2 * 40}};
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : shapes)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(offset));
        Shape out_shape(shape.begin(), shape.end() - 1);
        out_shape.push_back(shape[-1] / 2);
        const OwnedTensor x = random_values(dtype, shape, 5, 2.0), dy = random_values(dtype, out_shape, 6);
        const OwnedTensor out = testing::zeros(dtype, out_shape), dx = testing::zeros(dtype, shape);
        swiglu_forward(out.t, x.t);
        swiglu_backward(dx.t, dy.t, x.t);

        const OwnedTensor gx = to_gpu(x.t, offset), gdy = to_gpu(dy.t, offset);
        const OwnedTensor gout = to_gpu(out.t, offset), gdx = to_gpu(dx.t, offset);
        swiglu_forward(gout.t, gx.t);
        swiglu_backward(gdx.t, gdy.t, gx.t);
        EXPECT_LE(max_error(to_host(gout.t).t, out.t), bound_for(dtype, 1e-6));
        EXPECT_LE(max_error(to_host(gdx.t).t, dx.t), bound_for(dtype, 2e-6));
      }
}

// The value heads' bytes of every row of qkv (B, T, (NH + 2*NKV) * HS): rope must not touch them.
std::vector<unsigned char> value_head_bytes(const Tensor& qkv, int64_t n_head, int64_t n_kv_head) {
  const int64_t W = qkv.dim(2), HS = W / (n_head + 2 * n_kv_head), rows = qkv.numel() / W;
  const size_t element = dtype_size(qkv.dtype);
  const size_t first = static_cast<size_t>((n_head + n_kv_head) * HS) * element, row = static_cast<size_t>(W) * element;
  std::vector<unsigned char> bytes;
  const auto* p = static_cast<const unsigned char*>(qkv.data);
  for (int64_t n = 0; n < rows; ++n) bytes.insert(bytes.end(), p + n * row + first, p + (n + 1) * row);
  return bytes;
}

TEST(CudaRope, ForwardAndBackwardMatchTheCpuAndLeaveValuesAlone) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t B = 2, T = 5, T_max = 8;
  constexpr int kHeads = 4, kKvHeads = 2;  // grouped-query: the key heads are not the query heads
  // HS = 16: HS/2 = 8 fills whole packs for every storage; HS = 6: HS/2 = 3 fills none.
  for (const int head_size : {16, 6})
    for (const DType dtype : kAllStorage)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " HS " + std::to_string(head_size) + " offset " +
                     std::to_string(offset));
        const DType table_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
        const OwnedTensor cos = testing::zeros(table_dtype, {T_max, head_size / 2}),
                          sin = testing::zeros(table_dtype, {T_max, head_size / 2});
        rope_table(cos.t, sin.t, rope_inverse_frequencies(head_size, 10000.0, {}));
        const OwnedTensor gcos = to_gpu(cos.t), gsin = to_gpu(sin.t);

        const Shape shape{B, T, (kHeads + 2 * kKvHeads) * head_size};
        const OwnedTensor original = random_values(dtype, shape, 7), dqkv_original = random_values(dtype, shape, 8);
        const OwnedTensor qkv = to_host(original.t), dqkv = to_host(dqkv_original.t);
        const OwnedTensor gqkv = to_gpu(original.t, offset), gdqkv = to_gpu(dqkv_original.t, offset);
        rope_forward(qkv.t, cos.t, sin.t, kHeads, kKvHeads);
        rope_backward(dqkv.t, cos.t, sin.t, kHeads, kKvHeads);
        rope_forward(gqkv.t, gcos.t, gsin.t, kHeads, kKvHeads);
        rope_backward(gdqkv.t, gcos.t, gsin.t, kHeads, kKvHeads);

        const OwnedTensor got = to_host(gqkv.t), dgot = to_host(gdqkv.t);
        EXPECT_LE(max_error(got.t, qkv.t), bound_for(dtype, 1e-6));
        EXPECT_LE(max_error(dgot.t, dqkv.t), bound_for(dtype, 1e-6));
        EXPECT_EQ(value_head_bytes(got.t, kHeads, kKvHeads), value_head_bytes(original.t, kHeads, kKvHeads));
        EXPECT_EQ(value_head_bytes(dgot.t, kHeads, kKvHeads), value_head_bytes(dqkv_original.t, kHeads, kKvHeads));
      }
}

}  // namespace
}  // namespace dt::kernels
