#include "kernels/moe_permute.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks a token-rows tensor (N, C) and a permuted-rows tensor (R, C) of one storage type, and
// row_of (N, k) beside them; C comes from the token rows.
void check_rows(std::string_view op, const char* token_name, const Tensor& tokens, const char* permuted_name,
                const Tensor& permuted, const Tensor& row_of) {
  expect_storage_dtype(op, tokens);
  DT_CHECK(tokens.ndim() == 2, op, ": ", token_name, " is ", tokens.describe(), ", expected (N, C)");
  expect_dtype(op, permuted_name, permuted, tokens.dtype, tokens.device);
  DT_CHECK(permuted.ndim() == 2 && permuted.dim(1) == tokens.dim(1), op, ": ", permuted_name, " is ",
           permuted.describe(), ", expected (R, ", tokens.dim(1), "): the rows moe_dispatch returned");
  expect_dtype(op, "row_of", row_of, DType::i32, tokens.device);
  DT_CHECK(row_of.ndim() == 2 && row_of.dim(0) == tokens.dim(0), op, ": row_of ", row_of.describe(), " and ",
           token_name, " ", tokens.describe(), " do not have one row of slots per token");
}

// weights or dweights (N, k): f32, f64 with f64 storage.
void check_weights(std::string_view op, const char* name, const Tensor& weights, DType storage, const Tensor& row_of) {
  expect_dtype(op, name, weights, accumulation_dtype(storage), row_of.device);
  expect_shape(op, name, weights, row_of.shape);
}

}  // namespace

MoeDispatch moe_dispatch(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity) {
  constexpr std::string_view op = "moe_dispatch";
  const Device device = experts.device;
  DT_CHECK(experts.dtype == DType::i32 && experts.ndim() == 2, op, ": experts is ", experts.describe(),
           ", expected i32 (N, k)");
  const int64_t N = experts.dim(0), k = experts.dim(1), E = num_experts;
  DT_CHECK(E >= 1 && E <= std::numeric_limits<int32_t>::max(), op, ": ", E, " experts");
  DT_CHECK(N * k <= std::numeric_limits<int32_t>::max(), op, ": ", N, " x ", k,
           " assignments; rows are numbered in i32, so at most 2^31 - 1");
  DT_CHECK(capacity >= 0, op, ": capacity ", capacity, " is negative (0: no capacity, every assignment kept)");
  expect_dtype(op, "row_of", row_of, DType::i32, device);
  expect_shape(op, "row_of", row_of, experts.shape);
  expect_disjoint(op, "row_of", row_of, "experts", experts);
  if (capacity > 0) {
    DT_CHECK(weights.defined(), op, ": capacity ", capacity,
             " needs the routing weights, which decide what is dropped; pass weights (N, k) f32");
    expect_dtype(op, "weights", weights, DType::f32, device);
    expect_shape(op, "weights", weights, experts.shape);
    expect_disjoint(op, "row_of", row_of, "weights", weights);
  }

  const std::vector<int64_t> counts = [&]() -> std::vector<int64_t> {
    DT_DISPATCH_DEVICE(moe_count_assignments, device, experts, E);
  }();
  if (counts[E] > 0) {
    const std::vector<int32_t> ids = host_values<int32_t>(experts);
    const auto bad = std::find_if(ids.begin(), ids.end(), [&](int32_t e) { return e < 0 || e >= E; });
    const int64_t i = bad - ids.begin();
    DT_CHECK(false, op, ": assignment (token ", i / k, ", slot ", i % k, ") names expert ", *bad, ", outside [0, ", E,
             "); ", counts[E], " of the ", N * k, " assignments do");
  }

  MoeDispatch dispatch{.offsets = std::vector<int64_t>(E + 1, 0), .dropped = std::vector<int64_t>(E, 0)};
  for (int64_t e = 0; e < E; ++e) {
    const int64_t kept = capacity > 0 ? std::min(counts[e], capacity) : counts[e];
    dispatch.dropped[e] = counts[e] - kept;
    dispatch.offsets[e + 1] = dispatch.offsets[e] + kept;
  }
  [&] { DT_DISPATCH_DEVICE(moe_assign_rows, device, row_of, experts, weights, E, capacity); }();
  return dispatch;
}

void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of) {
  constexpr std::string_view op = "moe_permute_forward";
  check_rows(op, "x", x, "permuted", permuted, row_of);
  expect_disjoint(op, "permuted", permuted, "x", x);
  expect_disjoint(op, "permuted", permuted, "row_of", row_of);
  DT_DISPATCH_DEVICE(moe_permute_forward, x.device, permuted, x, row_of);
}

void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of) {
  constexpr std::string_view op = "moe_permute_backward";
  check_rows(op, "dx", dx, "dpermuted", dpermuted, row_of);
  expect_disjoint(op, "dx", dx, "dpermuted", dpermuted);
  expect_disjoint(op, "dx", dx, "row_of", row_of);
  DT_DISPATCH_DEVICE(moe_permute_backward, dx.device, dx, dpermuted, row_of);
}

void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of) {
  constexpr std::string_view op = "moe_unpermute_forward";
  check_rows(op, "out", out, "y", y, row_of);
  check_weights(op, "weights", weights, out.dtype, row_of);
  expect_disjoint(op, "out", out, "y", y);
  expect_disjoint(op, "out", out, "weights", weights);
  expect_disjoint(op, "out", out, "row_of", row_of);
  DT_DISPATCH_DEVICE(moe_unpermute_forward, out.device, out, y, weights, row_of);
}

void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of) {
  constexpr std::string_view op = "moe_unpermute_backward";
  check_rows(op, "dout", dout, "y", y, row_of);
  expect_dtype(op, "dy", dy, y.dtype, y.device);
  expect_shape(op, "dy", dy, y.shape);
  check_weights(op, "weights", weights, y.dtype, row_of);
  check_weights(op, "dweights", dweights, y.dtype, row_of);
  for (const auto& [name, in] : {std::pair{"dout", dout}, {"y", y}, {"weights", weights}, {"row_of", row_of}}) {
    expect_disjoint(op, "dy", dy, name, in);
    expect_disjoint(op, "dweights", dweights, name, in);
  }
  expect_disjoint(op, "dy", dy, "dweights", dweights);
  DT_DISPATCH_DEVICE(moe_unpermute_backward, y.device, dy, dweights, dout, y, weights, row_of);
}

}  // namespace dt::kernels
