// LayerNorm, RMSNorm and the embeddings on the GPU against the CPU ops on the same inputs, for
// every storage type, on sizes that are not multiples of the pack width or the block, with more
// rows than the backward's 1024 row ranges, and on views one element off 16-byte alignment (the
// kernels' unpacked path).
//
// Bounds, with why:
//   norms, f32        within 1e-5 of the largest magnitude (out, mean, rstd, dinp, dweight,
//                     dbias): the row sums over C and the weight-gradient sums over N run in
//                     another order (warp trees and 1024 row ranges against the CPU's SIMD lanes
//                     and 256 row blocks); each order's rounding error grows like sqrt(terms) *
//                     2^-24 relative to the sum of magnitudes, a few 1e-6 here. f64 within 1e-12.
//   norms, 16-bit     out and dinp within one ulp of the storage at the largest magnitude (2^-7
//                     bf16, 2^-10 f16): both sides round f32 values that agree to ~1e-6, so a
//                     rounding may fall on either side of a tie. The f32 statistics and weight
//                     gradients as for f32.
//   embeddings        the same bits: the forwards copy or add once per element, and the
//                     backwards add each row in the CPU's order (position order per token, batch
//                     order per position), starting from the existing gradient.
// And the weight gradients repeat bit for bit from one GPU run to the next (no atomics).
//
// The fused add_layernorm_forward and add_rmsnorm_forward are checked against the CPU's fused ops
// with the norms' bounds (res, the add alone, has the same bits: one rounding per element on both
// sides), and against the GPU's own add_forward followed by the plain forward bit for bit, which
// is their contract: with res a buffer of its own and res = a, with every tensor aligned or one
// element off, and with only a and b off (the fused kernel's packed path with a and b read
// element by element).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "kernels/add.h"
#include "kernels/dispatch.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::kAllStorage;
using testing::max_error;
using testing::OwnedTensor;
using testing::random_values;
using testing::same_bits;
using testing::to_gpu;
using testing::to_host;

// The bound for a tensor stored as d (see the top): one storage ulp for 16-bit, else f32 or f64.
double bound_for(DType d) {
  switch (d) {
    case DType::bf16:
      return 0x1p-7;
    case DType::f16:
      return 0x1p-10;
    case DType::f64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

// (N, C): C = 37 fits no pack width; N = 2100 rows give the backward's 1024 row ranges two or
// three rows each; C = 1000 whole packs of every width; C = 2052 more packs than a block's 512
// threads, so threads hold 2 to 5 of them in registers (f32 513 packs, f64 1026, bf16/f16 and
// every offset view one element each) and some threads one fewer than others.
const std::vector<Shape> kNormShapes = {{9, 37}, {2100, 40}, {3, 1000}, {3, 2052}};

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheCpuAndRepeatBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kNormShapes)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(offset));
        const DType stats = accumulation_dtype(dtype);
        const int64_t N = shape[0], C = shape[1];
        const OwnedTensor x = random_values(dtype, shape, 1, 1.5, 0.5), w = random_values(dtype, {C}, 2, 1.0, 1.0),
                          b = random_values(dtype, {C}, 3), dy = random_values(dtype, shape, 4);
        const OwnedTensor out = testing::zeros(dtype, shape), mean = testing::zeros(stats, {N}),
                          rstd = testing::zeros(stats, {N});
        layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t);
        const OwnedTensor gx = to_gpu(x.t, offset), gw = to_gpu(w.t, offset), gb = to_gpu(b.t, offset),
                          gdy = to_gpu(dy.t, offset);
        const OwnedTensor gout = to_gpu(out.t, offset), gmean = to_gpu(mean.t), grstd = to_gpu(rstd.t);
        layernorm_forward(gout.t, gmean.t, grstd.t, gx.t, gw.t, gb.t);
        EXPECT_LE(max_error(to_host(gout.t).t, out.t), bound_for(dtype));
        EXPECT_LE(max_error(to_host(gmean.t).t, mean.t), bound_for(stats));
        EXPECT_LE(max_error(to_host(grstd.t).t, rstd.t), bound_for(stats));

        // Backward accumulates: start every gradient from nonzero values. Both sides use the
        // CPU's mean and rstd, so only the backward is compared.
        const OwnedTensor dx0 = random_values(dtype, shape, 5), dw0 = random_values(stats, {C}, 6),
                          db0 = random_values(stats, {C}, 7);
        const OwnedTensor dx = to_host(dx0.t), dw = to_host(dw0.t), db = to_host(db0.t);
        layernorm_backward(dx.t, dw.t, db.t, dy.t, x.t, w.t, mean.t, rstd.t);
        const OwnedTensor cpu_mean = to_gpu(mean.t), cpu_rstd = to_gpu(rstd.t);
        std::vector<OwnedTensor> runs;  // dx, dw, db of two GPU runs
        for (int run = 0; run < 2; ++run) {
          OwnedTensor gdx = to_gpu(dx0.t, offset), gdw = to_gpu(dw0.t), gdb = to_gpu(db0.t);
          layernorm_backward(gdx.t, gdw.t, gdb.t, gdy.t, gx.t, gw.t, cpu_mean.t, cpu_rstd.t);
          runs.push_back(to_host(gdx.t));
          runs.push_back(to_host(gdw.t));
          runs.push_back(to_host(gdb.t));
        }
        EXPECT_LE(max_error(runs[0].t, dx.t), bound_for(dtype));
        EXPECT_LE(max_error(runs[1].t, dw.t), bound_for(stats));
        EXPECT_LE(max_error(runs[2].t, db.t), bound_for(stats));
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(runs[i].t, runs[i + 3].t)) << "gradient " << i;
      }
}

TEST(CudaRmsNorm, ForwardAndBackwardMatchTheCpuAndRepeatBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr float kEps = 1e-5f;
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kNormShapes)
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(offset));
        const DType stats = accumulation_dtype(dtype);
        const int64_t N = shape[0], C = shape[1];
        const OwnedTensor x = random_values(dtype, shape, 11, 1.5, 0.5), w = random_values(dtype, {C}, 12, 1.0, 1.0),
                          dy = random_values(dtype, shape, 13);
        const OwnedTensor out = testing::zeros(dtype, shape), rstd = testing::zeros(stats, {N});
        rmsnorm_forward(out.t, rstd.t, x.t, w.t, kEps);
        const OwnedTensor gx = to_gpu(x.t, offset), gw = to_gpu(w.t, offset), gdy = to_gpu(dy.t, offset);
        const OwnedTensor gout = to_gpu(out.t, offset), grstd = to_gpu(rstd.t);
        rmsnorm_forward(gout.t, grstd.t, gx.t, gw.t, kEps);
        EXPECT_LE(max_error(to_host(gout.t).t, out.t), bound_for(dtype));
        EXPECT_LE(max_error(to_host(grstd.t).t, rstd.t), bound_for(stats));

        const OwnedTensor dx0 = random_values(dtype, shape, 14), dw0 = random_values(stats, {C}, 15);
        const OwnedTensor dx = to_host(dx0.t), dw = to_host(dw0.t);
        rmsnorm_backward(dx.t, dw.t, dy.t, x.t, w.t, rstd.t);
        const OwnedTensor cpu_rstd = to_gpu(rstd.t);
        std::vector<OwnedTensor> runs;  // dx, dw of two GPU runs
        for (int run = 0; run < 2; ++run) {
          OwnedTensor gdx = to_gpu(dx0.t, offset), gdw = to_gpu(dw0.t);
          rmsnorm_backward(gdx.t, gdw.t, gdy.t, gx.t, gw.t, cpu_rstd.t);
          runs.push_back(to_host(gdx.t));
          runs.push_back(to_host(gdw.t));
        }
        EXPECT_LE(max_error(runs[0].t, dx.t), bound_for(dtype));
        EXPECT_LE(max_error(runs[1].t, dw.t), bound_for(stats));
        for (int i = 0; i < 2; ++i) EXPECT_TRUE(same_bits(runs[i].t, runs[i + 2].t)) << "gradient " << i;
      }
}

// Where the fused tests place each tensor: `offset` elements into its allocation for res, out,
// weight and bias, `input_offset` for a and b.
struct Placement {
  int64_t offset, input_offset;
};
constexpr Placement kFusedPlacements[] = {{0, 0}, {1, 1}, {0, 1}};

std::string trace_of(DType dtype, const Shape& shape, Placement at) {
  return std::string(dtype_name(dtype)) + " " + shape.to_string() + " offset " + std::to_string(at.offset) +
         " input offset " + std::to_string(at.input_offset);
}

TEST(CudaLayerNorm, AddLayerNormForwardMatchesTheCpuAndIsTheUnfusedGpuOpsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kNormShapes)
      for (const Placement at : kFusedPlacements) {
        SCOPED_TRACE(trace_of(dtype, shape, at));
        const DType stats = accumulation_dtype(dtype);
        const int64_t N = shape[0], C = shape[1];
        const OwnedTensor a = random_values(dtype, shape, 41, 1.5, 0.5), b = random_values(dtype, shape, 42, 0.5),
                          w = random_values(dtype, {C}, 43, 1.0, 1.0), bias = random_values(dtype, {C}, 44);
        const OwnedTensor zero = testing::zeros(dtype, shape), zero_stats = testing::zeros(stats, {N});
        const OwnedTensor res = testing::zeros(dtype, shape), out = testing::zeros(dtype, shape),
                          mean = testing::zeros(stats, {N}), rstd = testing::zeros(stats, {N});
        add_layernorm_forward(res.t, out.t, mean.t, rstd.t, a.t, b.t, w.t, bias.t);

        const OwnedTensor ga = to_gpu(a.t, at.input_offset), gb = to_gpu(b.t, at.input_offset),
                          gw = to_gpu(w.t, at.offset), gbias = to_gpu(bias.t, at.offset);
        const OwnedTensor gres = to_gpu(zero.t, at.offset), gout = to_gpu(zero.t, at.offset),
                          gmean = to_gpu(zero_stats.t), grstd = to_gpu(zero_stats.t);
        add_layernorm_forward(gres.t, gout.t, gmean.t, grstd.t, ga.t, gb.t, gw.t, gbias.t);
        const OwnedTensor hres = to_host(gres.t), hout = to_host(gout.t), hmean = to_host(gmean.t),
                          hrstd = to_host(grstd.t);
        EXPECT_TRUE(same_bits(hres.t, res.t));
        EXPECT_LE(max_error(hout.t, out.t), bound_for(dtype));
        EXPECT_LE(max_error(hmean.t, mean.t), bound_for(stats));
        EXPECT_LE(max_error(hrstd.t, rstd.t), bound_for(stats));

        const OwnedTensor ures = to_gpu(zero.t, at.offset), uout = to_gpu(zero.t, at.offset),
                          umean = to_gpu(zero_stats.t), urstd = to_gpu(zero_stats.t);
        add_forward(ures.t, ga.t, gb.t);
        layernorm_forward(uout.t, umean.t, urstd.t, ures.t, gw.t, gbias.t);
        const OwnedTensor unfused[] = {to_host(ures.t), to_host(uout.t), to_host(umean.t), to_host(urstd.t)};
        EXPECT_TRUE(same_bits(hres.t, unfused[0].t));
        EXPECT_TRUE(same_bits(hout.t, unfused[1].t));
        EXPECT_TRUE(same_bits(hmean.t, unfused[2].t));
        EXPECT_TRUE(same_bits(hrstd.t, unfused[3].t));

        // res = a: the residual stream updated in place (placed as res, so the unfused pack
        // width is the same).
        const OwnedTensor gres_a = to_gpu(a.t, at.offset), gout_a = to_gpu(zero.t, at.offset),
                          gmean_a = to_gpu(zero_stats.t), grstd_a = to_gpu(zero_stats.t);
        add_layernorm_forward(gres_a.t, gout_a.t, gmean_a.t, grstd_a.t, gres_a.t, gb.t, gw.t, gbias.t);
        EXPECT_TRUE(same_bits(to_host(gres_a.t).t, unfused[0].t));
        EXPECT_TRUE(same_bits(to_host(gout_a.t).t, unfused[1].t));
        EXPECT_TRUE(same_bits(to_host(gmean_a.t).t, unfused[2].t));
        EXPECT_TRUE(same_bits(to_host(grstd_a.t).t, unfused[3].t));
      }
}

TEST(CudaRmsNorm, AddRmsNormForwardMatchesTheCpuAndIsTheUnfusedGpuOpsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr float kEps = 1e-5f;
  for (const DType dtype : kAllStorage)
    for (const Shape& shape : kNormShapes)
      for (const Placement at : kFusedPlacements) {
        SCOPED_TRACE(trace_of(dtype, shape, at));
        const DType stats = accumulation_dtype(dtype);
        const int64_t N = shape[0], C = shape[1];
        const OwnedTensor a = random_values(dtype, shape, 51, 1.5, 0.5), b = random_values(dtype, shape, 52, 0.5),
                          w = random_values(dtype, {C}, 53, 1.0, 1.0);
        const OwnedTensor zero = testing::zeros(dtype, shape), zero_stats = testing::zeros(stats, {N});
        const OwnedTensor res = testing::zeros(dtype, shape), out = testing::zeros(dtype, shape),
                          rstd = testing::zeros(stats, {N});
        add_rmsnorm_forward(res.t, out.t, rstd.t, a.t, b.t, w.t, kEps);

        const OwnedTensor ga = to_gpu(a.t, at.input_offset), gb = to_gpu(b.t, at.input_offset),
                          gw = to_gpu(w.t, at.offset);
        const OwnedTensor gres = to_gpu(zero.t, at.offset), gout = to_gpu(zero.t, at.offset),
                          grstd = to_gpu(zero_stats.t);
        add_rmsnorm_forward(gres.t, gout.t, grstd.t, ga.t, gb.t, gw.t, kEps);
        const OwnedTensor hres = to_host(gres.t), hout = to_host(gout.t), hrstd = to_host(grstd.t);
        EXPECT_TRUE(same_bits(hres.t, res.t));
        EXPECT_LE(max_error(hout.t, out.t), bound_for(dtype));
        EXPECT_LE(max_error(hrstd.t, rstd.t), bound_for(stats));

        const OwnedTensor ures = to_gpu(zero.t, at.offset), uout = to_gpu(zero.t, at.offset),
                          urstd = to_gpu(zero_stats.t);
        add_forward(ures.t, ga.t, gb.t);
        rmsnorm_forward(uout.t, urstd.t, ures.t, gw.t, kEps);
        const OwnedTensor unfused[] = {to_host(ures.t), to_host(uout.t), to_host(urstd.t)};
        EXPECT_TRUE(same_bits(hres.t, unfused[0].t));
        EXPECT_TRUE(same_bits(hout.t, unfused[1].t));
        EXPECT_TRUE(same_bits(hrstd.t, unfused[2].t));

        // res = a: the residual stream updated in place.
        const OwnedTensor gres_a = to_gpu(a.t, at.offset), gout_a = to_gpu(zero.t, at.offset),
                          grstd_a = to_gpu(zero_stats.t);
        add_rmsnorm_forward(gres_a.t, gout_a.t, grstd_a.t, gres_a.t, gb.t, gw.t, kEps);
        EXPECT_TRUE(same_bits(to_host(gres_a.t).t, unfused[0].t));
        EXPECT_TRUE(same_bits(to_host(gout_a.t).t, unfused[1].t));
        EXPECT_TRUE(same_bits(to_host(grstd_a.t).t, unfused[2].t));
      }
}

TEST(CudaNorms, EmptyInputsAreNoOps) {
  DT_SKIP_WITHOUT_CUDA();
  const OwnedTensor w = to_gpu(testing::zeros(DType::f32, {16}).t), dw = to_gpu(testing::zeros(DType::f32, {16}).t);
  const OwnedTensor zero = testing::zeros(DType::f32, {16});
  // Zero rows: views that point somewhere (the forwards refuse out == inp) and are never read.
  const Tensor x{w.t.data, DType::f32, {0, 16}, Device::cuda}, out{dw.t.data, DType::f32, {0, 16}, Device::cuda};
  const Tensor stats{w.t.data, DType::f32, {0}, Device::cuda};
  EXPECT_NO_THROW(layernorm_forward(out, stats, stats, x, w.t, w.t));
  EXPECT_NO_THROW(layernorm_backward(out, dw.t, dw.t, x, x, w.t, stats, stats));
  EXPECT_NO_THROW(rmsnorm_forward(out, stats, x, w.t, 1e-5f));
  EXPECT_NO_THROW(rmsnorm_backward(out, dw.t, x, x, w.t, stats));
  EXPECT_NO_THROW(add_layernorm_forward(x, out, stats, stats, x, x, w.t, w.t));  // res is a and b
  EXPECT_NO_THROW(add_rmsnorm_forward(x, out, stats, x, x, w.t, 1e-5f));
  synchronize(Device::cuda);
  EXPECT_TRUE(same_bits(to_host(dw.t).t, zero.t));  // the weight gradients are left as they were
}

// A thread holds at most 8 packs of a row (kernels/cuda/row_packs.cuh): C = 4097 columns fit no
// pack width, so they are 4,097 packs of one element, past the 4,096 of 512 threads.
TEST(CudaNorms, RowsWiderThanABlockHoldsAreRefusedNamingTheWidth) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t C = 4097;
  const OwnedTensor x = to_gpu(random_values(DType::bf16, {2, C}, 1).t), w = to_gpu(testing::zeros(DType::bf16, {C}).t);
  const OwnedTensor out = to_gpu(testing::zeros(DType::bf16, {2, C}).t), dw = to_gpu(testing::zeros(DType::f32, {C}).t);
  const OwnedTensor stats = to_gpu(testing::zeros(DType::f32, {2}).t);
  for (const auto& [op, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"layernorm_forward", [&] { layernorm_forward(out.t, stats.t, stats.t, x.t, w.t, w.t); }},
           {"layernorm_backward", [&] { layernorm_backward(out.t, dw.t, dw.t, x.t, x.t, w.t, stats.t, stats.t); }},
           {"rmsnorm_forward", [&] { rmsnorm_forward(out.t, stats.t, x.t, w.t, 1e-5f); }},
           {"rmsnorm_backward", [&] { rmsnorm_backward(out.t, dw.t, x.t, x.t, w.t, stats.t); }}}) {
    const std::string message = testing::error_of(call);
    EXPECT_NE(message.find(op + ": rows of C = 4097 columns are wider than the 4096 packs"), std::string::npos)
        << message;
  }
}

// N ids into a (Vp) table: id 0 at every third position (a run of 100, longer than the 32 ids a
// warp scans at once), the rest spread over the other rows with repeats, and row Vp - 1 unused.
OwnedTensor token_ids(int64_t N, int64_t Vp) {
  OwnedTensor ids = testing::zeros(DType::i32, {N});
  for (int64_t n = 0; n < N; ++n)
    ids.ptr<int32_t>()[n] = n % 3 == 0 ? 0 : static_cast<int32_t>(1 + (n * 7) % (Vp - 2));
  return ids;
}

TEST(CudaEmbedding, TokenEmbeddingMatchesTheCpuBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t N = 300, Vp = 50;
  // The ids stay in host memory: the dispatch (kernels/embedding.cpp) reads them there to check
  // their range, and the CUDA op copies them to the device itself.
  const OwnedTensor ids = token_ids(N, Vp);
  for (const DType dtype : kAllStorage)
    for (const int64_t C : {37, 64})
      for (const int64_t offset : {0, 1})
        // The whole table, and a tensor-parallel rank's slice: ids [20, 40), the others outside it.
        for (const int64_t first_id : {0, 20}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(C) + " offset " + std::to_string(offset) +
                       " first id " + std::to_string(first_id));
          const int64_t rows = first_id == 0 ? Vp : 20;
          const DType grad_dtype = accumulation_dtype(dtype);
          const OwnedTensor table = random_values(dtype, {rows, C}, 21), dy = random_values(dtype, {N, C}, 22);
          const OwnedTensor out = testing::zeros(dtype, {N, C});
          embedding_forward(out.t, ids.t, table.t, first_id);
          const OwnedTensor gtable = to_gpu(table.t, offset), gout = to_gpu(testing::zeros(dtype, {N, C}).t, offset);
          embedding_forward(gout.t, ids.t, gtable.t, first_id);
          EXPECT_TRUE(same_bits(to_host(gout.t).t, out.t));

          const OwnedTensor dtable0 = random_values(grad_dtype, {rows, C}, 23);  // accumulates: start nonzero
          const OwnedTensor dtable = to_host(dtable0.t);
          embedding_backward(dtable.t, ids.t, dy.t, first_id);
          const OwnedTensor gdtable = to_gpu(dtable0.t, offset), gdy = to_gpu(dy.t, offset);
          embedding_backward(gdtable.t, ids.t, gdy.t, first_id);
          EXPECT_TRUE(same_bits(to_host(gdtable.t).t, dtable.t));
        }
}

TEST(CudaEmbedding, PositionEmbeddingMatchesTheCpuBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t B = 3, T = 7, L = 10;  // L > T: only the first T rows of wpe are used
  for (const DType dtype : kAllStorage)
    for (const int64_t C : {37, 64})
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(C) + " offset " + std::to_string(offset));
        const DType grad_dtype = accumulation_dtype(dtype);
        const OwnedTensor wpe = random_values(dtype, {L, C}, 31), out0 = random_values(dtype, {B, T, C}, 32),
                          dy = random_values(dtype, {B, T, C}, 33), dwpe0 = random_values(grad_dtype, {L, C}, 34);
        const OwnedTensor out = to_host(out0.t), dwpe = to_host(dwpe0.t);
        position_embedding_forward(out.t, wpe.t);
        position_embedding_backward(dwpe.t, dy.t);
        const OwnedTensor gout = to_gpu(out0.t, offset), gwpe = to_gpu(wpe.t, offset), gdy = to_gpu(dy.t, offset),
                          gdwpe = to_gpu(dwpe0.t, offset);
        position_embedding_forward(gout.t, gwpe.t);
        position_embedding_backward(gdwpe.t, gdy.t);
        EXPECT_TRUE(same_bits(to_host(gout.t).t, out.t));
        EXPECT_TRUE(same_bits(to_host(gdwpe.t).t, dwpe.t));  // rows T..L-1 untouched on both sides
      }
}

}  // namespace
}  // namespace dt::kernels
