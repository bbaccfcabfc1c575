// Causal multi-head attention with grouped-query heads, computed flash-attention style.
//
// qkv (B, T, (NH + 2*NKV) * HS): at each position, NH query heads, then NKV key heads, then NKV
// value heads, each HS wide (GPT-2's c_attn output is this with NKV = NH). Query head h reads
// key/value head h / (NH / NKV); NH must be a multiple of NKV.
//
//   S[b, h, i, j] = q[b, i, h] . k[b, j, kv(h)] / sqrt(HS)      for j <= i (causal)
//   P = softmax_j(S)
//   out[b, i, h*HS:(h+1)*HS] = sum_j P[b, h, i, j] v[b, j, kv(h)]           (sets out (B, T, NH*HS))
//   lse[b, h, i] = log sum_j exp(S[b, h, i, j])                             (sets lse (B, NH, T))
//
// Backward sets dqkv (same shape as qkv; every element written, including the K and V parts)
// from dout, recomputing S and P tile by tile from qkv and the saved lse:
//   dP = dout . v,  D[i] = sum_d dout[i, d] * out[i, d],  dS = P * (dP - D) / sqrt(HS)
//   dq = dS @ k,  dk = dS^T @ q,  dv = P^T @ dout
// Neither pass ever holds more than one tile of the T x T scores per thread; nothing of size
// T x T is saved between forward and backward. Deterministic (no floating-point atomics).
//
// Storage (kernels/README.md): qkv, out, dout and dqkv are f32, f64, bf16 or f16, one dtype per
// call; lse is f32 (f64 when the rest is f64). With 16-bit storage the scores, the softmax and
// every product accumulate in f32, and, as flash-attention GPU kernels do, two intermediates
// are rounded to the storage type before their products: P before P.V and P^T.dout, and
// dS = P * (dP - D) (before the 1 / sqrt(HS), from the f32 P) before dS.K and dS^T.Q. out and
// dqkv are rounded once when stored. The row sums of the softmax use the f32 P.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head, int n_kv_head);

namespace cpu {
void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head, int n_kv_head);
}  // namespace cpu

namespace cuda {
void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head, int n_kv_head);
}  // namespace cuda

}  // namespace dt::kernels
