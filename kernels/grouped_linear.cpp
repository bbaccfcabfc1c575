#include "kernels/grouped_linear.h"

#include <tuple>

#include "kernels/dispatch.h"
#include "kernels/linear.h"

namespace dt::kernels {

namespace {

// Checks a (G, OC, C) weight or dweight and the activations a (R, a_width) and b (R, b_width)
// (the input and output side of the product), all on one device, and the host offsets (G + 1).
void check(std::string_view op, const char* weight_name, const Tensor& weight, const char* a_name, const Tensor& a,
           int a_width_dim, const char* b_name, const Tensor& b, int b_width_dim, std::span<const int64_t> offsets) {
  DT_CHECK(weight.ndim() == 3, op, ": ", weight_name, " is ", weight.describe(), ", expected (G, OC, C)");
  const int64_t G = weight.dim(0);
  for (const auto& [name, t, width] :
       {std::tuple{a_name, a, weight.dim(a_width_dim)}, {b_name, b, weight.dim(b_width_dim)}})
    DT_CHECK(t.ndim() == 2 && t.dim(1) == width, op, ": ", name, " is ", t.describe(), ", expected (R, ", width, ")");
  DT_CHECK(a.dim(0) == b.dim(0), op, ": ", a_name, " ", a.describe(), " and ", b_name, " ", b.describe(),
           " have different row counts");
  DT_CHECK(static_cast<int64_t>(offsets.size()) == G + 1, op, ": ", offsets.size(), " offsets for ", G,
           " groups; expected G + 1 = ", G + 1);
  DT_CHECK(offsets[0] == 0, op, ": offsets start at ", offsets[0], ", not 0");
  for (int64_t g = 0; g < G; ++g)
    DT_CHECK(offsets[g + 1] >= offsets[g], op, ": offsets[", g + 1, "] = ", offsets[g + 1], " < offsets[", g,
             "] = ", offsets[g], "; a group cannot have a negative row count");
  DT_CHECK(offsets[G] == a.dim(0), op, ": offsets end at ", offsets[G], " but ", a_name, " has ", a.dim(0), " rows");
}

// Group g of a (G, OC, C) tensor as an (OC, C) matrix.
Tensor group(const Tensor& w, int64_t g) { return w.slice_rows(g, 1).reshape({w.dim(1), w.dim(2)}); }

// Calls fn(g, first_row, row_count) for every non-empty group.
template <typename Fn>
void for_each_group(std::span<const int64_t> offsets, Fn&& fn) {
  for (size_t g = 0; g + 1 < offsets.size(); ++g)
    if (offsets[g + 1] > offsets[g]) fn(static_cast<int64_t>(g), offsets[g], offsets[g + 1] - offsets[g]);
}

}  // namespace

// The dtypes are checked here, not left to the per-group linear calls: with every group empty
// there are none, and a mistake must not wait for a batch that routes a token.
void grouped_linear_forward(Tensor out, Tensor inp, Tensor weight, std::span<const int64_t> offsets) {
  constexpr std::string_view op = "grouped_linear_forward";
  expect_storage_dtype(op, weight);
  expect_dtype(op, "inp", inp, weight.dtype, weight.device);
  expect_dtype(op, "out", out, weight.dtype, weight.device);
  check(op, "weight", weight, "inp", inp, 2, "out", out, 1, offsets);
  for_each_group(offsets, [&](int64_t g, int64_t first, int64_t count) {
    linear_forward(out.slice_rows(first, count), inp.slice_rows(first, count), group(weight, g), Tensor{});
  });
}

void grouped_linear_backward_input(Tensor dinp, Tensor dout, Tensor weight, std::span<const int64_t> offsets) {
  constexpr std::string_view op = "grouped_linear_backward_input";
  expect_storage_dtype(op, weight);
  expect_dtype(op, "dout", dout, weight.dtype, weight.device);
  expect_dtype(op, "dinp", dinp, weight.dtype, weight.device);
  check(op, "weight", weight, "dout", dout, 1, "dinp", dinp, 2, offsets);
  for_each_group(offsets, [&](int64_t g, int64_t first, int64_t count) {
    linear_backward_input(dinp.slice_rows(first, count), dout.slice_rows(first, count), group(weight, g));
  });
}

void grouped_linear_backward_weight(Tensor dweight, Tensor dout, Tensor inp, std::span<const int64_t> offsets) {
  constexpr std::string_view op = "grouped_linear_backward_weight";
  expect_storage_dtype(op, inp);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  expect_dtype(op, "dweight", dweight, accumulation_dtype(inp.dtype), inp.device);
  check(op, "dweight", dweight, "inp", inp, 2, "dout", dout, 1, offsets);
  for_each_group(offsets, [&](int64_t g, int64_t first, int64_t count) {
    linear_backward_weight(group(dweight, g), Tensor{}, dout.slice_rows(first, count), inp.slice_rows(first, count));
  });
}

}  // namespace dt::kernels
