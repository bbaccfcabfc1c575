// Expert parallelism: a mixture of experts' experts spread over the ranks of an expert-parallel
// group (parallel/parallel_dims.h: ep ranks of the dp × cp ones that hold the same other
// parameters), each holding even_part's share of every expert block's experts whole
// (model/tensor_shard.h: ExpertShard). Attention and everything outside the experts run as
// before, each rank on its own tokens; each expert block's rows travel to their experts' ranks
// and back by all-to-all (model/expert_exchange.h):
//
//   route     every rank's rows per expert, all-gathered (R · E counts)
//   dispatch  all_to_all of the rows, rank q getting those for its experts, uneven counts;
//             then the received rows regrouped from rank by rank to expert by expert, so that
//             each expert's rows are one group of the grouped GEMM
//   combine   the expert rows regrouped back rank by rank, and all_to_all the other way
//
// The rows of an expert reach it in the order of the ranks they came from, each rank's in its
// own order, so an expert computes what it would on one rank over the same rows, row by row.
// Its weight gradient sums over its rows in that order: the same sum as one rank's over the
// micro-batches' rows only where the rows are the same, which is why the layouts are compared
// within bounds (tests/layout_cell.cpp). Gradients of the experts are summed over the ranks that
// hold the same experts (ProcessGroups::expert_dp), the rest over dp × cp
// (parallel/data_parallel.h).
#pragma once

#include "model/expert_exchange.h"

namespace dt {

class ExpertParallel final : public ExpertExchange {
 public:
  // Over `group`, the expert-parallel group, for a model of `experts` experts.
  ExpertParallel(Communicator& group, int64_t experts);

  ExpertShard shard() const override { return {group_.rank(), group_.size()}; }
  Communicator* group() const override { return &group_; }
  ExpertRoute route(const kernels::MoeDispatch& rows) const override;
  void dispatch(Tensor received, Tensor sent, const ExpertRoute& route, Tensor staging) override;
  void combine(Tensor returned, Tensor expert_rows, const ExpertRoute& route, Tensor staging) override;

 private:
  // Copies rows between rank-by-rank order (by_rank: for each rank q, its rows for each expert)
  // and expert-by-expert order (by_expert: for each expert, its rows from each rank).
  enum class Order { by_rank, by_expert };
  void regroup(Tensor to, Order to_order, Tensor from, const ExpertRoute& route) const;

  Communicator& group_;
  int64_t experts_;
  kernels::FlatRange local_;  // this rank's experts
};

}  // namespace dt
