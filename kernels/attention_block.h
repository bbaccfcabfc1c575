// Attention of a block of queries against a block of keys and values, merged block by block:
// what ring attention (parallel/context/ring_attention.h) builds a sequence's causal attention
// from when the sequence's chunks are spread over ranks and the keys and values travel.
//
//   q     (B, Tq, (NH + 2*NKV) * HS): a qkv tensor (kernels/attention.h); its query columns are read
//   kv    (B, Tk, 2 * NKV * HS): the key heads, then the value heads, of each position
//   mask  full: every query attends to every key (the keys' chunk lies wholly before the
//         queries'); causal: query i attends to keys j <= i (the same chunk: Tq == Tk)
//
// attention_block_forward merges the block into (out, lse), (B, Tq, NH*HS) and (B, NH, Tq), both
// in the accumulation dtype (f32, f64 for f64): with `first` it sets them; otherwise they hold
// the attention over the blocks so far, normalised, with its log-sum-exp, and become that over
// them and this block (the online softmax across blocks):
//   lse' = log(e^lse + e^lse_b),   out' = out * e^(lse - lse') + out_b * e^(lse_b - lse')
// After every block of the keys a query attends to has been merged, out and lse are the causal
// attention's (kernels/attention.h), up to the rounding of the order.
//
// attention_block_backward, with out (storage dtype) and lse the whole attention's — over every
// block — and dout its gradient, adds this block's share into dq (B, Tq, NH*HS) and dkv
// (B, Tk, 2*NKV*HS), both in the accumulation dtype:
//   P = exp(S - lse), dP = dout . v, D = rowsum(dout * out), dS = P * (dP - D) / sqrt(HS)
//   dq += dS @ k,  dk += dS^T @ q,  dv += P^T @ dout
// Summed over the blocks, these are attention_backward's gradients. Everything inside is in the
// accumulation dtype; 16-bit q, kv, out and dout are widened where read. Deterministic: each
// (sequence, key/value head) is one thread's, with its query heads, in a fixed order.
//
// On a GPU, 16-bit blocks run on cuDNN's fused attention where it takes them
// (kernels/cuda/cudnn_attention.h), which rounds where the CPU and the per-row GPU kernels do
// not: P to the storage type before P.v and dS before its products (as the whole sequence's
// 16-bit attention does, kernels/attention.h), and each block's own out_b and dq, dk, dv once to
// the storage type before they are merged or added: in bf16 half an ulp, up to 2^-9 of each
// element of a block's share (2^-12 in f16), once per block. The merge, lse and the accumulators
// stay f32. Deterministic as well: cuDNN's backward is its deterministic algorithm.
#pragma once

#include <string>

#include "core/tensor.h"
#include "kernels/attention.h"

namespace dt::kernels {

enum class BlockMask { full, causal };

void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first);
void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask);

namespace cpu {
void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first);
void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask);
// The scratch a forward and a backward call over blocks of `queries` query rows allocate for
// `threads` threads (omp_get_max_threads() at the call), in bytes: RingAttention::call_bytes
// counts them.
struct BlockScratchBytes {
  size_t forward = 0, backward = 0;
};
BlockScratchBytes attention_block_scratch_bytes(int64_t queries, int head_size, AttentionHeads heads, DType storage,
                                                int threads);
}  // namespace cpu

namespace cuda {
// cuDNN's fused attention where it takes the block, else the per-row kernels.
void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first);
void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask);
// The per-row kernels alone (kernels/cuda/attention_block.cu): every dtype, head size up to 256
// and head grouping, and the reference cuDNN's blocks are tested against.
void per_row_attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads,
                                     BlockMask mask, bool first);
void per_row_attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out,
                                      Tensor lse, AttentionHeads heads, BlockMask mask);
// Which kernels take a forward and backward of this block's shape, dtype, heads and mask: "cuDNN
// <version> fused attention", or "dtrain's per-row kernels (cuDNN: <why not>)". q and kv need no
// data; a null pointer counts as aligned.
std::string attention_block_kernels(const Tensor& q, const Tensor& kv, AttentionHeads heads, BlockMask mask);
}  // namespace cuda

}  // namespace dt::kernels
