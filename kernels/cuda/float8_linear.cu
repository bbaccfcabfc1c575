// FP8 linear products on the GPU (kernels/float8_linear.h).
//
// Whole-tensor scales: cuBLASLt's FP8 GEMM (sm_89 and later), f32 accumulation, the two
// scale_invs passed as A and B scale pointers. It takes one layout only, "TN": op(A) transposed
// and op(B) not, i.e. both operands with the summed dimension contiguous. Row-major, with K the
// summed dimension:
//   forward          out = X W^T      X (N, C) and W (OC, C): C contiguous in both, as stored
//   backward_input   dinp = DY W      sums over OC: needs W^T (C, OC), a transposed copy
//   backward_weight  dW += DY^T X     sums over N: needs DY^T (OC, N) and X^T (C, N)
// The copies are one pass over the bytes each (Transformer Engine fuses them into the cast; a
// step to take when a GPU measures what they cost). A bf16 out is rounded once from the f32
// sum, the bias added first (cuBLASLt's bias epilogue); dW accumulates in f32.
//
// Tiled operands (the blockwise recipe) and f32 outputs: the operands are dequantized — into
// bf16 where every scale is a power of two (exact: e4m3's 4 and e5m2's 3 significant bits fit
// bf16's 8), else into f32 — and multiplied by kernels/cuda/linear.cu's GEMM: the same f32 sums
// of the same products, at bf16 speed. cuBLASLt's own block scaling (VEC128_32F and
// BLK128x128_32F) is the faster route for tiles, left until a GPU can verify its scale layouts.
#include <optional>

#include "core/buffer.h"
#include "kernels/convert.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/float8_linear.h"
#include "kernels/linear.h"

namespace dt::kernels::cuda {

namespace {

cudaDataType_t fp8_type(const Tensor& t) { return t.dtype == DType::f8e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

// out (C, R) = in (R, C), bytes, through 32 x 32 tiles in shared memory.
__global__ void transpose_bytes(uint8_t* __restrict__ out, const uint8_t* __restrict__ in, int64_t R, int64_t C) {
  __shared__ uint8_t tile[32][33];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32, c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[k][threadIdx.x] = in[r * C + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < R && c < C) out[c * R + r] = tile[threadIdx.x][k];
  }
}

// A workspace tensor with the Buffer that holds it.
struct Scratch {
  Buffer buffer;
  Tensor t;
  Scratch(DType dtype, const Shape& shape)
      : buffer(static_cast<size_t>(shape.numel()) * dtype_size(dtype), MemTag::workspace, Device::cuda, /*zero=*/false),
        t(buffer.view(dtype, shape)) {}
};

// The (R, C) bytes of t, transposed into (C, R).
Scratch transposed(const Tensor& t) {
  const int64_t C = t.dim(-1), R = t.numel() / std::max<int64_t>(C, 1);
  Scratch out(t.dtype, {C, R});
  if (R > 0 && C > 0) {
    const dim3 blocks(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>((R + 31) / 32)), threads(32, 8);
    transpose_bytes<<<blocks, threads, 0, compute_stream()>>>(out.t.ptr<uint8_t>(), t.ptr<uint8_t>(), R, C);
    DT_CUDA_CHECK_LAUNCH();
  }
  return out;
}

const float* scale_of(const Float8Tensor& q) { return q.scale_inv.ptr<float>(); }

// Whether cuBLASLt's FP8 GEMM computes a product of these operands into `result`.
bool fp8_gemm_takes(const Float8Tensor& a, const Float8Tensor& b, DType result) {
  return a.tiles.is_whole() && b.tiles.is_whole() && (result == DType::bf16 || result == DType::f32);
}

// q's values in `dtype`: bf16 where its tiles' scales are powers of two (exact), else f32.
Scratch dequantized(const Float8Tensor& q, DType dtype) {
  Scratch s(dtype, q.data.shape);
  cuda::float8_dequantize(s.t, q);
  return s;
}
DType exact_dtype(const Float8Tensor& a, const Float8Tensor& b) {
  return a.tiles.is_whole() || b.tiles.is_whole() ? DType::f32 : DType::bf16;
}

}  // namespace

void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias) {
  const int64_t OC = weight.data.dim(0), C = weight.data.dim(1), N = out.numel() / std::max<int64_t>(OC, 1);
  if (N == 0 || OC == 0) return;
  if (fp8_gemm_takes(inp, weight, out.dtype) && out.dtype == DType::bf16 && C > 0) {
    gemm({.a = {.data = weight.data.data, .type = fp8_type(weight.data), .rows = C, .cols = OC, .ld = C,
                .transposed = true},
          .b = {.data = inp.data.data, .type = fp8_type(inp.data), .rows = C, .cols = N, .ld = C},
          .d = {.data = out.data, .type = CUDA_R_16BF, .rows = OC, .cols = N, .ld = OC},
          .bias = bias.defined() ? bias.data : nullptr,
          .bias_type = CUDA_R_16BF,
          .a_scale = scale_of(weight),
          .b_scale = scale_of(inp),
          .op = "float8_linear_forward"});
    return;
  }
  const DType dtype = out.dtype == DType::f32 ? DType::f32 : exact_dtype(inp, weight);
  const Scratch x = dequantized(inp, dtype), w = dequantized(weight, dtype);
  if (dtype == out.dtype) return linear_forward(out, x.t, w.t, bias);
  // Products in f32 into a bf16 out: the bias widened, the sum rounded once.
  std::optional<Scratch> b;
  if (bias.defined()) {
    b.emplace(dtype, bias.shape);
    convert(b->t, bias);
  }
  Scratch result(dtype, out.shape);
  linear_forward(result.t, x.t, w.t, b ? b->t : Tensor{});
  convert(out, result.t);
}

void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight) {
  const int64_t OC = weight.data.dim(0), C = weight.data.dim(1), N = dinp.numel() / std::max<int64_t>(C, 1);
  if (N == 0 || C == 0) return;
  if (fp8_gemm_takes(dout, weight, dinp.dtype) && dinp.dtype == DType::bf16 && OC > 0) {
    const Scratch w_t = transposed(weight.data);  // (C, OC)
    gemm({.a = {.data = w_t.t.data, .type = fp8_type(weight.data), .rows = OC, .cols = C, .ld = OC,
                .transposed = true},
          .b = {.data = dout.data.data, .type = fp8_type(dout.data), .rows = OC, .cols = N, .ld = OC},
          .d = {.data = dinp.data, .type = CUDA_R_16BF, .rows = C, .cols = N, .ld = C},
          .a_scale = scale_of(weight),
          .b_scale = scale_of(dout),
          .op = "float8_linear_backward_input"});
    return;
  }
  const DType dtype = dinp.dtype == DType::f32 ? DType::f32 : exact_dtype(dout, weight);
  const Scratch dy = dequantized(dout, dtype), w = dequantized(weight, dtype);
  if (dtype == dinp.dtype) return linear_backward_input(dinp, dy.t, w.t);
  Scratch result(dtype, dinp.shape);
  linear_backward_input(result.t, dy.t, w.t);
  convert(dinp, result.t);
}

void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp) {
  const int64_t OC = dweight.dim(0), C = dweight.dim(1), N = dout.data.numel() / std::max<int64_t>(OC, 1);
  if (N == 0 || OC == 0 || C == 0) return;
  if (fp8_gemm_takes(dout, inp, DType::f32)) {
    const Scratch x_t = transposed(inp.data), dy_t = transposed(dout.data);  // (C, N), (OC, N)
    gemm({.a = {.data = x_t.t.data, .type = fp8_type(inp.data), .rows = N, .cols = C, .ld = N, .transposed = true},
          .b = {.data = dy_t.t.data, .type = fp8_type(dout.data), .rows = N, .cols = OC, .ld = N},
          .d = {.data = dweight.data, .type = CUDA_R_32F, .rows = C, .cols = OC, .ld = C},
          .beta = 1,  // dweight accumulates
          .a_scale = scale_of(inp),
          .b_scale = scale_of(dout),
          .op = "float8_linear_backward_weight"});
    return;
  }
  const DType dtype = exact_dtype(dout, inp);
  const Scratch dy = dequantized(dout, dtype), x = dequantized(inp, dtype);
  linear_backward_weight(dweight, Tensor{}, dy.t, x.t);
}

}  // namespace dt::kernels::cuda
