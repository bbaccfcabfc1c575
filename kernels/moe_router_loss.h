// The auxiliary losses a mixture-of-experts router can train with (kernels/moe_route.h gives the
// scores and experts they read): the load-balancing loss (Switch Transformer, Mixtral; taken per
// sequence as DeepSeek-V3's sequence-wise loss is) and the router z-loss (ST-MoE).
//
// Rows come in S sequences of L = N / S consecutive rows each (this rank's tokens of each
// sequence). moe_router_stats sets, for sequence s, each output that is defined:
//
//   counts[s, e] = the assignments of its rows to expert e               (S, E)
//   probs[s, e]  = sum over its rows n of P[n, e]                         (S, E)
//   z[s]         = sum over its rows n of logsumexp(logits[n, :])^2       (S)
//
// P is the router's distribution over the experts: the softmax scores, or a row's sigmoid scores
// divided by their sum + 1e-20 (as Megatron-Core and DeepSeek-V3 normalize them for this loss).
// With the counts summed over every rank holding tokens of the same sequences, a sequence of T
// tokens has the balance loss (coefficient · E / (k T²)) · sum_e counts[s, e] probs[s, e] and the
// model the routers' losses model/moe_mlp.h states. The backward passes of the two losses are
//
//   moe_balance_backward: dscores[n] = scale · dP[n]/dscores[n] applied to g = counts[s(n), :]  (sets)
//       softmax: dscores[n, e] = scale · g[e]
//       sigmoid: dscores[n, e] = scale · (g[e] - sum_j g[j] P[n, j]) / Z[n],  Z[n] = sum_j scores[n, j] + 1e-20
//   moe_z_loss_backward:  dlogits[n, e] += scale · 2 · lse[n] · softmax(logits[n])[e]           (adds)
//
// dscores goes into moe_route_backward, which carries it through the softmax or sigmoid; the
// z-loss's gradient is the logits' own and is added after it. No gradient flows through the
// counts: the choice is piecewise constant.
//
// Dtypes: counts, probs, z, scores, logits, dscores and dlogits are one float type: f32 (the
// router's) or f64 (the finite-difference tests); experts i32 (N, k) with every entry in [0, E)
// (moe_route_forward's; not checked again here, which would read them back from a GPU). The counts
// are exact. Each sum runs in the float type, row by row in order on the CPU; a GPU splits a
// sequence's rows over warps and a row's experts over lanes, so probs and z agree with the CPU to
// a few ulps, and the gradients of sigmoid scores and of the z-loss likewise. Fixed orders
// throughout: results repeat bit for bit. Outputs must not overlap inputs or each other.
#pragma once

#include "core/tensor.h"
#include "kernels/moe_route.h"

namespace dt::kernels {

void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score);
void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score);
void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale);

namespace cpu {
void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score);
void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score);
void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale);
}  // namespace cpu

namespace cuda {
void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score);
void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score);
void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale);
}  // namespace cuda

}  // namespace dt::kernels
