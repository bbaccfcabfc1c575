// Rotary position embedding (RoPE), applied in place to the query and key heads of packed qkv.
//
// qkv (B, T, (NH + 2*NKV) * HS) is laid out as in kernels/attention.h; the NH query heads and
// the NKV key heads are rotated, the value heads are left alone. Hugging Face's "rotate half"
// convention pairs element i of a head with element i + HS/2 (Meta's original code pairs
// neighbours; Hugging Face's checkpoints permute q_proj and k_proj to match this one):
//
//   for position t and i in [0, HS/2), with c = cos[t, i], s = sin[t, i]:
//     x'[i]        = x[i] * c - x[i + HS/2] * s
//     x'[i + HS/2] = x[i + HS/2] * c + x[i] * s
//
// rope_backward applies the inverse rotation (s -> -s) in place to dqkv: the gradient of a
// rotation is the transposed rotation. The table holds cos and sin of t * inv_freq[i] for
// t < T_max; rope_table() fills it.
// Shapes: qkv, dqkv (B, T, (NH + 2*NKV) * HS) with T <= T_max; cos, sin (T_max, HS/2). HS must
// be even. Dtypes: qkv, dqkv f32, f64, bf16 or f16; cos, sin f32 (f64 with f64). 16-bit heads
// are widened exactly, rotated in f32 and rounded once when stored; the value heads are not
// touched.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace dt::kernels {

// Llama 3's frequency scaling (Hugging Face rope_type "llama3"): wavelengths longer than
// original_max_seq_len / low_freq_factor are stretched by `factor`, those shorter than
// original_max_seq_len / high_freq_factor are kept, and the band between is interpolated.
struct RopeScaling {
  double factor = 0;  // 0: no scaling
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_seq_len = 8192;
};

// inv_freq[i] = theta^(-2i / HS) for i < HS/2, then Llama 3's scaling if enabled; computed in
// double and rounded to float like Hugging Face's fp32 buffer.
std::vector<float> rope_inverse_frequencies(int head_size, double theta, const RopeScaling& scaling);
// cos[t, i] = cos(t * inv_freq[i]), sin likewise, for every row t of the (T_max, HS/2) tables
// (host memory; f32 or f64). The angle t * inv_freq[i] is rounded to f32 first, as Hugging
// Face's fp32 outer product does.
void rope_table(Tensor cos, Tensor sin, const std::vector<float>& inv_freq);

void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);
void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);

namespace cpu {
void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);
void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);
}  // namespace cpu

namespace cuda {
void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);
void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head);
}  // namespace cuda

}  // namespace dt::kernels
