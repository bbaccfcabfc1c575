// Causal multi-head attention with grouped-query heads, computed flash-attention style.
//
// qkv (B, T, (NH + 2*NKV) * HS): at each position, NH query heads, then NKV key heads, then NKV
// value heads, each HS wide (GPT-2's c_attn output is this with NKV = NH). Query head h reads
// key/value head kv(h) = (h + phase) / group (AttentionHeads): h / (NH / NKV) for a whole model.
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

#include <string>

#include "core/tensor.h"

namespace dt::kernels {

// The heads of a call and which key/value head each query head reads: query head h reads
// (h + phase) / group. A whole model's heads ({NH, NKV}): group NH / NKV, phase 0, NH a
// multiple of NKV. A tensor-parallel rank holding the model's query heads [first, first + NH),
// G of which read each key/value head, and the NKV key/value heads they read: group G, phase
// first % G (model/tensor_shard.h) — 2 query heads reading 2 key/value heads of 3 each, say.
struct AttentionHeads {
  int n_head = 0, n_kv_head = 0;
  int group = 1, phase = 0;

  AttentionHeads(int n_head, int n_kv_head)
      : n_head(n_head), n_kv_head(n_kv_head), group(n_kv_head > 0 ? n_head / n_kv_head : 1) {}
  AttentionHeads(int n_head, int n_kv_head, int group, int phase)
      : n_head(n_head), n_kv_head(n_kv_head), group(group), phase(phase) {}
  int kv_of(int h) const { return (h + phase) / group; }
  // The query heads [first_query(g), end_query(g)) that read key/value head g.
  int first_query(int g) const { return g * group - phase > 0 ? g * group - phase : 0; }
  int end_query(int g) const { return (g + 1) * group - phase < n_head ? (g + 1) * group - phase : n_head; }
};

void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads);

namespace cpu {
void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads);
// The scratch the larger of a forward and a backward call over sequences of seq_len allocates for
// `threads` threads (omp_get_max_threads() at the call), in bytes: plan/memory.h counts it.
size_t attention_scratch_bytes(int64_t seq_len, int head_size, AttentionHeads heads, DType storage, int threads);
}  // namespace cpu

namespace cuda {
// cuDNN's fused attention where it takes the call (kernels/cuda/cudnn_attention.h), else ours.
void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads);
void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads);
// Our SIMT flash-attention kernels alone (kernels/cuda/attention.cu): every dtype, head size and
// head grouping, and the reference cuDNN's kernels are tested against.
void simt_attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads);
void simt_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads);
// Which kernels take a forward and backward of this shape, dtype and heads: "cuDNN <version>
// fused flash attention", or "dtrain's SIMT flash attention (cuDNN: <why not>)".
std::string attention_kernels(const Tensor& qkv, AttentionHeads heads);
}  // namespace cuda

}  // namespace dt::kernels
