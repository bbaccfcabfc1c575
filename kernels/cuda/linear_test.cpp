// The CUDA linear layer (cuBLASLt) against the exact result of the same inputs (sums in f64):
// forward with and without a bias, the input gradient, and the weight and bias gradients
// accumulating into what is already there; f32, f64, bf16 and f16; shapes that are not
// multiples of any tile or vector width, a leading shape (B, T, C), views that start off a
// 16-byte boundary (cuBLASLt must be told the real alignment), and a tall weight-gradient
// product (k = N large) where cuBLASLt may split k. Each test skips, saying why, without a GPU.
// (The CPU op is held to the exact result by kernels/linear_test.cpp and
// kernels/cpu/onednn_matmul_test.cpp; comparing the GPU with it instead would add the CPU's
// error to every bound: on an H200 machine's Sapphire Rapids CPU, oneDNN's AMX bf16 product with
// a bias landed 3 bf16 spacings from cuBLASLt's, more than one rounding of an f32 sum allows.)
//
// Bounds. Every output element is a dot product of length K (plus a bias or an accumulated
// value), summed by cuBLASLt in its own order in the accumulation type. Rounding errors of such
// a sum grow like sqrt(K) ulps of the magnitudes summed (K ulps in the worst case), so an
// element may be 2 sqrt(K) eps sum_k |a_k b_k| from the exact sum, eps that of the accumulation
// type (fp32 for f32, bf16 and f16; fp64 for f64). That is far below what an index or transpose
// mistake produces (the size of the result itself, ~ sum |a b| / sqrt(K)). A 16-bit output is
// then rounded to the nearest value: half a spacing of the 16-bit type at the result (spacings
// are 2^(e - 7) for bf16 and 2^(e - 10) for f16 in the binade [2^e, 2^(e+1))); the bound allows a
// whole spacing, plus f16's subnormal spacing. With a bias, cuBLASLt's epilogue may round the
// product to the 16-bit type before it adds the bias, and round again (kernels/cuda/linear.cu):
// half a spacing at the product's size more. Measured on an H200 (CUDA 13.0): a bf16 forward of
// (2, 37, 67) x 45 with a bias gave 0.236328125 where the exact sum is 0.2349528, 1.4 spacings
// away (the other cases stayed within one rounding).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;
using testing::random_values;
using testing::same_bits;
using testing::to_gpu;
using testing::to_host;
using testing::values;


// The accumulation type's epsilon; the spacing of 16-bit values at `magnitude` (0 when the output
// is not 16-bit: its rounding is the accumulation's), and their smallest spacing.
double accumulation_eps(DType storage) { return storage == DType::f64 ? DBL_EPSILON : FLT_EPSILON; }
double output_spacing(DType stored, double magnitude) {
  const int significand_bits = stored == DType::bf16 ? 8 : stored == DType::f16 ? 11 : 0;
  if (significand_bits == 0) return 0.0;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0, exponent - significand_bits);
}
double output_floor(DType stored) { return stored == DType::f16 ? std::ldexp(1.0, -24) : 0.0; }

// Compares the GPU result with the exact one element by element against the bound above.
// magnitude[i] = sum_k |a_k b_k| (+ |bias| or |initial value|) for element i; `product`, where
// a bias was added, the exact products alone (the epilogue's first rounding).
void expect_near(const std::vector<double>& exact, const Tensor& gpu_on_host, const std::vector<double>& magnitude,
                 int64_t K, DType storage, const std::string& what, const std::vector<double>* product = nullptr) {
  const std::vector<double> b = values(gpu_on_host);
  ASSERT_EQ(exact.size(), b.size());
  const DType stored = gpu_on_host.dtype;
  const double eps = accumulation_eps(storage), floor = output_floor(stored);
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double first_rounding = product ? output_spacing(stored, std::fabs((*product)[i])) / 2 : 0.0;
    const double bound = 2 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))) * eps * magnitude[i] +
                         first_rounding + output_spacing(stored, std::max(std::fabs(exact[i]), std::fabs(b[i]))) + floor;
    ASSERT_NEAR(b[i], exact[i], bound) << what << " element " << i;
    worst = std::max(worst, std::fabs(b[i] - exact[i]));
  }
  ::testing::Test::RecordProperty(what + " max_abs_difference", std::to_string(worst));
}

// A @ B^T for row-major A (I, K) and B (J, K), in f64, and its magnitudes sum_k |A[i, k]| |B[j, k]|.
struct Products {
  std::vector<double> exact, magnitude;
};
Products products(const std::vector<double>& A, const std::vector<double>& B, int64_t I, int64_t J, int64_t K) {
  Products p{std::vector<double>(static_cast<size_t>(I * J), 0.0), std::vector<double>(static_cast<size_t>(I * J), 0.0)};
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j)
      for (int64_t k = 0; k < K; ++k) {
        p.exact[i * J + j] += A[i * K + k] * B[j * K + k];
        p.magnitude[i * J + j] += std::fabs(A[i * K + k]) * std::fabs(B[j * K + k]);
      }
  return p;
}

// Adds `initial` (an accumulated value, or a bias repeated every `period` elements) to the
// products and its size to their magnitudes.
void add_initial(Products& p, const std::vector<double>& initial) {
  for (size_t i = 0; i < p.exact.size(); ++i) {
    const double v = initial[i % initial.size()];
    p.exact[i] += v;
    p.magnitude[i] += std::fabs(v);
  }
}

// Row-major transpose of an (R, Cn) matrix of doubles.
std::vector<double> transposed(const std::vector<double>& X, int64_t R, int64_t Cn) {
  std::vector<double> out(X.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < Cn; ++c) out[c * R + r] = X[r * Cn + c];
  return out;
}

struct LinearCase {
  Shape inp;  // (..., C)
  int64_t OC;
  bool bias;
};

const LinearCase kCases[] = {
    {{2, 37, 67}, 45, true},   // a (B, T, C) input; nothing a multiple of 8
    {{128, 256}, 192, true},   // aligned shapes: the bias epilogue
    {{128, 256}, 192, false},  // no bias
    {{3, 5}, 1, true},         // one output channel
    {{8192, 64}, 96, true},    // k = N = 8192 in the weight gradient: split-k territory
};

std::string name_of(const LinearCase& c, DType dtype, bool misaligned) {
  return std::string(dtype_name(dtype)) + " inp " + c.inp.to_string() + " OC " + std::to_string(c.OC) +
         (c.bias ? " bias" : " no bias") + (misaligned ? " misaligned" : "");
}

void run_case(const LinearCase& c, DType dtype, bool misaligned) {
  const int64_t C = c.inp[-1], N = c.inp.numel() / C, OC = c.OC;
  const DType grad_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  Shape out_shape(c.inp.begin(), c.inp.end() - 1);
  out_shape.push_back(OC);
  const std::string name = name_of(c, dtype, misaligned);
  const int64_t offset = misaligned ? 1 : 0;  // elements off a 16-byte boundary

  const OwnedTensor inp = random_values(dtype, c.inp, 1);
  const OwnedTensor weight = random_values(dtype, {OC, C}, 2, 1.0 / std::sqrt(static_cast<double>(C)));
  const OwnedTensor bias = c.bias ? random_values(dtype, {OC}, 3) : OwnedTensor{};
  const OwnedTensor dout = random_values(dtype, out_shape, 4);
  const OwnedTensor dweight0 = testing::random_normal(grad_dtype, {OC, C}, 5);
  const OwnedTensor dbias0 = testing::random_normal(grad_dtype, {OC}, 6);
  const std::vector<double> x = values(inp.t), w = values(weight.t), dy = values(dout.t);

  // forward: out(N, OC) = inp @ weight^T + bias.
  {
    const OwnedTensor g_inp = to_gpu(inp.t, offset), g_weight = to_gpu(weight.t, offset);
    const OwnedTensor g_bias = c.bias ? to_gpu(bias.t, offset) : OwnedTensor{};
    const OwnedTensor g_out = to_gpu(testing::zeros(dtype, out_shape).t, offset);
    linear_forward(g_out.t, g_inp.t, g_weight.t, g_bias.t);
    Products expected = products(x, w, N, OC, C);
    const std::vector<double> product = expected.exact;
    if (c.bias) add_initial(expected, values(bias.t));
    expect_near(expected.exact, to_host(g_out.t).t, expected.magnitude, C, dtype, "forward " + name,
                c.bias ? &product : nullptr);
    // Twice: the same bits.
    const OwnedTensor first = to_host(g_out.t);
    linear_forward(g_out.t, g_inp.t, g_weight.t, g_bias.t);
    EXPECT_TRUE(same_bits(first.t, to_host(g_out.t).t)) << "forward repeats, " << name;
  }

  // backward_input: dinp(N, C) = dout @ weight.
  {
    const OwnedTensor g_dout = to_gpu(dout.t, offset), g_weight = to_gpu(weight.t, offset);
    const OwnedTensor g_dinp = to_gpu(testing::zeros(dtype, c.inp).t, offset);
    linear_backward_input(g_dinp.t, g_dout.t, g_weight.t);
    const Products expected = products(dy, transposed(w, OC, C), N, C, OC);
    expect_near(expected.exact, to_host(g_dinp.t).t, expected.magnitude, OC, dtype, "backward_input " + name);
  }

  // backward_weight: dweight(OC, C) += dout^T @ inp; dbias += column sums of dout.
  {
    const OwnedTensor g_dout = to_gpu(dout.t, offset), g_inp = to_gpu(inp.t, offset);
    const OwnedTensor g_dweight = to_gpu(dweight0.t, offset), g_dbias = to_gpu(dbias0.t, offset);
    const Tensor g_dbias_or_none = c.bias ? g_dbias.t : Tensor{};
    linear_backward_weight(g_dweight.t, g_dbias_or_none, g_dout.t, g_inp.t);

    Products expected = products(transposed(dy, N, OC), transposed(x, N, C), OC, C, N);
    add_initial(expected, values(dweight0.t));
    expect_near(expected.exact, to_host(g_dweight.t).t, expected.magnitude, N, dtype, "backward_weight dweight " + name);
    if (c.bias) {
      // Column sums: dout^T @ ones.
      Products column = products(transposed(dy, N, OC), std::vector<double>(static_cast<size_t>(N), 1.0), OC, 1, N);
      add_initial(column, values(dbias0.t));
      expect_near(column.exact, to_host(g_dbias.t).t, column.magnitude, N, dtype, "backward_weight dbias " + name);
    } else {
      EXPECT_TRUE(same_bits(to_host(g_dbias.t).t, dbias0.t)) << "dbias untouched without a bias, " << name;
    }

    // Accumulating again from the same start gives the same bits: the algorithm is cached and
    // the column sum has a fixed order.
    const OwnedTensor first_dweight = to_host(g_dweight.t), first_dbias = to_host(g_dbias.t);
    copy_bytes(g_dweight.t.data, Device::cuda, dweight0.t.data, Device::cpu, dweight0.t.bytes());
    copy_bytes(g_dbias.t.data, Device::cuda, dbias0.t.data, Device::cpu, dbias0.t.bytes());
    linear_backward_weight(g_dweight.t, g_dbias_or_none, g_dout.t, g_inp.t);
    EXPECT_TRUE(same_bits(first_dweight.t, to_host(g_dweight.t).t)) << "dweight repeats, " << name;
    EXPECT_TRUE(same_bits(first_dbias.t, to_host(g_dbias.t).t)) << "dbias repeats, " << name;
  }
}

TEST(CudaLinear, Float32MatchesTheExactProducts) {
  DT_SKIP_WITHOUT_CUDA();
  for (const LinearCase& c : kCases)
    for (const bool misaligned : {false, true}) run_case(c, DType::f32, misaligned);
}

TEST(CudaLinear, BFloat16MatchesTheExactProducts) {
  DT_SKIP_WITHOUT_CUDA();
  for (const LinearCase& c : kCases)
    for (const bool misaligned : {false, true}) run_case(c, DType::bf16, misaligned);
}

TEST(CudaLinear, Float16MatchesTheExactProducts) {
  DT_SKIP_WITHOUT_CUDA();
  for (const LinearCase& c : kCases)
    for (const bool misaligned : {false, true}) run_case(c, DType::f16, misaligned);
}

TEST(CudaLinear, Float64MatchesTheExactProducts) {
  DT_SKIP_WITHOUT_CUDA();
  for (const LinearCase& c : kCases) run_case(c, DType::f64, /*misaligned=*/false);
}

// An empty batch (N = 0) launches nothing and leaves the accumulated gradients alone.
TEST(CudaLinear, EmptyBatchLeavesGradientsAlone) {
  DT_SKIP_WITHOUT_CUDA();
  const OwnedTensor inp = to_gpu(testing::zeros(DType::f32, {0, 16}).t);
  const OwnedTensor dout = to_gpu(testing::zeros(DType::f32, {0, 8}).t);
  const OwnedTensor dweight0 = testing::random_normal(DType::f32, {8, 16}, 1);
  const OwnedTensor dbias0 = testing::random_normal(DType::f32, {8}, 2);
  const OwnedTensor dweight = to_gpu(dweight0.t), dbias = to_gpu(dbias0.t);
  linear_backward_weight(dweight.t, dbias.t, dout.t, inp.t);
  EXPECT_TRUE(same_bits(to_host(dweight.t).t, dweight0.t));
  EXPECT_TRUE(same_bits(to_host(dbias.t).t, dbias0.t));
}

}  // namespace
}  // namespace dt::kernels
