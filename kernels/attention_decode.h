// Attention of the newest positions against a key/value cache: the attention core of text
// generation (model/inference.h), where keys and values of earlier positions are kept rather
// than recomputed.
//
// kv (T, 2*NKV*HS) holds, for positions 0..T-1, the NKV key heads then the NKV value heads: a
// qkv row of kernels/attention.h without its query heads, keys already rotated where the model
// uses rotary embeddings. q (M, NH*HS) holds the query heads of the last M of those positions,
// so query m is at position p(m) = T - M + m and, causally, sees keys 0..p(m). Query head h
// reads key/value head h / (NH / NKV):
//
//   S[m, h, j] = q[m, h] . k[j, kv(h)] / sqrt(HS)                         for j <= p(m)
//   out[m, h*HS:(h+1)*HS] = sum_j softmax_j(S[m, h, :]) v[j, kv(h)]        (sets out (M, NH*HS))
//
// M = 1 is one decoding step; M = T with an empty cache before is attention_forward of the
// whole prompt, and gives its out up to rounding (same scale, max-subtracted softmax in the
// compute type, f32 exp of kernels/cpu/vec_exp.h). No backward: generation does not train.
// Dtypes: q, kv, out f32 or f64, one per call. The 16-bit storage of training is not taken
// (generation runs the f32 weights); a 16-bit tensor is an error, not a silent widening.
// out must not alias q or kv. Threads split the (m, h) pairs; each pair's sums run in a fixed
// order, so results do not depend on the thread count.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head);

namespace cpu {
void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head);
}  // namespace cpu

namespace cuda {
void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head);
}  // namespace cuda

}  // namespace dt::kernels
