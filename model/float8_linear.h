// One linear layer's GEMMs in FP8 (model/float8_recipe.h): each operand quantized as the recipe
// says, then kernels/float8_linear.h's product. What LinearProduct (model/layers.h) runs in
// place of the bf16 products when FP8 training is on.
//
//   forward          out  = X W^T + b     X along its rows in (1, B) tiles, W in (B, B)
//   backward_input   dinp = DY W          DY along its rows in (1, B) tiles, W in (B, B)
//   backward_weight  dW  += DY^T X        DY and X down their columns in (B, 1) tiles
//
// (tiles for blockwise; whole tensors otherwise). X and W are e4m3, DY e5m2 or e4m3 as the
// recipe's format says. Each product quantizes its operands itself from the bf16 tensors it is
// given — the same bytes wherever an operand is quantized twice (W in forward and
// backward_input, X in forward and backward_weight), since its scale does not change within a
// step — so no FP8 copy is kept between passes.
//
// Amaxes. A tensorwise scale is made from the amax of the whole tensor, so the amax is the max
// over every rank holding a piece of it: the tensor-parallel group for a weight, for a
// row-parallel layer's input (its columns are split) and for a column-parallel layer's output
// gradient; the context-parallel group for every activation and gradient (its rows are split).
// Data-parallel ranks hold other micro-batches, each its own tensor, as one rank's
// micro-batches are. A delayed scale reads the layer's state; the amaxes seen are maxed into
// the state's step amax, which end_step_float8 agrees on over every holder — the stage's tp
// and dp × cp ranks, as one rank's step sees all its micro-batches — and turns into the next
// step's scale. Blockwise tiles lie within one rank's piece (run_config checks that the block
// divides each piece), so they need no agreement.
#pragma once

#include <array>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/block_declaration.h"
#include "model/float8_recipe.h"
#include "model/linear_state.h"

namespace dt {

class Transformer;

class Float8Linear {
 public:
  // The layer of tensor-parallel `style`, its per-linear state `state` (delayed scaling's).
  Float8Linear(const Float8Training& fp8, LinearStyle style, LinearStateView state);

  void forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) const;
  void backward_input(Tensor dinp, Tensor dout, Tensor weight) const;
  // dweight += DY^T X; the bias's gradient is the caller's (kernels::linear_backward_bias).
  void backward_weight(Tensor dweight, Tensor dout, Tensor inp) const;

 private:
  enum Operand { input = 0, weight = 1, gradient = 2 };
  enum class Along { rows, columns, square };
  struct Quantized;
  Quantized quantize(Operand operand, Tensor x, Along along) const;

  const Float8Training* fp8_;
  // The groups over which each operand's pieces lie (none on one rank).
  std::vector<Communicator*> holders_[3];
  LinearStateView state_;
};

// The workspace each product (forward, input gradient, weight gradient) of a layer of `in` ->
// `out` features over `rows` rows holds for its quantized operands, bytes and scales, as
// Float8Linear quantizes them; for an experts' layer (model/float8_grouped_linear.h, `experts`
// weights beside the rows, every row read in (1, B) tiles) as Float8GroupedLinear does, its
// tensorwise scales per segment aside (a float each). What the memory plan counts (plan/memory.h).
std::array<size_t, 3> float8_operand_bytes(const Float8Recipe& recipe, int64_t rows, int64_t in, int64_t out,
                                           int64_t experts = 0);

// Delayed scaling's step amaxes as they are now, put back when this object goes: forwards that
// are not training's (evaluation) leave no amax in the step's, so that a run evaluated at step s
// and one that was not, or one resumed from step s's checkpoint, go on alike. Nothing where no
// such state is declared.
class Float8AmaxesKept {
 public:
  explicit Float8AmaxesKept(const LinearStates& states);
  ~Float8AmaxesKept();
  Float8AmaxesKept(const Float8AmaxesKept&) = delete;
  Float8AmaxesKept& operator=(const Float8AmaxesKept&) = delete;

 private:
  Tensor amaxes_;
  std::vector<float> kept_;
};

// Delayed scaling's end of step: each quantized layer's step amaxes maxed over `holders` (the
// stage's tp and dp × cp groups: ProcessGroups::stage_replica_groups; null ones skipped), pushed
// onto its history, and its scales made from the history for the next step; the step amaxes
// start again at 0. Nothing for the other recipes. A collective over holders.
void end_step_float8(Transformer& model, const std::vector<Communicator*>& holders);

}  // namespace dt
