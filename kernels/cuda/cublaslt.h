// GEMMs through cuBLASLt, as the CUDA kernels use them (kernels/cuda/linear.cu; attention's
// projections could share it): one handle and one workspace per process, an algorithm chosen
// by cuBLASLt's heuristic once per problem and cached, and every cuBLASLt status turned into a
// dt::Error that names the call and the problem.
//
// cuBLASLt is column-major. A row-major (rows, cols) tensor is the column-major (cols, rows)
// matrix with leading dimension cols, so a row-major product is written as the column-major
// product of the transposes (kernels/cuda/linear.cu spells out each mapping).
//
// Determinism: for a fixed algorithm, cuBLASLt gives the same bits on every run on GPUs of the
// same architecture and SM count with the same library version; the heuristic's choice is
// itself a pure function of the problem description (shapes, types, epilogue, pointer
// alignments), all of which are in the cache key, so a run repeats bit for bit. Split-K is
// allowed only with the reduction scheme that keeps the parts in the compute type and adds
// them in a separate step: a fixed order, no floating-point atomics, and a 16-bit D still
// rounded once (the in-place and output-type schemes would round each part to bf16/f16).
//
// Included only by kernels/cuda/*.cu. All work is queued on the compute stream. Thread-safe.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace dt::kernels::cuda {

// Throws dt::Error naming the cuBLASLt call, its status and `problem` (the shapes).
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const std::string& problem,
                                     const char* file, int line);

// Checks a cuBLASLt call; `problem` is evaluated only on failure.
#define DT_CUBLAS_CHECK(call, problem)                                                            \
  do {                                                                                            \
    const cublasStatus_t dt_cublas_status_ = (call);                                              \
    if (dt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::dt::kernels::cuda::throw_cublas_error(dt_cublas_status_, #call, (problem), __FILE__, __LINE__); \
  } while (0)

// One column-major operand as stored: `rows` x `cols` with leading dimension `ld` (>= rows),
// entering the product as itself or, with `transposed`, as its transpose.
struct MatrixOperand {
  const void* data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
  bool transposed = false;
};

// The result, column-major rows x cols, leading dimension ld; also read as C when beta != 0.
struct MatrixResult {
  void* data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
};

// D = alpha * op(A) @ op(B) + beta * D, then + bias[row] for every column when `bias` is set
// (cuBLASLt's bias epilogue: added to the fp32 accumulator before a 16-bit D is rounded).
// op(A) is (m, k), op(B) is (k, n), D is (m, n).
struct GemmProblem {
  MatrixOperand a, b;
  MatrixResult d;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // never the TF32 kinds: fp32 stays fp32
  double alpha = 1, beta = 0;                        // passed in the scale type of `compute`
  const void* bias = nullptr;                        // length m, of bias_type
  cudaDataType_t bias_type = CUDA_R_32F;
  // FP8 operands' dequantization scales, one f32 each on the device: D = a_scale * b_scale *
  // alpha * op(A) @ op(B) + ... (cuBLASLt's A/B_SCALE_POINTER; FP8 needs op(A) transposed and
  // op(B) not: the "TN" layout).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  const char* op = "gemm";  // the op that asks, for errors ("linear_forward")
};

// "linear_forward: D (3072 x 4, bf16) = A^T (768 x 3072, bf16) @ B (768 x 4, bf16) + bias":
// the problem as cuBLASLt sees it, for error messages.
std::string describe(const GemmProblem& problem);

// Runs the product; false (and nothing queued) when cuBLASLt has no algorithm for it (some
// epilogue and type combinations), so the caller can take another route.
bool try_gemm(const GemmProblem& problem);
// Runs the product; throws, naming the problem, when cuBLASLt has no algorithm for it.
void gemm(const GemmProblem& problem);

}  // namespace dt::kernels::cuda
