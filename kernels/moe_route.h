// Top-k routing of a mixture-of-experts MLP: which k of the E experts each token goes to, and
// with what weight (Mixtral, Qwen-MoE, OLMoE, DeepSeek-V3).
//
// logits (N, E) are the router linear's outputs. The forward sets
//
//   scores (N, E)   = softmax(logits[n, :]) over the experts, or sigmoid(logits) element by element
//   experts (N, k)  = the k experts of largest choice value c[n, e] = scores[n, e] + bias[e], in
//                     descending order of c; equal values rank the lower expert index first and a
//                     NaN ranks below every number, so a row always gets k distinct experts in
//                     [0, E), the same ones on every device for the same scores
//   weights (N, k)  = route_scale * (g_j / Z)  with g_j = scores[n, experts[n, j]] and
//                     Z = g_0 + ... + g_{k-1} + 1e-20 when routing.renormalize,
//                     else route_scale * g_j
//
// bias (E) is optional (an undefined Tensor: none, c = scores): DeepSeek-V3's auxiliary-loss-free
// balancing bias, which decides the choice and never enters the weights. The 1e-20 is
// DeepSeek-V3's: a row whose chosen sigmoid scores all underflow gets weights 0 rather than NaN.
// Without a bias a softmax row's chosen scores sum to at least 1/E, where 1e-20 is below half an
// ulp, so Mixtral's and Qwen's weights are exactly the plain renormalization.
//
// The backward sets dlogits (N, E) from dweights (N, k) and, optionally, dscores (N, E): a
// gradient on the scores from elsewhere (an auxiliary load-balancing loss), added before the
// softmax or sigmoid; an undefined Tensor is none. From the saved scores and experts:
//
//   dg_j     = route_scale * (dweights_j - sum_i dweights_i g_i / Z) / Z     (renormalize)
//              route_scale * dweights_j                                   (otherwise)
//   ds[e]    = dscores[n, e] + sum over the j with experts[n, j] = e of dg_j
//   dlogits  = p * (ds - sum_e p_e ds_e)   (softmax)   or   ds * p * (1 - p)   (sigmoid),  p = scores
//
// The choice is piecewise constant in the logits and the bias: no gradient flows through it, and
// the bias gets none. The forward saves nothing beyond its outputs: the caller keeps scores and
// experts for the backward (and weights for the combine, kernels/moe_permute.h). The backward
// indexes by experts as the forward set them, without checking them again (that would read them
// back from a GPU on every call).
//
// Dtypes: logits, bias, scores, weights, dlogits, dweights and dscores are one float type: f32 (the
// router runs in f32 whatever the activations' storage) or f64 (the finite-difference tests);
// experts are i32. Outputs must not overlap inputs or each other. The CPU computes each row in
// order; a GPU sums a row's softmax and its backward dot product across a warp, so the two agree
// to a few ulps, and on the experts wherever the choice values are not within that of a tie.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dt::kernels {

enum class MoeScore : uint8_t {
  softmax,  // Mixtral, Qwen-MoE, OLMoE
  sigmoid,  // DeepSeek-V3
};

// How a router turns logits into experts and weights; the defaults are Mixtral's.
struct MoeRouting {
  MoeScore score = MoeScore::softmax;
  int64_t top_k = 2;         // 1 <= top_k <= E
  bool renormalize = true;   // weights divided by their sum over the k chosen (Qwen1.5-MoE, OLMoE: false)
  float route_scale = 1.0f;  // finite and > 0 (DeepSeek-V3: 2.5)
};

void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing);
void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing);

namespace cpu {
void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing);
void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing);
}  // namespace cpu

namespace cuda {
void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing);
void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing);
}  // namespace cuda

}  // namespace dt::kernels
