// Matrix products through oneDNN, for the 16-bit GEMMs of mixed precision.
//
//   C(M, N) = op(A)(M, K) @ op(B)(K, N)            (accumulate: C += ...)
//   C(M, N) = op(A) @ op(B) + bias(N)              (with a bias: added to every row)
//
// Row-major, with leading dimensions as in BLAS; op(X) is X or its transpose. A and B are both
// f32 or both bf16; C is f32 or bf16; products are accumulated in fp32 either way. The bias, if
// any, is N elements of ab_dtype, added in fp32 to the accumulated product before C is rounded. On
// processors with AMX or AVX-512 BF16, oneDNN runs bf16 on those units: on this project's Xeon
// (AMX), a 2048 x 768 x 2304 bf16 product ran 16x faster than OpenBLAS's sgemm on one core
// (`dtrain bench gemm` measures it for a model's shapes).
//
// Primitives are cached by oneDNN itself (its primitive cache), so repeated shapes pay for
// creation once. Runs on the OpenMP threads the rest of the CPU kernels use.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dt::kernels::cpu {

struct MatmulOperand {
  const void* data;
  int64_t ld;          // leading dimension of the stored (row-major) matrix
  bool transposed;     // the stored matrix is op(X)^T
};

void onednn_matmul(int64_t M, int64_t N, int64_t K, MatmulOperand a, MatmulOperand b, DType ab_dtype, void* c,
                   int64_t ldc, DType c_dtype, bool accumulate, const void* bias = nullptr);

// Whether oneDNN runs bf16 products on dedicated units (AMX or AVX-512 BF16) on this processor.
bool onednn_has_native_bf16();

}  // namespace dt::kernels::cpu
