// The experts' grouped products (kernels/grouped_linear.h) in FP8: Float8Linear's recipes
// (model/float8_linear.h) applied to each expert's weight and rows, so that each product runs
// on what one rank would quantize, whichever layout the experts and their rows are spread over.
//
//   forward          out[rows of x]  = X[rows] W_x^T
//   backward_input   dinp[rows of x] = DY[rows] W_x
//   backward_weight  dW_x           += DY[rows]^T X[rows]
//
// Weights: each expert's matrix W_x is a tensor of its own — tensorwise, its scale from its own
// amax; delayed, its own entry of the layer's state (model/linear_state.h: an experts' layer
// carries the state once per expert); blockwise, (B, B) tiles of it. Experts are whole on every
// rank that holds them, so no weight amax is agreed on.
//
// Rows. An expert's rows come from the micro-batches routed to it: on one rank, one; under
// expert parallelism one from each rank of the ep group (ExpertRoute::received: expert x's rows
// from rank q, in the order of q), in one product. The tensor one rank quantizes is one
// micro-batch's rows of one expert, so an expert's rows are quantized segment by segment — one
// segment per rank they came from — and its products computed segment by segment:
//   tensorwise  a segment's scale from the amax of the micro-batch's rows for that expert: its
//               own, or under context parallelism (the micro-batch's rows split over the cp
//               ranks, whose rows for one expert may go to other ranks' copies of it) the max
//               over the segments of every rank of the micro-batch, agreed on by one max over
//               the stage's dp × cp ranks of a (places × experts) table;
//   delayed     the expert's scale from the state; the step's amax of the expert maxed over its
//               segments (end_step_float8 agrees on it over every holder);
//   blockwise   (1, B) tiles of each row, for all three products: the weight gradient's (B, 1)
//               tiles down the rows would group rows by where they landed, which changes with
//               the layout; its product dequantizes the row tiles exactly instead (a GEMM cannot
//               scale along the dimension it sums over: kernels/float8_linear.h).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/expert_exchange.h"
#include "model/float8_recipe.h"
#include "model/linear_state.h"

namespace dt {

class Float8GroupedLinear {
 public:
  // The experts' layer with state `state` (delayed scaling's, for all the model's experts), of
  // which this rank holds `shard`'s of `experts`, exchanging rows over `ep` (none on one rank).
  Float8GroupedLinear(const Float8Training& fp8, LinearStateView state, int64_t experts, ExpertShard shard,
                      Communicator* ep);

  void forward(Tensor out, Tensor inp, Tensor weight, const ExpertRoute& route) const;
  void backward_input(Tensor dinp, Tensor dout, Tensor weight, const ExpertRoute& route) const;
  // dweight += for each expert DY^T X over its rows.
  void backward_weight(Tensor dweight, Tensor dout, Tensor inp, const ExpertRoute& route) const;

 private:
  enum Operand { input = 0, weight = 1, gradient = 2 };
  struct Quantized;
  // A rows operand (R, C), expert by expert as `route` says, in its segments.
  Quantized quantize_rows(Operand operand, Tensor x, const ExpertRoute& route) const;
  // The experts' weights (X, OC, C), one piece per expert.
  Quantized quantize_weights(Tensor w) const;
  // Under context parallelism: each segment's amax (experts × ranks, at x · R + q) set to the
  // max over the segments of its micro-batch for the same expert.
  void agree_on_micro_batches(Tensor amax, const ExpertRoute& route) const;

  const Float8Training* fp8_;
  LinearStateView state_;
  int64_t experts_;
  int64_t first_expert_;  // the model's index of this rank's expert 0
  Communicator* ep_;
};

}  // namespace dt
