// The views one block's passes work on: its activations and its backward's gradients, given by
// the caller (model/stage.h for training, model/inference.h for generation). Sizes: N rows of
// the micro-batch; C the model width; this rank's widths under tensor parallelism
// (model/tensor_shard.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dt {

// What a training forward of an expert block counts on the host over a step's micro-batches
// (model/expert_balance.h): the assignments the router made to each expert, those dropped over
// the capacity, and the routers' auxiliary losses (model/moe_mlp.h) times the global batch's
// target count, which the step divides by.
struct ExpertRecord {
  std::vector<int64_t> loads;  // (E)
  int64_t dropped = 0;
  double aux_loss = 0, z_loss = 0;
};

// A mixture of experts' activations (model/moe_mlp.h), N the micro-batch's rows (every rank of a
// tensor-parallel group routes all of them), P this rank's (N without sequence parallelism),
// k = top_k, E experts, A = N·k assignments: the experts' tensors have a row per assignment kept,
// the first R of A (all of them when none is dropped). Kept or rebuilt as declared: the router's
// scores (N, E), chosen experts (N, k) i32, their weights (N, k) and each assignment's row (N, k)
// i32; the experts' input (X, C), fc output (X, 2 F_e) and activation (X, F_e) on the rows this
// rank's experts receive, X of them at most (model/expert_exchange.h; X = A without expert
// parallelism), and their output as it returns here (A, C); where the model trains with the
// balance loss, each of the micro-batch's S sequences' assignments per expert (S, E) f32, summed
// over the ranks holding the sequence's other tokens. Scratch, used within a pass: the router's
// input and weight widened to f32 where the precision is 16-bit (N, C) and (E, C), and the routed
// rows' combined output (N, C). The router's logits (N, E) f32: kept or rebuilt where the model
// trains with the z-loss, else scratch. record, where given (a training forward's), is what
// forward adds this micro-batch's counts to, with the routers' losses it trains with computed in
// scratch: each sequence's probabilities (S, E) and z-loss (S), f32. A shared expert's (undefined
// without one), F_s its hidden width (this rank's columns under tensor parallelism): its fc
// output (N, 2 F_s) and activation (N, F_s), kept or rebuilt as declared; its output (P, C) and,
// where gated, its gate's logit (P) f32, kept. Expert parallelism's scratch, where the rows
// travel: this rank's rows as sent (A, C), the experts' output before it returns (X, C) and a
// staging buffer (X, C) for the all-to-alls; without it, sent is expert_in and result expert_out
// (nothing moves), and staging is undefined. keep_all: generation's, every assignment kept
// whatever the capacity factor (a token's output must not depend on how the prompt is cut into
// chunks).
struct ExpertActivations {
  Tensor scores, experts, weights, rows;
  Tensor expert_in, expert_fch, expert_act, expert_out;
  Tensor counts{};  // where the model has the balance loss
  Tensor router_in, router_weight, logits, routed;
  Tensor probs{}, z{};  // where a training forward records the routers' losses
  Tensor shared_fch{}, shared_act{}, shared_out{}, shared_gate{};  // where there is a shared expert
  Tensor sent{}, result{}, staging{};
  ExpertRecord* record = nullptr;
  bool keep_all = false;
};

// The query and key norms' (model/qk_norm.h), where the model has them: their inputs, qkv's query
// columns (N, NH · HS) and key columns (N, NKV · HS) in rows of their own, and their statistics
// (N) f32 each, kept or rebuilt as declared; and `rows`, scratch of (N, NH · HS) where a
// normalized block is made before it is copied back into qkv.
struct QkActivations {
  Tensor q_in, k_in, q_rstd, k_rstd, rows;
};

// One block's activations for N rows, (N, width) views, or (this rank's rows, width) for ln1, ln2,
// res2, res3, their statistics and branch. The *_mean views are LayerNorm's only, lse is training's
// only. res2 and res3 may be the block's input x itself (generation updates the residual stream
// in place; kernels/add.h allows it); the others must be distinct. proj_out is scratch for both
// branches' output projections (all rows), branch for their sum (this rank's rows) and gathered
// for a column-parallel layer's whole input: the last two are used with sequence parallelism
// only.
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, proj_out, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, res3;
  Tensor branch, gathered;
  QkActivations qk = {};           // where the model has query and key norms
  ExpertActivations experts = {};  // an expert block's only (it has no fch and fch_act)
};

// A mixture of experts' backward, sizes as ExpertActivations': the gradients of the experts'
// output as it returned (A, C) and as the experts made it (X, C) (the same tensor without expert
// parallelism; the experts' input's gradient takes the latter's memory), of their activation
// (X, F_e) and fc output (X, 2 F_e), of the routing weights (N, k) and logits (N, E) (f32), and of
// the router's f32 input (N, C); a shared expert's output (P, C), activation (N, F_s), fc output
// (N, 2 F_s) and gate logit (P) f32, and the gate's share of the router's input gradient (P, C)
// f32. Working space, except what a deferred weight pass reads: dexpert_fch, dlogits and
// dshared_fch, which are then kept per block and micro-batch like dfch.
struct ExpertGradients {
  Tensor dexpert_out, dresult, dexpert_act, dexpert_fch, dweights, dlogits, drouter_in;
  Tensor dscores{};  // (P, E) f32 working space, where the model trains with the balance loss
  Tensor dshared_out{}, dshared_act{}, dshared_fch{}, dshared_gate{}, dgate_in{};  // where there is a shared expert
  float loss_scale = 0;  // what the token losses' gradient is scaled by: the routers' losses' take it too
};

// One block's gradients for N rows in backward. dout is the output's gradient (given); dres2 the
// gradient of x' and din the input's (set): this rank's rows with sequence parallelism, like
// dlocal, where a column-parallel layer's summed input gradient goes (used with sequence
// parallelism only). dtmp, datty, dact, dfch and dqkv are working space for all rows; datty
// (N, this rank's attention width) may share dtmp's memory.
// When the weights' gradients are taken at once (backward_input with weights_now), dres2 and din
// may be dout itself: the residual stream's gradient is then updated in place. When they are
// deferred to backward_weight, dout, dres2, dfch and dqkv are what it reads: they must be
// distinct and kept, with the activations, until then.
struct BlockGradients {
  Tensor dout, dres2, din, dtmp, datty, dact, dfch, dqkv, dlocal;
  Tensor dqk_rows{};  // where there are query and key norms: their inputs' gradient, (N, NH · HS) working space
  ExpertGradients experts = {};  // an expert block's only
};

}  // namespace dt
