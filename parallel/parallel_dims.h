// The process layout: how the ranks of a job split into the parallel dimensions, and the
// communicator of each dimension.
//
// World size = dp × cp × pp × tp. Ranks are numbered with tp fastest, then cp, then dp, then
// pp (docs/architecture.md), so that the ranks of a tensor-parallel group are neighbours — on one node —
// and a pipeline stage is a contiguous block of ranks:
//
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//
// The group of a dimension is the ranks that differ only in that coordinate; its rank order is
// that coordinate. A rank belongs to one group of each dimension.
//
// Expert parallelism adds no ranks: it reuses the dp × cp ranks of each (tp, pp) position, which
// it cuts into groups of ep consecutive ones (dp-major, as dp_cp orders them): the ranks among
// which a mixture-of-experts layer's experts are spread. ep must divide dp × cp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dt {

struct ParallelDims {
  int dp = 1, cp = 1, tp = 1, pp = 1;
  int ep = 1;  // over dp × cp: not a factor of the world size

  struct Coords {
    int dp = 0, cp = 0, tp = 0, pp = 0;
    bool operator==(const Coords&) const = default;
  };

  int world_size() const { return dp * cp * tp * pp; }
  Coords coords_of(int rank) const;
  int rank_of(Coords c) const;
  // A rank's place among its (tp, pp) position's dp × cp ranks, dp-major; its ep group is the
  // ep consecutive places from (place / ep) · ep, and its rank in that group place % ep.
  int replica_index(Coords c) const { return c.dp * cp + c.cp; }
  int ep_rank(Coords c) const { return replica_index(c) % ep; }
  // "dp 2 × cp 1 × tp 2 × pp 1 = 4 ranks"
  std::string describe() const;
  // How a line printed on rank `rank`'s behalf names it: "rank 5", and with more than one
  // dimension above 1 its coordinates in those: "rank 5 (dp 1, tp 1)".
  std::string rank_description(int rank) const;
  // Throws dt::Error unless every dimension is at least 1, ep divides dp × cp, and the product
  // of dp, cp, tp and pp is the job's world size, naming the values and the ways to fix it.
  void check_world_size(int world_size) const;
};

// One rank's communicators: the world and one per dimension.
struct ProcessGroups {
  ParallelDims dims;
  ParallelDims::Coords coords;
  std::unique_ptr<Communicator> world, dp, cp, tp, pp;
  std::unique_ptr<Communicator> ep;  // the ep ranks of this rank's expert-parallel group
  // The dp × cp ranks holding this rank's experts: those at the same place of their ep groups
  // (dp × cp / ep of them; dp × cp itself where ep is 1), over which the experts' gradients are
  // summed and ZeRO shards them (Megatron-Core's expert-data-parallel group).
  std::unique_ptr<Communicator> expert_dp;
  // dp × cp: the ranks that hold the same parameters and split the global batch's tokens (context
  // parallelism joins data parallelism for the gradients' sum and ZeRO's shards); the dp group
  // itself when cp is 1.
  Communicator& dp_cp() const { return dp_cp_ ? *dp_cp_ : *dp; }
  // The groups over which a value that every rank of this rank's pipeline stage holds alike is
  // agreed on: the tp group, then dp × cp. Together they are every rank of the stage — every
  // holder of a piece of its blocks' linear layers — so a max over one and then the other is the
  // max over all of them: how a block's per-linear state (model/linear_state.h; FP8's amax) is
  // reduced. Other stages hold other blocks and take no part.
  std::vector<Communicator*> stage_replica_groups() const { return {tp.get(), &dp_cp()}; }
  std::unique_ptr<Communicator> dp_cp_;  // made when cp > 1
};

// Splits `world` into the groups of `dims` (a collective: every rank calls it). Checks the world
// size first.
ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelDims& dims);

}  // namespace dt
