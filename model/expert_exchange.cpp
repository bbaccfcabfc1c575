#include "model/expert_exchange.h"

#include "core/error.h"

namespace dt {

std::vector<int64_t> ExpertRoute::received_by_rank() const {
  const size_t ranks = sent.size(), experts = received.size() / ranks;
  std::vector<int64_t> by_rank(ranks);
  for (size_t q = 0; q < ranks; ++q)
    for (size_t x = 0; x < experts; ++x) by_rank[q] += received[q * experts + x];
  return by_rank;
}

ExpertExchange& ExpertExchange::single_rank() {
  static ExpertExchange one;
  return one;
}

ExpertRoute ExpertExchange::route(const kernels::MoeDispatch& rows) const {
  ExpertRoute r{.sent = {rows.rows()}, .offsets = rows.offsets};
  for (size_t x = 0; x + 1 < rows.offsets.size(); ++x) r.received.push_back(rows.rows_of(static_cast<int64_t>(x)));
  return r;
}

void ExpertExchange::dispatch(Tensor received, Tensor sent, const ExpertRoute& /*route*/, Tensor /*staging*/) {
  DT_CHECK(received.data == sent.data, "one rank's experts read the rows where they were sent");
}

void ExpertExchange::combine(Tensor returned, Tensor expert_rows, const ExpertRoute& /*route*/, Tensor /*staging*/) {
  DT_CHECK(returned.data == expert_rows.data, "one rank's experts write their rows where they return");
}

}  // namespace dt
