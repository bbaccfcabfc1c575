// Linear layer: a GEMM with an optional bias (cblas_sgemm / dgemm on the CPU).
//
//   linear_forward:          out(N, OC)     = inp(N, C) @ weight(OC, C)^T + bias(OC)   (sets out)
//   linear_backward_input:   dinp(N, C)     = dout(N, OC) @ weight(OC, C)               (sets dinp)
//   linear_backward_weight:  dweight(OC, C) += dout(N, OC)^T @ inp(N, C)                (accumulates)
//                            dbias(OC)      += sum_n dout(n, :)                        (accumulates)
//   linear_backward_bias:    dbias(OC)      += sum_n dout(n, :)   alone, for products whose
//                            weight gradient comes from elsewhere (kernels/float8_linear.h)
//
// The input gradient and the weight gradient are separate calls: that is what lets data
// parallelism overlap a bucket's reduction with the rest of backward, and what zero-bubble
// pipeline schedules reorder. bias / dbias may be undefined tensors (no bias).
// inp and out may have any leading shape whose product is N.
//
// Storage (kernels/README.md): inp, out, weight, bias, dinp and dout are all f32, f64, bf16 or
// f16, one dtype per call; dweight and dbias are f32 (f64 when the rest is f64). With 16-bit
// storage the products accumulate in fp32 and each 16-bit output is rounded to nearest even
// once: out = round(inp @ weight^T + bias), the bias added in fp32 before the rounding on the
// CPU; on a GPU cuBLASLt's epilogue may round the product before adding the bias, a second
// rounding (kernels/cuda/linear.cu); dinp = round(dout @ weight); dweight and dbias accumulate
// the fp32 products and column sums of the exactly loaded 16-bit values.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight);
void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp);
void linear_backward_bias(Tensor dbias, Tensor dout);

namespace cpu {
void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight);
void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp);
void linear_backward_bias(Tensor dbias, Tensor dout);
}  // namespace cpu

namespace cuda {
void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight);
void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp);
void linear_backward_bias(Tensor dbias, Tensor dout);
}  // namespace cuda

}  // namespace dt::kernels
