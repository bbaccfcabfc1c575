// Auxiliary-loss-free load balancing (DeepSeek-V3, section 2.1.2; torchtitan's
// load_balance_coeff): each expert block's router adds a bias per expert to the scores when it
// chooses the top k (kernels/moe_route.h), never to the weights; after each applied step
//
//   bias[e] += rate · sign(mean load − load[e])        (sign(0) = 0)
//
// load[e] being the assignments expert e got in the step's forwards, summed over every rank that
// routes the block's tokens: the data- and context-parallel replicas of its pipeline stage, each
// routing tokens of its own. Every rank then makes the same update from the same counts, on the
// host, so the bias stays the same bits everywhere.
//
// The bias is model state: the router's per-linear state "expert_bias" (model/linear_state.h),
// E values starting at 0, saved in checkpoints under its name
// (linear_state.h.<l>.mlp.router.expert_bias) and read back by any layout.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "model/linear_state.h"

namespace dt {

class Transformer;

// The per-linear state kinds `declared` and those the model itself carries: the expert bias
// where config.moe.bias_update_rate > 0.
std::vector<LinearStateDeclaration> with_model_states(const ModelConfig& config,
                                                      std::vector<LinearStateDeclaration> declared);

// One expert block's step, summed over the ranks routing its tokens: its loads (the router's
// assignments, kept or dropped), those dropped over the capacity, and the routers' losses it
// added to the step's loss (model/moe_mlp.h; 0 where the model has none).
struct ExpertStats {
  int layer = 0;
  std::vector<double> assignments = {};  // (E) per expert
  double dropped = 0;
  double aux_loss = 0, z_loss = 0;

  // The busiest expert's load over the mean: 1 when balanced, E when one expert takes them all.
  double imbalance() const;
  // The share of the assignments dropped: 0 when dropless.
  double dropped_fraction() const;
};

// Sums what every expert block `model` holds counted (Stage::expert_record) over `replicas` (none:
// this rank's own), the losses divided by the step's global target count `targets`; moves each
// block's bias where the model has one and the step's update was `applied`, and starts the next
// step's count. A collective over replicas. Returns the stats, block by block.
std::vector<ExpertStats> end_step_expert_balance(Transformer& model, Communicator* replicas, bool applied,
                                                 int64_t targets);

}  // namespace dt
