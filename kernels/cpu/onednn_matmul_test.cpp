#include "kernels/cpu/onednn_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace dt::kernels::cpu {
namespace {

// Stored row-major matrices of bf16 or f32 values, with their exact values as doubles.
struct Matrix {
  int64_t rows, cols;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  std::vector<double> exact;
  Matrix(int64_t rows, int64_t cols, uint64_t seed) : rows(rows), cols(cols) {
    const ElementRng rng(seed, "onednn_matmul_test");
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float value = static_cast<float>(rng.normal(i));
      bf16.push_back(float_to_bf16(value));
      f32.push_back(value);
    }
  }
  // The values the product reads: bf16-rounded or f32.
  double at(int64_t r, int64_t c, DType dtype) const {
    return dtype == DType::bf16 ? bf16_to_float(bf16[r * cols + c]) : f32[r * cols + c];
  }
  const void* data(DType dtype) const {
    return dtype == DType::bf16 ? static_cast<const void*>(bf16.data()) : f32.data();
  }
};

struct Case {
  bool trans_a, trans_b;
  DType ab, c;
  bool accumulate;
};

class OneDnnMatmul : public ::testing::TestWithParam<Case> {};

TEST_P(OneDnnMatmul, MatchesAnExactProductOfTheStoredValues) {
  const Case& t = GetParam();
  // Linear layers use oneDNN for bf16 only where the CPU has bf16 units (kernels/cpu/linear.cpp);
  // elsewhere oneDNN 2.6 cannot create the primitive at all, and sgemm serves bf16.
  if (t.ab == DType::bf16 && !onednn_has_native_bf16())
    GTEST_SKIP() << "this CPU has no bf16 units (AVX-512 BF16 or AMX), so oneDNN has no bf16 matmul for it";
  constexpr int64_t M = 37, N = 53, K = 67;
  // Stored as op(X) or its transpose; leading dimensions wider than the matrix.
  const Matrix a = t.trans_a ? Matrix(K, M + 3, 1) : Matrix(M, K + 3, 1);
  const Matrix b = t.trans_b ? Matrix(N, K + 5, 2) : Matrix(K, N + 5, 2);
  const int64_t ldc = N + 7;
  std::vector<float> c(M * ldc, 0.5f);
  std::vector<uint16_t> c16(M * ldc, float_to_bf16(0.5f));
  onednn_matmul(M, N, K, {a.data(t.ab), a.cols, t.trans_a}, {b.data(t.ab), b.cols, t.trans_b}, t.ab,
                t.c == DType::bf16 ? static_cast<void*>(c16.data()) : c.data(), ldc, t.c, t.accumulate);
  double worst = 0, scale = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double expected = t.accumulate ? 0.5 : 0.0;
      for (int64_t k = 0; k < K; ++k)
        expected += (t.trans_a ? a.at(k, m, t.ab) : a.at(m, k, t.ab)) * (t.trans_b ? b.at(n, k, t.ab) : b.at(k, n, t.ab));
      const double got = t.c == DType::bf16 ? bf16_to_float(c16[m * ldc + n]) : c[m * ldc + n];
      worst = std::max(worst, std::fabs(got - expected));
      scale = std::max(scale, std::fabs(expected));
    }
  // fp32 accumulation of 67 unit-normal products: ~sqrt(K)·2^-24 of the scale, far below 1e-5;
  // a bf16 result adds its own rounding: half a unit in the 8th significant bit, up to 2^-8 of
  // the value.
  EXPECT_LE(worst / scale, t.c == DType::bf16 ? 1.0 / 256 + 1e-5 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, OneDnnMatmul,
    ::testing::Values(Case{false, false, DType::bf16, DType::f32, false}, Case{false, true, DType::bf16, DType::f32, false},
                      Case{true, false, DType::bf16, DType::f32, false}, Case{true, true, DType::bf16, DType::f32, false},
                      Case{false, true, DType::bf16, DType::f32, true}, Case{true, false, DType::bf16, DType::f32, true},
                      Case{false, true, DType::bf16, DType::bf16, false}, Case{false, true, DType::f32, DType::f32, true}),
    [](const auto& info) {
      const Case& c = info.param;
      return std::string(c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N") + "_" + std::string(dtype_name(c.ab)) +
             "_to_" + std::string(dtype_name(c.c)) + (c.accumulate ? "_accumulate" : "");
    });

TEST(OneDnnMatmulErrors, UnsupportedDtypeIsRejected) {
  float x = 0;
  EXPECT_THROW(onednn_matmul(1, 1, 1, {&x, 1, false}, {&x, 1, false}, DType::f64, &x, 1, DType::f32, false), Error);
}

}  // namespace
}  // namespace dt::kernels::cpu
