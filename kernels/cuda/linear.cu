// The linear layer on the GPU (kernels/linear.h): three GEMMs through cuBLASLt
// (kernels/cuda/cublaslt.h) and a deterministic column sum for the bias gradient.
//
// Row-major tensors as cuBLASLt's column-major matrices: a row-major (R, K) tensor is the
// column-major (K, R) matrix with leading dimension K, its transpose for free. So each
// row-major product is computed as the column-major product of the transposes:
//
//   forward          out(N, OC) = inp(N, C) @ weight(OC, C)^T + bias
//                    out^T (OC, N) = [weight^T (C, OC)]^T @ inp^T (C, N)     m = OC, n = N,  k = C
//   backward_input   dinp(N, C) = dout(N, OC) @ weight(OC, C)
//                    dinp^T (C, N) = weight^T (C, OC) @ dout^T (OC, N)       m = C,  n = N,  k = OC
//   backward_weight  dweight(OC, C) += dout(N, OC)^T @ inp(N, C)
//                    dweight^T (C, OC) += inp^T (C, N) @ [dout^T (OC, N)]^T  m = C,  n = OC, k = N
//
// Precision (kernels/README.md): f32 products use CUBLAS_COMPUTE_32F, never the TF32 compute
// types, so the GPU and the CPU agree to summation order; f64 uses CUBLAS_COMPUTE_64F (the
// finite-difference tests); bf16 and f16 operands accumulate in fp32 (CUBLAS_COMPUTE_32F with
// 16-bit A and B), a 16-bit out or dinp rounded once, dweight an f32 D accumulated with
// beta = 1.
//
// The bias is added by cuBLASLt's bias epilogue. Where cuBLASLt has no bias-epilogue algorithm
// for a problem (f64, or a bias whose address no kernel accepts), out first receives the bias in
// every row and the GEMM adds into it with beta = 1. Either way cuBLASLt may round the product to
// a 16-bit out's type before it adds the bias, and round again: measured on an H200 (CUDA 13.0),
// a bf16 product of (2, 37, 67) x 45 with its bias landed 1.4 bf16 spacings from the exact sum,
// and in a trial build that always took the beta = 1 path, aligned shapes landed up to 7 spacings
// of the result (half a spacing of the larger product) away. PyTorch's addmm takes the same
// epilogue. kernels/cuda/linear_test.cpp bounds the second rounding; a single rounding would take
// an f32 out and a pass of our own to round it, which no measurement has yet asked for.
//
// dbias += column sums of dout: our own two-pass kernel rather than cuBLASLt's BGRADB
// epilogue, because the contract accumulates (+=) where BGRADB sets, because BGRADB's result
// type for 16-bit dout with an f32 dbias is not one cuBLASLt documents, and because a fixed
// order of additions is what makes the GPU run repeat bit for bit. It reads dout once (a few
// percent of the weight-gradient GEMM's time at GPT-2 sizes).
//
// Determinism: cuBLASLt is deterministic for a fixed algorithm on the same GPU and library
// (cublaslt.h), and the algorithm is cached per problem; the column sum has a fixed order.
#include <algorithm>
#include <cstdint>

#include "core/buffer.h"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/linear.h"

namespace dt::kernels::cuda {

namespace {

template <typename S>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<S, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<S, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<S, bf16>)
    return CUDA_R_16BF;
  else
    return CUDA_R_16F;
}

// fp32 accumulation for f32 and the 16-bit types, fp64 for f64.
template <typename S>
constexpr cublasComputeType_t compute_type() {
  return std::is_same_v<S, double> ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
}

// The accumulated gradients' type: f32, or f64 with f64 storage.
template <typename S>
constexpr cudaDataType_t gradient_type() {
  return std::is_same_v<S, double> ? CUDA_R_64F : CUDA_R_32F;
}

constexpr int kThreads = 256;

// out[n, o] = bias[o] for every row n (the stored values, exactly); zero without a bias.
template <typename S>
__global__ void broadcast_bias(S* __restrict__ out, const S* __restrict__ bias, int64_t rows, int64_t OC) {
  const int64_t total = rows * OC;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    out[i] = bias ? bias[i % OC] : S(0.0f);
}

template <typename S>
void fill_rows_with_bias(S* out, const S* bias, int64_t rows, int64_t OC) {
  const int64_t total = rows * OC;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(total, kThreads), 4096));
  broadcast_bias<S><<<blocks, kThreads, 0, compute_stream()>>>(out, bias, rows, OC);
  DT_CUDA_CHECK_LAUNCH();
}

// ---- dbias += column sums of dout (N, OC) -----------------------------------------------
//
// Pass 1: block (32 columns x 8 row lanes) over a chunk of rows; lane ty sums rows
// ty, ty + 8, ... of the chunk for its column (a warp reads 32 adjacent columns of one row),
// and the 8 lanes' sums are added in lane order (column_sum, kernels/cuda/column_partials.cuh,
// as the norms' weight gradients). With one chunk the block adds its sums into dbias directly;
// otherwise it writes partials[chunk, column] and pass 2 adds the chunks in chunk order. The
// number of chunks depends on N alone, so the order does too.
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 64;

template <typename S>
__global__ void __launch_bounds__(kColumnSumColumns* kColumnSumLanes)
    column_sums(const S* __restrict__ dout, int64_t N, int64_t OC, int64_t rows_per_chunk,
                compute_t<S>* __restrict__ partials, compute_t<S>* __restrict__ dbias) {
  using T = compute_t<S>;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColumnSumColumns + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = std::min(N, begin + rows_per_chunk);
  const T total = column_sum<T>(dout, begin, end, OC, column, OC);
  if (threadIdx.y != 0 || column >= OC) return;
  if (gridDim.y == 1)
    dbias[column] += total;
  else
    partials[blockIdx.y * OC + column] = total;
}

template <typename T>
__global__ void add_chunk_sums(const T* __restrict__ partials, int64_t chunks, int64_t OC, T* __restrict__ dbias) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= OC) return;
  T total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partials[c * OC + column];
  dbias[column] += total;
}

template <typename S>
void accumulate_bias_gradient(compute_t<S>* dbias, const S* dout, int64_t N, int64_t OC) {
  using T = compute_t<S>;
  if (N == 0 || OC == 0) return;
  const int64_t chunks = std::min(kMaxChunks, (N + kRowsPerChunk - 1) / kRowsPerChunk);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  Buffer partials;
  if (chunks > 1) partials = Buffer(static_cast<size_t>(chunks * OC) * sizeof(T), MemTag::workspace, Device::cuda,
                                    /*zero=*/false);
  const dim3 grid(static_cast<unsigned>((OC + kColumnSumColumns - 1) / kColumnSumColumns),
                  static_cast<unsigned>(chunks));
  column_sums<S><<<grid, dim3(kColumnSumColumns, kColumnSumLanes), 0, compute_stream()>>>(
      dout, N, OC, rows_per_chunk, static_cast<T*>(partials.data()), dbias);
  DT_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    add_chunk_sums<T><<<blocks_for(OC, kThreads), kThreads, 0, compute_stream()>>>(static_cast<T*>(partials.data()),
                                                                                 chunks, OC, dbias);
    DT_CUDA_CHECK_LAUNCH();
  }
}

// ---- the three GEMMs -------------------------------------------------------------------

template <typename S>
void forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = out.numel() / std::max<int64_t>(OC, 1);
  S* o = storage_ptr<S>(out);
  const S* b = bias.defined() ? storage_ptr<S>(bias) : nullptr;
  if (N == 0 || OC == 0) return;
  if (C == 0) return fill_rows_with_bias(o, b, N, OC);  // an empty product: out = bias (or 0)
  GemmProblem p{
      .a = {.data = weight.data, .type = cuda_type<S>(), .rows = C, .cols = OC, .ld = C, .transposed = true},
      .b = {.data = inp.data, .type = cuda_type<S>(), .rows = C, .cols = N, .ld = C},
      .d = {.data = o, .type = cuda_type<S>(), .rows = OC, .cols = N, .ld = OC},
      .compute = compute_type<S>(),
      .bias = b,
      .bias_type = cuda_type<S>(),
      .op = "linear_forward"};
  // The bias epilogue needs a 16-byte aligned bias on some GPUs (A100), and the heuristic is not
  // told the bias pointer's alignment: a view at another offset takes the fallback directly.
  const bool bias_aligned = b == nullptr || reinterpret_cast<uintptr_t>(b) % 16 == 0;
  if (bias_aligned && try_gemm(p)) return;
  if (!b) throw Error(str(describe(p), ": cuBLASLt has no algorithm for this problem"));
  // No usable bias epilogue: out starts as the bias rows and the GEMM adds into it.
  fill_rows_with_bias(o, b, N, OC);
  p.bias = nullptr;
  p.beta = 1;
  gemm(p);
}

template <typename S>
void backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = dinp.numel() / std::max<int64_t>(C, 1);
  if (N == 0 || C == 0) return;
  if (OC == 0) return fill_rows_with_bias<S>(storage_ptr<S>(dinp), nullptr, N, C);  // dinp = 0
  gemm({.a = {.data = weight.data, .type = cuda_type<S>(), .rows = C, .cols = OC, .ld = C},
        .b = {.data = dout.data, .type = cuda_type<S>(), .rows = OC, .cols = N, .ld = OC},
        .d = {.data = dinp.data, .type = cuda_type<S>(), .rows = C, .cols = N, .ld = C},
        .compute = compute_type<S>(),
        .op = "linear_backward_input"});
}

template <typename S>
void backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  using T = compute_t<S>;
  const int64_t OC = dweight.dim(0), C = dweight.dim(1), N = dout.numel() / std::max<int64_t>(OC, 1);
  if (N == 0) return;  // nothing to add
  if (OC > 0 && C > 0) {
    gemm({.a = {.data = inp.data, .type = cuda_type<S>(), .rows = C, .cols = N, .ld = C},
          .b = {.data = dout.data, .type = cuda_type<S>(), .rows = OC, .cols = N, .ld = OC, .transposed = true},
          .d = {.data = dweight.data, .type = gradient_type<S>(), .rows = C, .cols = OC, .ld = C},
          .compute = compute_type<S>(),
          .beta = 1,  // dweight accumulates
          .op = "linear_backward_weight"});
  }
  if (dbias.defined()) accumulate_bias_gradient<S>(static_cast<T*>(dbias.data), storage_ptr<S>(dout), N, OC);
}

}  // namespace

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  dispatch_storage(weight.dtype, [&]<typename S>() { forward<S>(out, inp, weight, bias); });
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  dispatch_storage(weight.dtype, [&]<typename S>() { backward_input<S>(dinp, dout, weight); });
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() { backward_weight<S>(dweight, dbias, dout, inp); });
}

void linear_backward_bias(Tensor dbias, Tensor dout) {
  dispatch_storage(dout.dtype, [&]<typename S>() {
    const int64_t OC = dbias.dim(0), N = dout.numel() / std::max<int64_t>(OC, 1);
    if (N > 0) accumulate_bias_gradient<S>(static_cast<compute_t<S>*>(dbias.data), storage_ptr<S>(dout), N, OC);
  });
}

}  // namespace dt::kernels::cuda
