// Causal grouped-query attention (kernels/attention.h) through cuDNN's fused flash attention
// (its SDPA graphs, built with the cuDNN frontend): tensor-core kernels for bf16 and f16, where
// our own kernels (kernels/cuda/attention.cu) are SIMT code. The same function, the same
// layouts (qkv packed per position, out (B, T, NH*HS), lse (B, NH, T) as the natural
// log-sum-exp of the scaled scores, which is cuDNN's softmax statistics), so a forward of one
// can feed a backward of the other. The backward asks cuDNN for its deterministic algorithm:
// runs repeat bit for bit, as with our kernels.
//
// cuDNN takes a call when cudnn_attention_refusal() is empty: 16-bit storage, a whole model's
// heads (query head h reads key/value head h / (NH / NKV); a tensor-parallel rank's phase is
// not expressible), HS a multiple of 8 up to 128, 16-byte aligned buffers, and a graph cuDNN
// supports on this GPU (built once per shape and cached; a refusal is cached with cuDNN's
// reason). kernels/cuda/attention.cu dispatches on it; the SIMT kernels stay the reference the
// tests hold cuDNN to (kernels/cuda/attention_test.cpp).
//
// Ring attention's blocks (kernels/attention_block.h) run on the same graphs with their own
// layouts: q's query columns of a packed qkv against k and v in a separate kv tensor, Tq queries
// and Tk keys, no mask for a full block, the causal one for the diagonal block (Tq == Tk). The
// forward writes the block's own attention, unmerged, and the backward the block's share of
// the gradients, both in the storage dtype: kernels/cuda/attention_block.cu merges and adds them
// into its f32 accumulators. cuDNN's fused backward writes dQ, dK and dV in the storage dtype
// only: its support surface takes 16-bit I/O, and the frontend's graph types the per-query-head
// dK and dV it reduces over a group in q's dtype.
#pragma once

#include <initializer_list>
#include <string>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/attention_block.h"

namespace dt::kernels::cuda {

// Why cuDNN's attention cannot take a forward (backward = false) or backward of qkv's shape and
// dtype with these heads and buffers; empty when it can. Builds (or finds) the graph.
std::string cudnn_attention_refusal(const Tensor& qkv, AttentionHeads heads, bool backward,
                                    std::initializer_list<const void*> buffers);

// cuDNN's forward and backward; the caller has checked the refusal is empty.
void cudnn_attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads);
void cudnn_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads);

// The same for one block: q (B, Tq, (NH + 2*NKV) * HS), kv (B, Tk, 2*NKV*HS). The forward sets
// out_b (B, Tq, NH*HS) in q's dtype and lse_b (B, NH, Tq) f32 to the block's own attention and
// log-sum-exp; the backward, from the whole attention's out (q's dtype) and lse (f32), sets
// dq_b (B, Tq, NH*HS) and dkv_b (kv's shape), in q's dtype, to this block's share. On the compute
// stream; the caller has checked the refusal is empty.
std::string cudnn_attention_block_refusal(const Tensor& q, const Tensor& kv, AttentionHeads heads, BlockMask mask,
                                          bool backward, std::initializer_list<const void*> buffers);
void cudnn_attention_block_forward(Tensor out_b, Tensor lse_b, Tensor q, Tensor kv, AttentionHeads heads,
                                   BlockMask mask);
void cudnn_attention_block_backward(Tensor dq_b, Tensor dkv_b, Tensor dout, Tensor q, Tensor kv, Tensor out,
                                    Tensor lse, AttentionHeads heads, BlockMask mask);

// The cuDNN library's version as cuDNN writes it (91900 for 9.19.0).
int cudnn_version();

// Which kernels take a call, for a benchmark's header: cuDNN's (with its version) where it takes
// the forward and the backward, else `ours` for what it refused, with cuDNN's reason.
std::string attention_kernels_chosen(const std::string& forward_refusal, const std::string& backward_refusal,
                                     const std::string& ours);

}  // namespace dt::kernels::cuda
