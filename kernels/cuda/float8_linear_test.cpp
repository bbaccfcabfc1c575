// FP8 linear products on the GPU (cuBLASLt's FP8 GEMM for whole-tensor scales, dequantized bf16
// products for tiles) against the CPU's emulation, on the same quantized bytes: both sum the
// same exact products in f32, so they differ by f32 summation order, and a bf16 result by at
// most one rounding step where that order moves it across a rounding boundary.
#include "kernels/float8_linear.h"

#include <gtest/gtest.h>

#include "kernels/convert.h"
#include "tests/cuda_testing.h"
#include "tests/float8_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::Quantized;
using testing::quantize;

Quantized on_gpu(const Quantized& q) { return {testing::to_gpu(q.data.t), testing::to_gpu(q.scale_inv.t), q.tiles}; }

TEST(CudaFloat8Linear, EqualsTheCpuEmulation) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t N = 256, C = 256, OC = 384;
  for (const int64_t B : {0, 128}) {
    SCOPED_TRACE(B == 0 ? "whole tensors" : "128 tiles");
    const Float8Tiles rows = B ? Float8Tiles{1, B} : Float8Tiles{}, cols = B ? Float8Tiles{B, 1} : Float8Tiles{};
    const Float8Tiles square = B ? Float8Tiles{B, B} : Float8Tiles{};
    const testing::OwnedTensor x = testing::random_values(DType::bf16, {N, C}, 1, 3.0);
    const testing::OwnedTensor w = testing::random_values(DType::bf16, {OC, C}, 2, 0.05);
    const testing::OwnedTensor dy = testing::random_values(DType::bf16, {N, OC}, 3, 1e-3);
    const testing::OwnedTensor bias = testing::random_values(DType::bf16, {OC}, 4);
    const Quantized xq = quantize(x.t, DType::f8e4m3, rows), wq = quantize(w.t, DType::f8e4m3, square);
    const Quantized dyq = quantize(dy.t, DType::f8e5m2, rows);
    const Quantized xc = quantize(x.t, DType::f8e4m3, cols), dyc = quantize(dy.t, DType::f8e5m2, cols);

    const testing::OwnedTensor out = testing::zeros(DType::bf16, {N, OC}), dinp = testing::zeros(DType::bf16, {N, C});
    const testing::OwnedTensor dw = testing::random_values(DType::f32, {OC, C}, 5);
    const testing::OwnedTensor out_gpu = testing::to_gpu(out.t), dinp_gpu = testing::to_gpu(dinp.t);
    const testing::OwnedTensor dw_gpu = testing::to_gpu(dw.t), bias_gpu = testing::to_gpu(bias.t);
    float8_linear_forward(out.t, xq.q(), wq.q(), bias.t);
    float8_linear_backward_input(dinp.t, dyq.q(), wq.q());
    float8_linear_backward_weight(dw.t, dyc.q(), xc.q());
    const Quantized xg = on_gpu(xq), wg = on_gpu(wq), dyg = on_gpu(dyq), xcg = on_gpu(xc), dycg = on_gpu(dyc);
    float8_linear_forward(out_gpu.t, xg.q(), wg.q(), bias_gpu.t);
    float8_linear_backward_input(dinp_gpu.t, dyg.q(), wg.q());
    float8_linear_backward_weight(dw_gpu.t, dycg.q(), xcg.q());
    EXPECT_LE(testing::max_ulp_distance(testing::to_host(out_gpu.t).t, out.t), 1);
    EXPECT_LE(testing::max_ulp_distance(testing::to_host(dinp_gpu.t).t, dinp.t), 1);
    // 256 exact products summed in f32 in two orders: within 256 roundings of the sum's scale.
    EXPECT_LT(testing::max_error(testing::to_host(dw_gpu.t).t, dw.t), 256 * 6e-8);
    if (B == 0) continue;
    // The experts' weight gradient, on the rows' (1, B) tiles (model/float8_grouped_linear.h).
    const testing::OwnedTensor dw_rows = testing::random_values(DType::f32, {OC, C}, 6);
    const testing::OwnedTensor dw_rows_gpu = testing::to_gpu(dw_rows.t);
    float8_linear_backward_weight(dw_rows.t, dyq.q(), xq.q());
    float8_linear_backward_weight(dw_rows_gpu.t, dyg.q(), xg.q());
    EXPECT_LT(testing::max_error(testing::to_host(dw_rows_gpu.t).t, dw_rows.t), 256 * 6e-8);
  }
}

}  // namespace
}  // namespace dt::kernels
