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
  const size_t R = static_cast<size_t>(group_.size()), E = static_cast<size_t>(experts_);
  const size_t X = static_cast<size_t>(local_.size()), first = static_cast<size_t>(local_.begin);
  DT_CHECK(rows.offsets.size() == E + 1, "a dispatch over ", rows.offsets.size() - 1,
           " experts for expert parallelism over ", E);
  std::vector<int64_t> mine(E);
  for (size_t e = 0; e < E; ++e) mine[e] = rows.offsets[e + 1] - rows.offsets[e];
  const std::vector<int64_t> every = all_gather_counts(group_, mine);  // rank q's for expert e at q · E + e
  ExpertRoute r{.sent = std::vector<int64_t>(R), .received = std::vector<int64_t>(R * X),
                .offsets = std::vector<int64_t>(X + 1)};
  for (size_t q = 0; q < R; ++q) {
    const kernels::FlatRange theirs = even_part(experts_, group_.size(), static_cast<int>(q));
    r.sent[q] = rows.offsets[static_cast<size_t>(theirs.end)] - rows.offsets[static_cast<size_t>(theirs.begin)];
    for (size_t x = 0; x < X; ++x) r.received[q * X + x] = every[q * E + first + x];
  }
  for (size_t x = 0; x < X; ++x) {
    r.offsets[x + 1] = r.offsets[x];
    for (size_t q = 0; q < R; ++q) r.offsets[x + 1] += r.received[q * X + x];
  }
  return r;
}

void ExpertParallel::regroup(Tensor to, Order to_order, Tensor from, const ExpertRoute& route) const {
  const size_t R = static_cast<size_t>(group_.size()), X = static_cast<size_t>(local_.size());
  const size_t row_bytes = static_cast<size_t>(row_elements(from)) * dtype_size(from.dtype);
  // Where block (q, x) — rank q's rows for expert x — starts in each order, in rows.
  std::vector<size_t> by_rank(R * X), by_expert(R * X);
  const auto rows_of = [&](size_t q, size_t x) { return static_cast<size_t>(route.received[q * X + x]); };
  for (size_t q = 0, at = 0; q < R; ++q)
    for (size_t x = 0; x < X; ++x) by_rank[q * X + x] = at, at += rows_of(q, x);
  for (size_t x = 0, at = 0; x < X; ++x)
    for (size_t q = 0; q < R; ++q) by_expert[q * X + x] = at, at += rows_of(q, x);
  const std::vector<size_t>& to_rows = to_order == Order::by_rank ? by_rank : by_expert;
  const std::vector<size_t>& from_rows = to_order == Order::by_rank ? by_expert : by_rank;
  for (size_t q = 0; q < R; ++q)
    for (size_t x = 0; x < X; ++x) {
      const size_t b = q * X + x;
      if (rows_of(q, x) == 0) continue;
      copy_rows(static_cast<char*>(to.data) + to_rows[b] * row_bytes, 0,
                static_cast<const char*>(from.data) + from_rows[b] * row_bytes, 0, rows_of(q, x) * row_bytes, 1,
                to.device);
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
