#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/float_type.h"
#include "kernels/linear.h"

namespace dt::kernels::cpu {

namespace {

// Row-major C(M, N) = alpha * op(A) @ op(B) + beta * C through sgemm or dgemm.
template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  ensure_blas_ready();
  const auto ta = transpose_a ? CblasTrans : CblasNoTrans, tb = transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  dispatch_float(weight.dtype, [&]<typename T>() {
    const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
    T* o = out.ptr<T>();
    // With a bias, out starts as the bias in every row and the GEMM adds into it (beta = 1):
    // one pass over out instead of a GEMM pass and a separate bias pass.
    if (bias.defined()) {
      const T* b = bias.ptr<T>();
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) std::copy_n(b, OC, o + n * OC);
    }
    gemm<T>(false, true, N, OC, C, T{1}, inp.ptr<T>(), C, weight.ptr<T>(), C, bias.defined() ? T{1} : T{0}, o, OC);
  });
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  dispatch_float(weight.dtype, [&]<typename T>() {
    const int64_t OC = weight.dim(0), C = weight.dim(1), N = dout.numel() / OC;
    gemm<T>(false, false, N, C, OC, T{1}, dout.ptr<T>(), OC, weight.ptr<T>(), C, T{0}, dinp.ptr<T>(), C);
  });
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  dispatch_float(dweight.dtype, [&]<typename T>() {
    const int64_t OC = dweight.dim(0), C = dweight.dim(1), N = inp.numel() / C;
    const T* d = dout.ptr<T>();
    gemm<T>(true, false, OC, C, N, T{1}, d, OC, inp.ptr<T>(), C, T{1}, dweight.ptr<T>(), C);
    if (!dbias.defined()) return;
    // Column sums of dout: each thread owns a range of columns and sums every row for them,
    // so the result does not depend on scheduling.
    T* db = dbias.ptr<T>();
#pragma omp parallel
    {
      const Range cols = split_range(OC, omp_get_num_threads(), omp_get_thread_num());
      for (int64_t n = 0; n < N; ++n) {
        const T* row = d + n * OC;
#pragma omp simd
        for (int64_t o = cols.begin; o < cols.end; ++o) db[o] += row[o];
      }
    }
  });
}

}  // namespace dt::kernels::cpu
