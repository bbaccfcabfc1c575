// Linear layer on the CPU. f32 and f64 go through cblas_sgemm / dgemm as they always have.
//
// 16-bit storage (bf16, f16; kernels/README.md): products accumulate in fp32 and each 16-bit
// output is rounded once, to nearest even, when stored.
//   bf16, on processors with bf16 units (onednn_has_native_bf16): oneDNN's bf16 matmul (AMX on
//     this project's Xeon); timings below.
//   f16, and bf16 without bf16 units: the operands are widened exactly to f32 into workspace
//     Buffers and multiplied by sgemm; the same numbers as oneDNN up to summation order. oneDNN
//     2.6 (Debian's) has no CPU f16 matmul at all: creating one with f16 source, weights and
//     destination on this Xeon throws "could not create a primitive descriptor iterator".
// oneDNN adds the bias (bf16) to the fp32 accumulator before rounding its bf16 result, as a
// cuBLASLt bias epilogue does. The sgemm path computes into an f32 (N, OC)
// scratch Buffer that starts as the bias rows, then rounds it into out: the same single
// rounding. The scratch (4 * N * OC bytes, 25 MB at 2048 x 3072) and the widened copies of the
// operands live for the call only.
//
// linear_forward (2048 x 768) @ (768 x 3072) + bias, 2 threads, best of 5, four runs of a
// timing loop during development (this shared machine's timings vary 2x between runs; the
// ratios hold; `dtrain bench gemm` measures the bf16 and f32 products reproducibly):
//   f32   sgemm                           25-64 ms   (150-385 GFLOP/s)
//   bf16  oneDNN brg:avx512_core_amx_bf16  3.6-8 ms  (1,200-2,700 GFLOP/s), ~7x f32
//   f16   widened to f32, sgemm            28-61 ms  (f32 plus ~10% for widening and rounding)
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "core/buffer.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/linear_scratch.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/storage.h"
#include "kernels/linear.h"

namespace dt::kernels::cpu {

namespace {

// Row-major C(M, N) = alpha * op(A) @ op(B) + beta * C through sgemm or dgemm.
//
// C is cut into tiles whose size depends on M and N alone, and each tile is one single-threaded
// BLAS call on one OpenMP thread (OpenBLAS runs single-threaded inside a parallel region). Left
// to its own threading, OpenBLAS splits C by the number of threads, and its edge-of-matrix
// kernels sum in a different order from its main kernel, so C's bits would depend on the thread
// count: on an AVX2 EPYC, two training steps of gpt2-tiny ended with different parameters at 1
// and 3 threads (the SkylakeX kernels happened not to show it). Tiles keep a run's bits the same
// for any thread count (train/step_test.cpp). They start at 256 x 256 and are halved, the larger
// side first, down to 64, until there are 32 of them, so that small products still spread over
// the cores; each tile packs its own panels of A and B, (rows + cols) * K values against
// rows * cols * K multiply-adds: at most 1/32 extra memory traffic at 64 x 64.
template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  ensure_blas_ready();
  const auto ta = transpose_a ? CblasTrans : CblasNoTrans, tb = transpose_b ? CblasTrans : CblasNoTrans;
  int64_t rows = 256, cols = 256;
  const auto tiles = [&] { return ((M + rows - 1) / rows) * ((N + cols - 1) / cols); };
  while (tiles() < 32 && std::max(rows, cols) > 64) (rows >= cols ? rows : cols) /= 2;
  const int64_t row_tiles = (M + rows - 1) / rows, col_tiles = (N + cols - 1) / cols;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t rt = 0; rt < row_tiles; ++rt) {
    for (int64_t ct = 0; ct < col_tiles; ++ct) {
      const int64_t r0 = rt * rows, c0 = ct * cols;
      const int64_t m = std::min(rows, M - r0), n = std::min(cols, N - c0);
      // op(A)'s rows r0.. and op(B)'s columns c0..: offsets in the stored (row-major) layouts.
      const T* a = A + (transpose_a ? r0 : r0 * lda);
      const T* b = B + (transpose_b ? c0 * ldb : c0);
      T* c = C + r0 * ldc + c0;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, c, ldc);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, c, ldc);
    }
  }
}

// Whether products of S go through oneDNN (else widened to f32 and sgemm).
template <typename S>
bool use_onednn() {
  return std::is_same_v<S, bf16_t> && onednn_has_native_bf16();
}

// An f32 workspace Buffer of n elements, uninitialized.
Buffer f32_scratch(int64_t n) {
  return Buffer(static_cast<size_t>(n) * sizeof(float), MemTag::workspace, Device::cpu, /*zero=*/false);
}

// The n 16-bit values at p, loaded exactly into a new f32 workspace Buffer.
template <typename S>
Buffer widened(const S* p, int64_t n) {
  Buffer b = f32_scratch(n);
  float* w = static_cast<float*>(b.data());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] = load(p[i]);
  return b;
}

template <typename S>
void store_rounded(S* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) store(dst + i, src[i]);
}

const float* f32_data(const Buffer& b) {
  return static_cast<const float*>(b.data());
}

}  // namespace

size_t linear_scratch_bytes(int64_t rows, int64_t in, int64_t out, DType storage) {
  const bool widened = storage == DType::f16 || (storage == DType::bf16 && !onednn_has_native_bf16());
  return widened ? static_cast<size_t>(rows * out + rows * in + out * in) * sizeof(float) : 0;
}

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  dispatch_storage(weight.dtype, [&]<typename S>() {
    const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
    if constexpr (!is_16bit<S>) {
      using T = S;
      T* o = out.ptr<T>();
      // With a bias, out starts as the bias in every row and the GEMM adds into it (beta = 1):
      // one pass over out instead of a GEMM pass and a separate bias pass.
      if (bias.defined()) {
        const T* b = bias.ptr<T>();
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n) std::copy_n(b, OC, o + n * OC);
      }
      gemm<T>(false, true, N, OC, C, T{1}, inp.ptr<T>(), C, weight.ptr<T>(), C, bias.defined() ? T{1} : T{0}, o, OC);
    } else {
      const S *x = storage_ptr<S>(inp), *w = storage_ptr<S>(weight);
      S* o = storage_ptr<S>(out);
      if (use_onednn<S>()) {
        onednn_matmul(N, OC, C, {x, C, false}, {w, C, true}, DType::bf16, o, OC, DType::bf16, /*accumulate=*/false,
                      bias.defined() ? storage_ptr<S>(bias) : nullptr);
        return;
      }
      // fp32 product (+ bias in fp32), rounded once into out.
      Buffer product = f32_scratch(N * OC);
      float* p = static_cast<float*>(product.data());
      if (bias.defined()) {
        const S* b = storage_ptr<S>(bias);
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t o = 0; o < OC; ++o) p[n * OC + o] = load(b[o]);
      }
      const Buffer xw = widened(x, N * C), ww = widened(w, OC * C);
      gemm<float>(false, true, N, OC, C, 1.0f, f32_data(xw), C, f32_data(ww), C, bias.defined() ? 1.0f : 0.0f, p, OC);
      store_rounded(o, p, N * OC);
    }
  });
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  dispatch_storage(weight.dtype, [&]<typename S>() {
    const int64_t OC = weight.dim(0), C = weight.dim(1), N = dout.numel() / OC;
    if constexpr (!is_16bit<S>) {
      using T = S;
      gemm<T>(false, false, N, C, OC, T{1}, dout.ptr<T>(), OC, weight.ptr<T>(), C, T{0}, dinp.ptr<T>(), C);
    } else {
      const S *d = storage_ptr<S>(dout), *w = storage_ptr<S>(weight);
      S* dx = storage_ptr<S>(dinp);
      if (use_onednn<S>()) {
        onednn_matmul(N, C, OC, {d, OC, false}, {w, C, false}, DType::bf16, dx, C, DType::bf16, /*accumulate=*/false);
        return;
      }
      const Buffer dw = widened(d, N * OC), ww = widened(w, OC * C);
      Buffer product = f32_scratch(N * C);
      float* p = static_cast<float*>(product.data());
      gemm<float>(false, false, N, C, OC, 1.0f, f32_data(dw), OC, f32_data(ww), C, 0.0f, p, C);
      store_rounded(dx, p, N * C);
    }
  });
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    using T = compute_t<S>;  // the gradients' type: f32, or f64 for f64 storage
    const int64_t OC = dweight.dim(0), C = dweight.dim(1), N = inp.numel() / C;
    const S* d = storage_ptr<S>(dout);
    T* dw = dweight.ptr<T>();
    if constexpr (!is_16bit<S>) {
      gemm<T>(true, false, OC, C, N, T{1}, d, OC, inp.ptr<T>(), C, T{1}, dw, C);
    } else if (use_onednn<S>()) {
      onednn_matmul(OC, C, N, {d, OC, true}, {storage_ptr<S>(inp), C, false}, DType::bf16, dw, C, DType::f32,
                    /*accumulate=*/true);
    } else {
      const Buffer dw16 = widened(d, N * OC), xw = widened(storage_ptr<S>(inp), N * C);
      gemm<float>(true, false, OC, C, N, 1.0f, f32_data(dw16), OC, f32_data(xw), C, 1.0f, dw, C);
    }
    if (dbias.defined()) linear_backward_bias(dbias, dout);
  });
}

void linear_backward_bias(Tensor dbias, Tensor dout) {
  dispatch_storage(dout.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t OC = dbias.dim(0), N = dout.numel() / std::max<int64_t>(OC, 1);
    const S* d = storage_ptr<S>(dout);
    // Column sums of dout: each thread owns a range of columns and sums every row for them,
    // so the result does not depend on scheduling.
    T* db = dbias.ptr<T>();
#pragma omp parallel
    {
      const Range cols = split_range(OC, omp_get_num_threads(), omp_get_thread_num());
      for (int64_t n = 0; n < N; ++n) {
        const S* row = d + n * OC;
#pragma omp simd
        for (int64_t o = cols.begin; o < cols.end; ++o) db[o] += load(row[o]);
      }
    }
  });
}

}  // namespace dt::kernels::cpu
