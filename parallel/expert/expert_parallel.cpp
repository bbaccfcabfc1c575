#include "parallel/expert/expert_parallel.h"

#include <numeric>

#include "core/device.h"

namespace dt {

namespace {

int64_t row_elements(const Tensor& t) { return t.numel() / t.dim(0); }

// Element counts of `rows` rows of `width` each.
std::vector<int64_t> elements(std::vector<int64_t> rows, int64_t width) {
  for (int64_t& r : rows) r *= width;
  return rows;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

ExpertParallel::ExpertParallel(Communicator& group, int64_t experts)
    : group_(group), experts_(experts), local_(even_part(experts, group.size(), group.rank())) {
  DT_CHECK(experts >= group.size(), "expert parallelism over ", group.size(), " ranks for ", experts,
           " experts: every rank holds at least one");
}

ExpertRoute ExpertParallel::route(const kernels::MoeDispatch& rows) const {
  const int R = group_.size();
  const int64_t E = experts_, X = local_.size();
  DT_CHECK(static_cast<int64_t>(rows.offsets.size()) == E + 1, "a dispatch over ", rows.offsets.size() - 1,
           " experts for expert parallelism over ", E);
  std::vector<int64_t> mine(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) mine[static_cast<size_t>(e)] = rows.rows_of(e);
  const std::vector<int64_t> every = all_gather_counts(group_, mine);  // rank q's for expert e at q · E + e
  ExpertRoute r{.sent = std::vector<int64_t>(static_cast<size_t>(R)),
                .received = std::vector<int64_t>(static_cast<size_t>(R * X)),
                .offsets = std::vector<int64_t>(static_cast<size_t>(X + 1))};
  for (int q = 0; q < R; ++q) {
    const kernels::FlatRange theirs = even_part(E, R, q);
    r.sent[static_cast<size_t>(q)] = rows.offsets[static_cast<size_t>(theirs.end)] - rows.offsets[static_cast<size_t>(theirs.begin)];
    for (int64_t x = 0; x < X; ++x)
      r.received[static_cast<size_t>(q * X + x)] = every[static_cast<size_t>(q * E + local_.begin + x)];
  }
  for (int64_t x = 0; x < X; ++x) {
    int64_t expert_rows = 0;
    for (int q = 0; q < R; ++q) expert_rows += r.received[static_cast<size_t>(q * X + x)];
    r.offsets[static_cast<size_t>(x + 1)] = r.offsets[static_cast<size_t>(x)] + expert_rows;
  }
  return r;
}

void ExpertParallel::regroup(Tensor to, Order to_order, Tensor from, const ExpertRoute& route) const {
  const int R = group_.size();
  const int64_t X = local_.size();
  const size_t row_bytes = static_cast<size_t>(row_elements(from)) * dtype_size(from.dtype);
  // Where block (q, x) starts in each order, in rows.
  std::vector<int64_t> by_rank(static_cast<size_t>(R * X)), by_expert(static_cast<size_t>(R * X));
  int64_t at = 0;
  for (int q = 0; q < R; ++q)
    for (int64_t x = 0; x < X; ++x) by_rank[static_cast<size_t>(q * X + x)] = at, at += route.received[static_cast<size_t>(q * X + x)];
  at = 0;
  for (int64_t x = 0; x < X; ++x)
    for (int q = 0; q < R; ++q) by_expert[static_cast<size_t>(q * X + x)] = at, at += route.received[static_cast<size_t>(q * X + x)];
  const std::vector<int64_t>& to_rows = to_order == Order::by_rank ? by_rank : by_expert;
  const std::vector<int64_t>& from_rows = to_order == Order::by_rank ? by_expert : by_rank;
  for (size_t b = 0; b < route.received.size(); ++b) {
    if (route.received[b] == 0) continue;
    copy_rows(static_cast<char*>(to.data) + static_cast<size_t>(to_rows[b]) * row_bytes, 0,
              static_cast<const char*>(from.data) + static_cast<size_t>(from_rows[b]) * row_bytes, 0,
              static_cast<size_t>(route.received[b]) * row_bytes, 1, to.device);
  }
}

void ExpertParallel::dispatch(Tensor received, Tensor sent, const ExpertRoute& route, Tensor staging) {
  const int64_t width = row_elements(sent);
  const Tensor arriving = staging.slice_rows(0, route.rows());
  group_.all_to_all(arriving, elements(route.received_by_rank(), width), sent.slice_rows(0, sum(route.sent)),
                    elements(route.sent, width))
      .wait();
  regroup(received, Order::by_expert, arriving, route);
}

void ExpertParallel::combine(Tensor returned, Tensor expert_rows, const ExpertRoute& route, Tensor staging) {
  const int64_t width = row_elements(expert_rows);
  const Tensor leaving = staging.slice_rows(0, route.rows());
  regroup(leaving, Order::by_rank, expert_rows, route);
  group_.all_to_all(returned.slice_rows(0, sum(route.sent)), elements(route.sent, width), leaving,
                    elements(route.received_by_rank(), width))
      .wait();
}

}  // namespace dt
