// Where a mixture of experts' rows travel to their experts and back (model/moe_mlp.h): the seam
// of expert parallelism, as model/parallel_regions.h is tensor parallelism's. Each rank routes
// its own rows over all E experts and lays them out expert by expert (kernels/moe_permute.h);
// the experts themselves are spread over the ranks of an expert-parallel group
// (model/tensor_shard.h: ExpertShard), so the rows go to the ranks holding their experts, the
// experts run there, and their outputs come back:
//
//   sent (this rank's rows, over E)  --dispatch-->  received (this rank's experts' rows)
//   returned (sent's order)          <--combine---  expert rows (received's order)
//
// Backward moves the gradients the same two ways: the outputs' gradients by dispatch, the
// inputs' back by combine. A route says how many rows go where: it is made once per pass from
// the dispatch of this rank's rows (a collective: every rank learns every other's counts).
//
// On one rank (single_rank()) the rows stay where they are: sent and received are the same
// tensor, as are the expert rows and the returned ones, and nothing moves;
// parallel/expert/expert_parallel.h overrides the calls with the group's all-to-alls.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/moe_permute.h"
#include "model/tensor_shard.h"

namespace dt {

// One pass's rows between the ranks of an expert-parallel group of R ranks, of which this one
// holds X experts.
struct ExpertRoute {
  std::vector<int64_t> sent = {};      // (R): the rows this rank sends rank q, its rows for q's experts
  std::vector<int64_t> received = {};  // (R · X): the rows from rank q for this rank's expert x, at q · X + x
  std::vector<int64_t> offsets = {};   // (X + 1): the received rows expert by expert: expert x's [offsets[x], offsets[x + 1])

  int64_t rows() const { return offsets.back(); }  // received
  // (R): the rows received from each rank, for all of this rank's experts.
  std::vector<int64_t> received_by_rank() const;
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // One rank's: stateless, shared.
  static ExpertExchange& single_rank();

  // The experts this rank holds.
  virtual ExpertShard shard() const { return {}; }
  // The expert-parallel group, or none on one rank.
  virtual Communicator* group() const { return nullptr; }

  // The route of rows laid out as `rows` says (over all E experts, this rank's). On one rank
  // every row is received: offsets are rows'.
  virtual ExpertRoute route(const kernels::MoeDispatch& rows) const;
  // Sends `sent` (the route's rows, expert by expert over E) to their experts' ranks; `received`
  // gets this rank's experts' rows (route.rows(), expert by expert, each expert's rows in the
  // order of the ranks they came from). `staging`: at least route.rows() rows of scratch.
  virtual void dispatch(Tensor received, Tensor sent, const ExpertRoute& route, Tensor staging);
  // The reverse: `expert_rows` (route.rows(), as received) back to the ranks they came from, into
  // `returned` (the rows sent, in sent's order).
  virtual void combine(Tensor returned, Tensor expert_rows, const ExpertRoute& route, Tensor staging);
};

}  // namespace dt
